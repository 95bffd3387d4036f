#!/usr/bin/env bash
# GPU check for the Jetson memory plan (docs/memory.md). Two steps:
#
#   bench/gpu_check.sh prepare   # here (CPU, registry access): .cache/gpu_check/ = trimmed
#                                # llama-cpp-python 0.3.36 source + wheelhouse (< 64 MiB)
#   bench/gpu_check.sh           # on the GPU machine (no network), <= 8 minutes:
#                                #   run(command="bench/gpu_check.sh", carry=[".cache/gpu_check"])
#
# The run builds llama-cpp-python with CUDA for the detected architecture only, then runs
#   1. bolt_agent.benchmarks.gpu_memory_check: the Jetson profile's llm_node settings (all layers
#      offloaded, q8_0 KV, n_ubatch 64, embeddings mmap) on a generated tiny Gemma 4 (or
#      $GPU_CHECK_MODEL): llama.cpp's buffers per device and nvidia-smi next to the plan's formulas;
#   2. bolt_agent.benchmarks.speculative_bench --synthetic: plain vs n-gram vs DFlash on the GPU;
#   3. bolt-agent jetson-plan --json: the plan's figures, for the README line.
# Results: $OUT (or bench_out/gpu_check) / gpu_check.json + the parts' JSON and logs.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CACHE=$ROOT/.cache/gpu_check
LCP_VERSION=0.3.36

if [[ "${1:-}" == "prepare" ]]; then
  mkdir -p "$CACHE/wheels" "$CACHE/src"
  SDIST=${LLAMA_SDIST:-/tmp/lcp/llama_cpp_python-$LCP_VERSION.tar.gz}
  if [[ ! -f "$SDIST" ]]; then
    pip download "llama-cpp-python==$LCP_VERSION" --no-deps --no-binary :all: -d "$CACHE/src"
    SDIST=$CACHE/src/llama_cpp_python-$LCP_VERSION.tar.gz
  fi
  TMP=$(mktemp -d)
  tar -xzf "$SDIST" -C "$TMP"
  # not needed for a CUDA build: docs, vocab test models, benches, the web UI, other backends
  rm -rf "$TMP/llama_cpp_python-$LCP_VERSION/.git"   # a 38 MB pack of the submodule history
  LC="$TMP/llama_cpp_python-$LCP_VERSION/vendor/llama.cpp"
  rm -rf "${LC:?}"/{models,docs,media,benches,tools/ui,tools/server/public}
  for b in hexagon sycl vulkan opencl cann musa metal webgpu zdnn openvino virtgpu rpc; do
    rm -rf "$LC/ggml/src/ggml-$b"
  done
  tar -cJf "$CACHE/llama_cpp_python-$LCP_VERSION-trimmed.tar.xz" -C "$TMP" "llama_cpp_python-$LCP_VERSION"
  rm -rf "$TMP" "$CACHE/src"
  # build backend + what bolt_agent's core and the benchmarks import (CPython 3.11, x86_64)
  pip download -d "$CACHE/wheels" --no-deps --only-binary :all: --python-version 3.11 \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform any \
    scikit-build-core packaging pathspec cmake ninja numpy pyyaml jinja2 markupsafe gguf tqdm \
    diskcache typing-extensions
  du -sh "$CACHE"
  exit 0
fi

START=$(date +%s)
left() { echo $(( 470 - ($(date +%s) - START) )); }   # 8 min, less a margin for the copy back
OUT_DIR=${OUT:-$ROOT/bench_out/gpu_check}
mkdir -p "$OUT_DIR"
command -v nvidia-smi >/dev/null || { echo "no nvidia-smi: not a GPU machine" >&2; exit 2; }
nvidia-smi --query-gpu=name,compute_cap,memory.used,memory.total --format=csv | tee "$OUT_DIR/nvidia_smi.csv"
ARCH=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d ' .')
PY=${PYTHON:-python3}
VENV=${GPU_CHECK_VENV:-/tmp/bolt_gpu_venv}
"$PY" -m venv --system-site-packages "$VENV"
# shellcheck disable=SC1091
. "$VENV/bin/activate"
PIP=(pip install --disable-pip-version-check --no-index --find-links "$CACHE/wheels")
"${PIP[@]}" scikit-build-core cmake ninja numpy pyyaml jinja2 gguf tqdm diskcache typing-extensions \
  >"$OUT_DIR/pip.log" 2>&1 \
  || { echo "wheelhouse install failed (see pip.log); run 'bench/gpu_check.sh prepare' first" >&2; exit 3; }
