#!/usr/bin/env bash
# The same tests on ROS 2 Jazzy (the robot's distro on JetPack 7.2): builds .venv-jazzy with the
# set-up's distro switch, then runs the selection below in it. .ci/run calls it after `make test`
# (Kilted, the whole suite). The selection is every test that starts nodes through the ROS
# tooling a robot uses (ros2 launch, ros2 lifecycle/topic/param/action/service, colcon, bags
# with /clock) plus the node tests of every node kind, about a third of the Kilted run's time: what
# differs between distros is rclpy, rcl and the CLI, not the pure-Python core that the rest
# of the suite exercises. test_distro checks that this run really is on Jazzy.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BOLT_ROS_DISTRO=jazzy bash scripts/bootstrap.sh
# shellcheck disable=SC1091
source .venv-jazzy/bin/activate
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST BOLT_EXPECT_DISTRO=jazzy
echo "== pytest (ROS 2 Jazzy)"
python -m pytest \
  test/test_distro.py \
  test/test_ros2_cli.py \
  test/test_launch_args.py \
  test/test_launch_static.py \
  test/test_lifecycle_gate.py \
  test/test_bag_clock.py \
  test/test_bags.py \
  test/test_colcon_install.py \
  test/test_operator_switch.py \
  test/test_animation_node.py \
  test/test_teleop_node.py \
  test/test_speech_asr.py \
  test/test_speech_tts.py \
  test/test_game_state.py \
  test/test_perception_node.py \
  test/test_llm_node.py \
  test/test_diagnostics.py \
  "$@"
