#!/usr/bin/env bash
# SrpoMatMul's micro-kernels (libs/kernels/native/gemm-kernels.h) on one core, on the reference
# step's product shapes, beside PyTorch's (MKL) on one core: GFLOP/s per shape, whether the AVX2
# and AVX-512 kernels give the same bits, and both against a float32 FMA chain per element.
# Not a timed test; run it on a quiet machine (docs/benchmarks.md, #21).
#
#   bash bench/learner/gemm/run.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
grep -m1 'model name' /proc/cpuinfo
"${CXX:-g++}" -std=c++17 -O3 -ffast-math -mno-recip -mavx2 -mfma -I"$root/libs/kernels/native" "$here/harness.cc" -o "$out/harness"
if grep -qw avx512f /proc/cpuinfo; then "$out/harness"; else echo "no AVX-512 here: the harness needs it for the AVX-512 kernel"; fi
python3 "$here/mkl.py" 1
