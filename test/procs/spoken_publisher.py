"""Test process: publish N SpokenText messages on `speech/say` once a subscriber matched."""

import sys
import time

import rclpy

from bolt_agent.nodes.qos import RELIABLE
from bolt_agent_interfaces.msg import SpokenText


def main() -> None:
    count = int(sys.argv[1])
    rclpy.init()
    node = rclpy.create_node("spoken_publisher")
    pub = node.create_publisher(SpokenText, "speech/say", RELIABLE)
    while pub.get_subscription_count() == 0:
        rclpy.spin_once(node, timeout_sec=0.05)
    for i in range(count):
        pub.publish(
            SpokenText(
                turn_id="t-proc", seq=i, text=f"sentence {i}", is_last_in_turn=i == count - 1
            )
        )
    end = time.monotonic() + 30  # stay until the subscriber leaves (reliable delivery)
    while pub.get_subscription_count() > 0 and time.monotonic() < end:
        rclpy.spin_once(node, timeout_sec=0.05)
    node.destroy_node()
    rclpy.shutdown()


if __name__ == "__main__":
    main()
