#!/usr/bin/env bash
# bench/learner on a lent GPU machine, from the bundle make-bundle.sh builds:
# the SRPO step on WebGPU (Dawn on the machine's Vulkan driver) next to PyTorch
# on the machine's CPU (its 16 cores) and, for context, PyTorch on the GPU.
# tfjs-node's libtensorflow (850 MB) does not travel, so the native CPU figure
# comes from the development machine (docs/gpu.md says which is which).
#
#   bash .gpu-bundle/device-run.sh 2>&1 | tee $OUT/run.log    (device: $OUT comes back)
#   QUICK=1 bash .gpu-bundle/device-run.sh  (smoke run on a software Vulkan driver)
set -uo pipefail
B="$(cd "$(dirname "$0")" && pwd)"
OUT="${OUT:-/tmp/srpo-gpu-out}"
W=/tmp/srpo-gpu
mkdir -p "$OUT" "$W"
log() { echo "[device-run $(date +%T)] $*"; }
unxz_to() { python3 -c 'import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],"wb"))' "$1" "$2" 2>/dev/null || xz -dc "$1" > "$2"; }

# Node: the machine's if it is 20+, else the carried one.
if command -v node >/dev/null 2>&1 && node -e 'process.exit(+process.versions.node.split(".")[0] >= 20 ? 0 : 1)'; then
  NODE=node
else
  unxz_to "$B/node.xz" "$W/node" && chmod +x "$W/node" && NODE="$W/node"
fi
log "node $("$NODE" --version) ($NODE)"
unxz_to "$B/dawn.node.xz" "$W/dawn.node"
export SRPO_DAWN_NODE="$W/dawn.node"

# Vulkan loader and the NVIDIA ICD (see .library/device/README.md). The ICD is
# libGLX_nvidia.so.0, which loads only with libglvnd's libGLdispatch beside it:
# without it the loader reports "Found no drivers" and Dawn offers no adapter.
if ! ldconfig -p | grep -q 'libvulkan\.so\.1 ' || ! ldconfig -p | grep -q 'libGLdispatch\.so\.0 '; then
  for f in "$B"/debs/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
for icd in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/share/vulkan/icd.d/nvidia_icd.json /etc/vulkan/icd.d/nvidia_icd.json; do
  if [[ -f "$icd" ]]; then export VK_DRIVER_FILES="$icd"; break; fi
done
log "VK_DRIVER_FILES=${VK_DRIVER_FILES:-<loader default>}"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv 2>/dev/null | tee "$OUT/gpu.txt"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2) x $(nproc)" | tee -a "$OUT/gpu.txt"

# 0. Which adapter Dawn offers, then the numerics: the policy probe on WebGPU
#    against native TensorFlow's output from the development machine (same batch).
log "== adapter"
"$NODE" -e '
const d = require(process.env.SRPO_DAWN_NODE);
d.create([]).requestAdapter({ powerPreference: "high-performance" }).then((a) => {
  console.log(a ? JSON.stringify({ ...Object.fromEntries(["vendor", "architecture", "device", "description", "isFallbackAdapter"].map((k) => [k, a.info[k]])), maxBufferSize: a.limits.maxBufferSize, maxStorageBufferBindingSize: a.limits.maxStorageBufferBindingSize }) : "no adapter");
  process.exit(0);
});' 2>&1 | grep -v 'artificially reduced' | tee -a "$OUT/gpu.txt"
log "== numerics: probe.js webgpu vs cpu-probe.json"
timeout 120 "$NODE" "$B/probe.js" webgpu "$B/sets.json" "$B/cpu-probe.json" > "$OUT/gpu-probe.json" 2> "$W/probe.err"
echo "probe exit $?"
grep -v -E 'artificially reduced|"level"' "$W/probe.err" | grep -E 'FAIL|checks pass|Error' | head -20

if [[ "${QUICK:-0}" == 1 ]]; then
  LARGE=(--rounds 1 --steps 1 --warmup 1 --sequences 1)
  LARGE_AB=("${LARGE[@]}")
  REF=(--rounds 1 --steps 2 --warmup 1 --sequences 4)
  T_LARGE=600 T_AB=300 T_REF=120
else
  LARGE=(--rounds 2 --steps 10 --warmup 3)
  LARGE_AB=(--rounds 1 --steps 10 --warmup 3)
  REF=(--rounds 1 --steps 20 --warmup 3)
  T_LARGE=150 T_AB=75 T_REF=45
fi

bench() { # name timeout args...
  local name=$1 t=$2
  shift 2
  log "== $name: bench.js $*"
  # Only the JSON summaries go to $OUT: at most 8 files come back from the device.
  timeout "$t" "$NODE" "$B/bench.js" "$@" --out "$OUT/$name.json" > "$W/$name.log" 2> "$W/$name.err"
  local rc=$?
  grep -v 'artificially reduced' "$W/$name.err" | tail -n 5
  cat "$W/$name.log"
  [[ $rc == 0 ]] || log "$name exited $rc"
}

# 1. The figure of record: large model, WebGPU vs PyTorch on all CPU cores.
bench large "$T_LARGE" --backend webgpu --config large --no-native --torch-device cpu "${LARGE[@]}"
# 2. The same without the WebGPU-shaped composites (A/B), with PyTorch on the GPU for context.
bench large-ab "$T_AB" --backend webgpu --config large --no-native --torch-device cuda --webgpu-layout off "${LARGE_AB[@]}"
# 3. The reference (small) model: per-op overhead dominates there.
bench reference "$T_REF" --backend webgpu --config reference --no-native --torch-device cuda "${REF[@]}"
log "done; results in $OUT"
