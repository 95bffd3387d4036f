#!/usr/bin/env bash
# Jetson image entrypoint: source ROS 2 and the workspace, then launch the stack with the
# container's arguments (launch arguments, e.g. profile:=blacksmith_npc llm_model:=bolt-e4b-q4km).
# A first argument that is not NAME:=VALUE runs as a command instead (bash, ros2 topic list, ...).
# No `set -u`: the setup scripts read unset variables.
set -eo pipefail

# shellcheck source=/dev/null
source "/opt/ros/${ROS_DISTRO:-humble}/setup.bash"
# shellcheck source=/dev/null
source "${BOLT_WS:-/ws}/install/setup.bash"

if [[ $# -gt 0 && "$1" != *:=* ]]; then
  exec "$@"
fi
exec ros2 launch bolt_agent bolt_agent.launch.py "$@"
