"""QoS profiles used across the stack (explicit, one place).

Every topic's profile is listed in docs/interfaces.md. A best-effort
subscription matches reliable and best-effort publishers alike; a reliable one matches only
reliable publishers: inputs that may come from a driver (a microphone, a camera) are therefore
subscribed best effort.
"""

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
#: audio chunks as we publish them: reliable (ASR needs every sample), deep queue
AUDIO = QoSProfile(depth=200, reliability=ReliabilityPolicy.RELIABLE)
#: audio/input as the ASR node subscribes it: sensor-data QoS (best effort, volatile), so it
#: matches a best-effort microphone driver as well as our reliable publishers (bag playback, the
#: scripted user, ``publish_audio``); deep like AUDIO, so a busy executor drops no block
AUDIO_INPUT = QoSProfile(
    depth=200,
    reliability=qos_profile_sensor_data.reliability,
    durability=qos_profile_sensor_data.durability,
    history=HistoryPolicy.KEEP_LAST,
)
#: /diagnostics: reliable, volatile, as diagnostic_updater publishes it (periodic: not latched)
DIAGNOSTICS = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
#: latched state (teleop override, TTS state): late joiners get the last value
LATCHED = QoSProfile(
    depth=1,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.TRANSIENT_LOCAL,
    history=HistoryPolicy.KEEP_LAST,
)
