// SrpoMatMul's two micro-kernels on one core (run.sh): each shape through gemm_block with the
// shared operand packed as gemm-ops.h does, timed best of 5 x 10, and every element compared with
// a float32 fused multiply-add chain (std::fma) in k order. Not a timed test.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <vector>
#include <immintrin.h>
#include <random>
#include <cmath>
typedef float v8f __attribute__((vector_size(32)));
inline v8f load8(const float* p) { v8f v; std::memcpy(&v, p, sizeof v); return v; }
inline void store8(float* p, v8f v) { std::memcpy(p, &v, sizeof v); }
constexpr int64_t kRowGroup = 64;  // optimizer-kernels.h's row group, which gemm-kernels.h's column sums follow
#include "aligned-space.h"
#include "gemm-kernels.h"
struct Shape { int64_t m, n, k; bool ta, tb; };
template <class K> double run(const GemmArgs& g, int reps) {
  static AlignedFloats space(kGemmPackA + kGemmPackB);
  static AlignedFloats shared;
  bool split_rows = g.m >= g.n;
  GemmArgs gi = g;
  gi.b_in_place = !split_rows && !g.trans_b;  // as gemm-ops.h's column pieces
  int64_t sf = g.k * (split_rows ? gemm_padded(g.n, K::kNr) : gemm_padded(g.m, K::kMr));
  shared.resize(sf);
  auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; r++) {
    if (split_rows) { pack_b_all<K>(g, 0, g.n, shared.data()); gemm_block<K>(g, 0, g.m, 0, g.n, space.data(), space.data() + kGemmPackA, nullptr, shared.data()); }
    else { pack_a_all<K>(g, 0, g.m, shared.data()); gemm_block<K>(gi, 0, g.m, 0, g.n, space.data(), space.data() + kGemmPackA, shared.data(), nullptr); }
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
}
int main() {
  Shape shapes[] = {{100,37,300,0,0},{37,100,300,0,1},{45,400,520,1,0},{400,45,520,0,1},{2048,384,128,0,0},{2048,128,128,0,0},{2048,512,128,0,0},{2048,128,512,0,0},{2048,64,128,0,1},
                    {2048,128,384,0,1},{2048,128,512,0,1},{2048,512,128,0,1},{128,384,2048,1,0},{128,512,2048,1,0},{512,128,2048,1,0},{128,128,2048,1,0}};
  std::mt19937 rng(1); std::uniform_real_distribution<float> u(-1,1);
  double t2s = 0, t5s = 0;
  for (auto s : shapes) {
    AlignedFloats a(s.m * s.k), b(s.k * s.n), c1(s.m * s.n), c2(s.m * s.n);  // aligned, as TensorFlow's tensors are
    for (auto& x : a) x = u(rng); for (auto& x : b) x = u(rng);
    GemmArgs g{s.m, s.n, s.k, a.data(), s.ta ? s.m : s.k, s.ta, b.data(), s.tb ? s.k : s.n, s.tb, c1.data(), s.n};
    run<GemmAvx2>(g, 3); double t2 = 1e9; for (int i = 0; i < 5; i++) t2 = std::min(t2, run<GemmAvx2>(g, 10));
    g.c = c2.data();
    run<GemmAvx512>(g, 3); double t5 = 1e9; for (int i = 0; i < 5; i++) t5 = std::min(t5, run<GemmAvx512>(g, 10));
    bool same = std::memcmp(c1.data(), c2.data(), c1.size() * 4) == 0;
    for (int64_t i = 0; i < s.m; i++) for (int64_t j = 0; j < s.n; j++) {
      float acc = 0; for (int64_t p = 0; p < s.k; p++) acc = std::fma(s.ta ? a[p * s.m + i] : a[i * s.k + p], s.tb ? b[j * s.k + p] : b[p * s.n + j], acc);
      if (acc != c1[i * s.n + j]) { same = false; }
    }
    double gf = 2.0 * s.m * s.n * s.k;
    printf("%5ld %5ld %5ld ta%d tb%d  avx2 %7.1f us %6.1f GF/s  avx512 %7.1f us %6.1f GF/s  x%.2f %s\n", s.m, s.n, s.k, s.ta, s.tb, t2*1e6, gf/t2/1e9, t5*1e6, gf/t5/1e9, t2/t5, same ? "same bits" : "DIFFERENT");
    if (s.m * s.n * s.k >= (1 << 24)) t2s += t2, t5s += t5;  // the step's shapes, not the edge cases
  }
  printf("total of the step's twelve shapes: avx2 %.1f us, avx512 %.1f us\n", t2s * 1e6, t5s * 1e6);
}