SRC=$(mktemp -d)
tar -xJf "$CACHE/llama_cpp_python-$LCP_VERSION-trimmed.tar.xz" -C "$SRC"

echo "building llama-cpp-python $LCP_VERSION with CUDA sm_$ARCH ($(left) s left)"
export CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=$ARCH -DGGML_NATIVE=on -DLLAMA_BUILD_TESTS=off -DLLAMA_BUILD_EXAMPLES=off -DLLAMA_BUILD_TOOLS=off -DLLAMA_BUILD_SERVER=off -DLLAVA_BUILD=off"
CMAKE_BUILD_PARALLEL_LEVEL=$(nproc)
export CMAKE_BUILD_PARALLEL_LEVEL
T0=$(date +%s)
timeout "$(( $(left) - 150 ))" "${PIP[@]}" --no-build-isolation --no-deps --force-reinstall \
  "$SRC/llama_cpp_python-$LCP_VERSION" >"$OUT_DIR/build.log" 2>&1 \
  || { tail -40 "$OUT_DIR/build.log" >&2; echo "CUDA build failed or ran out of time" >&2; exit 4; }
BUILD_S=$(( $(date +%s) - T0 ))
export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}

MODEL_ARGS=()
[[ -n "${GPU_CHECK_MODEL:-}" ]] && MODEL_ARGS=(--model "$GPU_CHECK_MODEL")
timeout "$(( $(left) - 100 ))" python -m bolt_agent.benchmarks.gpu_memory_check "${MODEL_ARGS[@]}" \
  --out "$OUT_DIR/gpu_memory.json" >"$OUT_DIR/gpu_memory.log" 2>&1 || echo "gpu_memory_check failed" >&2
timeout "$(( $(left) - 20 ))" python -m bolt_agent.benchmarks.speculative_bench --synthetic /tmp/bolt_syn \
  --n-gpu-layers -1 --threads 8 --out "$OUT_DIR/spec.json" >"$OUT_DIR/spec.log" 2>&1 || echo "speculative_bench failed" >&2
python -c "
import json
from bolt_agent.benchmarks.jetson_plan import build_plan
print(json.dumps(build_plan()))" >"$OUT_DIR/plan.json" 2>"$OUT_DIR/plan.log" || echo "plan failed" >&2

python - "$OUT_DIR" "$BUILD_S" "$ARCH" <<'PY'
import json, pathlib, sys
out, build_s, arch = pathlib.Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
def load(name):
    p = out / name
    return json.loads(p.read_text()) if p.exists() and p.stat().st_size else None
mem, plan = load("gpu_memory.json"), load("plan.json")
summary = {"cuda_arch": arch, "build_s": build_s, "gpu_memory": mem, "speculative": load("spec.json")}
if plan:
    summary["plan"] = {k: v for k, v in plan.items() if k.endswith("_gb") or "_gb_" in k}
if mem:
    summary["measured_vs_plan_mib"] = {"llama_cpp": mem["llama_cpp_buffers_mib"], "plan": mem["plan_mib"],
                                       "nvidia_smi": mem["nvidia_smi_used_mib"]}
(out / "gpu_check.json").write_text(json.dumps(summary, indent=1))
print(json.dumps(summary.get("measured_vs_plan_mib"), indent=1))
PY
echo "done in $(( $(date +%s) - START )) s"
