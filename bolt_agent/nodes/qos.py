"""QoS profiles used across the stack (explicit, one place)."""

from rclpy.qos import (
    DurabilityPolicy,
    HistoryPolicy,
    QoSProfile,
    ReliabilityPolicy,
    qos_profile_sensor_data,
)

#: text, commands, events: reliable, a short queue
RELIABLE = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE)
#: camera images: best effort, keep the latest
SENSOR = qos_profile_sensor_data
#: audio chunks: reliable (ASR needs every sample), deep queue
AUDIO = QoSProfile(depth=200, reliability=ReliabilityPolicy.RELIABLE)
#: latched state (teleop override, TTS state): late joiners get the last value
LATCHED = QoSProfile(
    depth=1,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.TRANSIENT_LOCAL,
    history=HistoryPolicy.KEEP_LAST,
)
