"""Deterministic mixed traffic for the bag tests (our custom types and a standard one).

Imported by the tests (expected messages) and run as a process (the publisher):
``python test/bag_traffic.py --ros-args -r __ns:=/x`` publishes once every topic has a subscriber.
"""

from __future__ import annotations

import math
import sys
import time
from array import array

from builtin_interfaces.msg import Time
from std_msgs.msg import Header, String

from bolt_agent_interfaces.msg import AudioChunk, SpokenText

#: relative topic → message class
TOPICS = {"speech/say": SpokenText, "audio/input": AudioChunk, "chatter": String}
#: pause after each message, seconds (irregular on purpose: playback must keep it)
GAPS = [0.05, 0.12, 0.04, 0.2, 0.06, 0.1, 0.05, 0.15, 0.08, 0.0]


def traffic() -> list[tuple[str, object]]:
    """(relative topic, message) in publishing order."""
    out: list[tuple[str, object]] = []
    for i in range(len(GAPS)):
        header = Header(stamp=Time(sec=100 + i, nanosec=i * 1000), frame_id="mic")
        if i % 3 == 0:
            samples = array("h", (int(8000 * math.sin(0.05 * (n + i))) for n in range(1600)))
            out.append(("audio/input", AudioChunk(header=header, sample_rate=16000, channels=1,
                                                  samples=samples)))  # fmt: skip
        elif i % 3 == 1:
            out.append(("speech/say", SpokenText(header=header, turn_id="turn-7", seq=i,
                                                 text=f"Fine steel, number {i}.",
                                                 is_last_in_turn=i == 7)))  # fmt: skip
        else:
            out.append(("chatter", String(data=f"hello {i} ünïcode")))
    return out


def main() -> None:
    import rclpy

    from bolt_agent.nodes.qos import RELIABLE

    rclpy.init(args=sys.argv)
    node = rclpy.create_node("bag_traffic")
    pubs = {t: node.create_publisher(cls, t, RELIABLE) for t, cls in TOPICS.items()}
    while not all(p.get_subscription_count() > 0 for p in pubs.values()):
        rclpy.spin_once(node, timeout_sec=0.02)
    print("matched", flush=True)
    for (topic, msg), gap in zip(traffic(), GAPS):
        pubs[topic].publish(msg)
        time.sleep(gap)  # the traffic's own timing, which the bag must keep
    print("published", flush=True)
    try:
        while rclpy.ok():
            rclpy.spin_once(node, timeout_sec=0.1)
    except KeyboardInterrupt:
        pass
    node.destroy_node()
    rclpy.try_shutdown()


if __name__ == "__main__":
    main()
