#!/usr/bin/env bash
# Builds the #21 experiment (see srpo_kernels.cc and docs/benchmarks.md): the addon against
# tfjs-node's libtensorflow, and OpenBLAS from the scipy-openblas32 wheel, under .srpo/tf-kernel-addon.
# Usage: bash bench/learner/tf-kernel-addon/build.sh   (then: node bench/learner/tf-kernel-addon/ab.js)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
out="$root/.srpo/tf-kernel-addon"
deps="$root/node_modules/@tensorflow/tfjs-node/deps"
node_inc="$(dirname "$(dirname "$(command -v node)")")/include/node"
mkdir -p "$out"
if [ ! -f "$out/blas/scipy_openblas32/lib/libscipy_openblas.so" ]; then
  python3 -m pip download --no-deps --only-binary=:all: scipy-openblas32==0.3.34.481.3 -d "$out/wheel" -q
  python3 -m zipfile -e "$out"/wheel/scipy_openblas32-*.whl "$out/blas"
fi
g++ -O2 -shared -fPIC -std=c++17 -I"$here" -I"$root/libs/policy/native" -I"$node_inc" -I"$deps/include" \
  "$here/srpo_kernels.cc" -o "$out/srpo_kernels.node" \
  -L"$deps/lib" -l:libtensorflow_framework.so.2 -l:libtensorflow.so.2 -Wl,-rpath,"$deps/lib" \
  -DNODE_GYP_MODULE_NAME=srpo_kernels
echo "built $out/srpo_kernels.node; SRPO_BLAS_LIB=$out/blas/scipy_openblas32/lib/libscipy_openblas.so"
