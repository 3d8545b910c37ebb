import * as tf from '@tensorflow/tfjs';
import { geluFused, geluGrad } from './fused-ops';
import { loadSrpoKernels } from './srpo-kernels';
import { describeNative } from './test/describe-native';
import { bits, cpuUnderTest, firstMismatch, nativeBackend, seededValues } from './test/fixtures';
import { srpoMatMul, srpoMatMulOp } from './test/gemm-reference';
import { type KernelIsa, type KernelIsaPart, setKernelIsa } from './tuning';

/**
 * The addon's two builds, AVX2 and AVX-512, give the same bits: the elementwise loops built twice
 * (GELU each way, kernel-support.h's SRPO_BOTH_ISAS) and SrpoMatMul's micro-kernels.
 * Both builds run in this process (setKernelIsa) on the same inputs, and every output's bits are
 * compared. Where the CPU has no AVX-512F only the AVX2 build exists, and asking for the other
 * must fail.
 */
const { flags: cpuFlags, capped } = cpuUnderTest();

/** The outputs' bits from each build of `part`, the build in force restored afterwards. */
async function bothBuilds(part: KernelIsaPart, run: () => tf.Tensor[]): Promise<Record<KernelIsa, Uint32Array[]>> {
  const out = {} as Record<KernelIsa, Uint32Array[]>;
  const before = setKernelIsa(part, 'avx2');
  try {
    for (const isa of ['avx2', 'avx512'] as const) {
      setKernelIsa(part, isa);
      const ts = run();
      out[isa] = await Promise.all(ts.map((t) => bits(t)));
      tf.dispose(ts);
    }
  } finally {
    setKernelIsa(part, before);
  }
  return out;
}

/**
 * Values over GELU's whole range: a seeded spread over ±12 (both saturations), the
 * edge cases (±0, ±80 where σ is cut, huge, NaN, ±∞) in long inputs, and a NaN last.
 */
function inputs(n: number, seed: number): Float32Array {
  const x = seededValues(n, seed, 12);
  const edges = [0, -0, 80, -80, 9.4, -9.4, 1e30, -1e30, NaN, Infinity, -Infinity, 1e-30, -1e-38];
  if (n > 1000) edges.forEach((v, i) => (x[(i * 7919) % n] = v));
  x[n - 1] = NaN;
  return x;
}

describeNative(
  ['SrpoGelu', 'SrpoGeluGrad', 'SrpoMatMul', 'SrpoMatMulBias', 'SrpoMatMulBiasResidual', 'SrpoMatMulColumnSum'],
  'srpo-kernels: the AVX2 and AVX-512 builds',
  () => {
    beforeAll(nativeBackend);

    it('start on AVX-512 where the CPU has AVX-512F and ONEDNN_MAX_CPU_ISA does not cap it, and refuse it elsewhere', () => {
      const s = loadSrpoKernels();
      const expected = cpuFlags.has('avx512f') && !capped ? 'avx512' : 'avx2';
      expect(s.elementwiseIsa).toBe(expected);
      expect(s.gemmIsa).toBe(expected);
      expect(() => setKernelIsa('elementwise', 'avx1' as KernelIsa)).toThrow(/setIsa takes a part .* and an isa/);
      expect(() => setKernelIsa('attention' as KernelIsaPart, 'avx2')).toThrow(/setIsa takes a part/);
      if (!cpuFlags.has('avx512f')) expect(() => setKernelIsa('elementwise', 'avx512')).toThrow(/no AVX-512F/);
      // Switching returns the build that was in force.
      const before = setKernelIsa('elementwise', 'avx2');
      expect(before).toBe(expected);
      expect(setKernelIsa('elementwise', before)).toBe('avx2');
    });

    it('GELU, each way, gives the same bits from both builds', async () => {
      if (!cpuFlags.has('avx512f')) return; // one build only (the refusal is checked above)
      // Above the pool's inline size (both threads, each range a multiple of 16 but the last), and
      // small ones that run inline: every remainder of the 16- and 8-float loops.
      for (const n of [40_000 + 13, 37, 1]) {
        const x = tf.tensor2d(inputs(n, 3 + n), [1, n]);
        const dy = tf.tensor2d(seededValues(n, 5 + n, 2), [1, n]);
        const out = await bothBuilds('elementwise', () => [geluFused(x) as tf.Tensor, geluGrad(x, dy)]);
        out.avx2.forEach((b, i) => expect([n, i, firstMismatch(out.avx512[i], b)]).toEqual([n, i, -1]));
        // Something to compare: GELU is not the identity here, and the NaN came through.
        const y = new Float32Array(out.avx2[0].buffer);
        const xs = x.dataSync();
        expect(y[n - 1]).toBeNaN();
        if (n > 1) expect(y.filter((v, i) => Math.abs(v - xs[i]) > 1e-3).length).toBeGreaterThan(n / 4);
        tf.dispose([x, dy]);
      }
    });

    it('SrpoMatMul and its epilogues give the same bits from both micro-kernels', async () => {
      if (!cpuFlags.has('avx512f')) return;
      // Shapes past one tile of either kernel (6 × 16, 12 × 32), with edges, and K past one block
      // (256); the last one long enough for K segments (gemm-ops.h), the third one short.
      for (const [m, n, k] of [
        [37, 45, 300],
        [130, 70, 64],
        [40, 70, 2100],
      ]) {
        const a = tf.tensor2d(seededValues(m * k, 11, 2), [m, k]);
        const b = tf.tensor2d(seededValues(k * n, 12, 2), [k, n]);
        const bias = tf.tensor1d(seededValues(n, 13));
        const h = tf.tensor2d(seededValues(m * n, 14), [m, n]);
        const at = tf.tensor2d(seededValues(k * m, 15, 2), [k, m]);
        const bt = tf.transpose(b);
        const out = await bothBuilds('gemm', () => [
          srpoMatMul(a, b),
          srpoMatMul(a, bt, false, true),
          ...srpoMatMulOp('SrpoMatMulBiasResidual', [a, b, bias, h]),
          ...srpoMatMulOp('SrpoMatMulColumnSum', [at, b], true),
        ]);
        out.avx2.forEach((x, i) => expect([m, n, k, i, firstMismatch(out.avx512[i], x)]).toEqual([m, n, k, i, -1]));
        tf.dispose([a, b, bias, h, at, bt]);
      }
    });
  },
);
