#!/usr/bin/env bash
# Builds the self-contained bundle that bench/learner/gpu/device-run.sh runs on a
# lent GPU machine (no package registries there, maybe no Node, 64 MiB per call):
#
#   OUT/node.xz          this machine's Node binary (glibc; xz keeps it near 25 MB)
#   OUT/bench.js         bench/learner/run.ts with @srpo/*, tfjs and tfjs-backend-webgpu inlined
#                        (tfjs-node stays external: libtensorflow is 850 MB and does not travel)
#   OUT/probe.js         libs/policy/src/test/backend-probe.ts, likewise (numerics on the GPU)
#   OUT/cpu-probe.json   that probe's output on native TensorFlow here, and OUT/sets.json its batch
#   OUT/dawn.node.xz     Dawn from the npm package `webgpu`
#   OUT/torch_learner.py the PyTorch twin of the step
#   OUT/debs/*.deb       Debian's Vulkan loader (libvulkan1) and libglvnd (NVIDIA's Vulkan ICD,
#                        libGLX_nvidia.so.0, needs libGLdispatch), unpacked on arrival
#   OUT/device-run.sh    the script to run there
#
#   bench/learner/gpu/make-bundle.sh [OUT]     (default: .gpu-bundle, which .gitignore lists)
#
# Needs, here: node_modules with `webgpu` and `@tensorflow/tfjs-backend-webgpu`
# (SRC=<tree> to take them from another checkout), esbuild (ESBUILD=<binary>, else
# `npx --no-install esbuild`), xz, and apt-get for the .deb.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../../.." && pwd)"
SRC="${SRC:-$ROOT}"
OUT="$(mkdir -p "${1:-$ROOT/.gpu-bundle}" && cd "${1:-$ROOT/.gpu-bundle}" && pwd)"
ESBUILD="${ESBUILD:-npx --no-install esbuild}"
log() { echo "[bundle] $*" >&2; }

dawn="$SRC/node_modules/webgpu/dist/linux-x64/dawn.node"
[[ -f "$dawn" ]] || { log "missing $dawn: install the npm package webgpu@0.6.2 in $SRC"; exit 1; }
[[ -d "$SRC/node_modules/@tensorflow/tfjs-backend-webgpu" ]] || { log "missing @tensorflow/tfjs-backend-webgpu in $SRC"; exit 1; }

for pair in bench:bench/learner/run.ts probe:libs/policy/src/test/backend-probe.ts; do
  log "${pair%%:*}.js (esbuild, from $SRC)"
  (cd "$SRC" && $ESBUILD "${pair#*:}" --bundle --platform=node --format=cjs --target=node20 \
    --tsconfig=tsconfig.json --external:@tensorflow/tfjs-node --external:@tensorflow/tfjs-node-gpu --external:'*.node' \
    --log-level=error --outfile="$OUT/${pair%%:*}.js")
done
log "cpu-probe.json (native TensorFlow here: the reference the GPU run is checked against)"
(cd "$SRC" && node libs/policy/src/test/run-ts.js libs/policy/src/test/backend-probe.ts tensorflow 2>/dev/null) > "$OUT/cpu-probe.json"
python3 -c 'import json,sys; json.dump(json.load(open(sys.argv[1]))["sets"], open(sys.argv[2], "w"))' "$OUT/cpu-probe.json" "$OUT/sets.json"

if [[ ! -s "$OUT/node.xz" || "$(command -v node)" -nt "$OUT/node.xz" ]]; then
  log "node.xz ($(node --version))"
  xz -T0 -6 -c "$(command -v node)" > "$OUT/node.xz"
fi
if [[ ! -s "$OUT/dawn.node.xz" || "$dawn" -nt "$OUT/dawn.node.xz" ]]; then
  log "dawn.node.xz"
  xz -T0 -6 -c "$dawn" > "$OUT/dawn.node.xz"
fi
cp "$ROOT/bench/learner/torch_learner.py" "$ROOT/bench/learner/gpu/device-run.sh" "$OUT/"

debs=(libvulkan1 libglvnd0 libglx0 libgl1 libegl1 libopengl0 libgles2)
if ! (for d in "${debs[@]}"; do ls "$OUT/debs/${d}"_*.deb >/dev/null 2>&1 || exit 1; done); then
  log "${debs[*]} .deb (apt-get download, amd64)"
  mkdir -p "$OUT/debs" /tmp/srpo-apt-amd64/partial
  o=(-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/srpo-apt-amd64)
  apt-get "${o[@]}" update -qq
  (cd "$OUT/debs" && apt-get "${o[@]}" download "${debs[@]}")
fi
du -sh "$OUT"/* >&2
log "total $(du -sh "$OUT" | cut -f1) in $OUT"
