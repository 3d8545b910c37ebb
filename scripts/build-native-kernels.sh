#!/usr/bin/env bash
# Builds libs/kernels/native/srpo-kernels.cc into libs/kernels/native/build/srpo_kernels.node:
# the learner's fused TensorFlow kernels (see the source's header and docs/benchmarks.md, #21).
#
# Needs g++ (C++17), Node's headers (shipped with node in <prefix>/include/node) and the C API
# headers and libtensorflow_framework.so.2 that @tensorflow/tfjs-node installed. Nothing is
# downloaded. Without them it says what is missing and exits 1 (0 with --optional, which
# `npm run build` passes); the learner then runs the composite paths (same math, slower).
# A build newer than its sources is kept.
#
# Usage: bash scripts/build-native-kernels.sh [--quiet] [--optional] [--force]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
src="$root/libs/kernels/native"
out="$src/build"
deps="$root/node_modules/@tensorflow/tfjs-node/deps"
quiet=0 optional=0 force=0
for arg in "$@"; do
  case "$arg" in
    --quiet) quiet=1 ;;
    --optional) optional=1 ;;
    --force) force=1 ;;
    *) echo "[native-kernels] unknown option $arg" >&2; exit 2 ;;
  esac
done
log() { [[ $quiet == 1 ]] || echo "[native-kernels] $*" >&2; }
missing() {
  echo "[native-kernels] cannot build: $*; the learner will use the composite paths" >&2
  [[ $optional == 1 ]] && exit 0
  exit 1
}

target="$out/srpo_kernels.node"
# Up to date when newer than this script and every source (the .cc and each header it includes).
fresh=0
if [[ $force == 0 && -f "$target" && "$target" -nt "$0" ]]; then
  fresh=1
  for f in "$src"/*.cc "$src"/*.h; do [[ "$target" -nt "$f" ]] || fresh=0; done
fi
if [[ $fresh == 1 ]]; then
  log "up to date: $target"
  exit 0
fi

command -v "${CXX:-g++}" >/dev/null 2>&1 || missing "no C++ compiler (${CXX:-g++}); install g++ or set CXX"
node_include="$(node -p "require('path').resolve(process.execPath, '../../include/node')")"
[[ -f "$node_include/node_api.h" ]] || missing "Node's headers are not at $node_include (install the Node.js package that ships include/node)"
[[ -f "$deps/include/tensorflow/c/tf_tensor.h" ]] || missing "tfjs-node's TensorFlow headers are not at $deps/include (run npm ci first)"
[[ -e "$deps/lib/libtensorflow_framework.so.2" ]] || missing "libtensorflow_framework.so.2 is not in $deps/lib (run npm ci first)"

mkdir -p "$out"
tmp="$out/srpo_kernels.node.tmp.$$"
trap 'rm -f "$tmp"' EXIT
# -mavx2 -mfma: the addon refuses to load on CPUs without them (checked at load).
# -ffast-math: lets GCC vectorise the kernels' loops; the kernels handle their edge cases explicitly.
# -mno-recip: divisions stay exact instead of fast-math's reciprocal estimates (see the source).
"${CXX:-g++}" -std=c++17 -O3 -ffast-math -mno-recip -mavx2 -mfma -fPIC -shared -fvisibility=hidden \
  -I"$node_include" -I"$deps/include" -I"$src" \
  "$src/srpo-kernels.cc" -o "$tmp" \
  -L"$deps/lib" -l:libtensorflow_framework.so.2 -Wl,-rpath,"$deps/lib"
mv "$tmp" "$target"
log "built $target"
