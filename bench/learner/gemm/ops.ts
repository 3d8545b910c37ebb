/**
 * `SrpoMatMul` and `SrpoMatMulColumnSum` called directly through tfjs-node on the reference
 * step's product shapes, on the bench's two threads: per shape the best of 5 × 10 calls (after
 * 10), in µs and GFLOP/s, and the weight gradients' total. Compare with `python3
 * bench/learner/gemm/mkl.py 2` in the same minutes (PyTorch's MKL on the same shapes). Not a
 * timed test; run it on a quiet machine (docs/benchmarks.md, #21).
 *
 *   npm run build:bench && node dist-bench/bench/learner/gemm/ops.js
 */
import type * as tfjs from '@tensorflow/tfjs';
import { cpuDescription } from '../../cpu';
import { threadEnv } from '../bench-common';

/** [m, n, k, transpose_a, transpose_b]: op(A) [m, k]·op(B) [k, n], as mkl.py lists them. */
type Shape = [number, number, number, boolean, boolean];

/** The weight gradients Xᵀ·dY with their bias gradients (SrpoMatMulColumnSum), then the forward and input-gradient products. */
const WEIGHT_GRADIENTS: Shape[] = [
  [128, 384, 2048, true, false],
  [128, 512, 2048, true, false],
  [512, 128, 2048, true, false],
  [128, 128, 2048, true, false],
];
const OTHERS: Shape[] = [
  [2048, 384, 128, false, false],
  [2048, 128, 128, false, false],
  [2048, 512, 128, false, false],
  [2048, 128, 512, false, false],
  [2048, 64, 128, false, true],
  [2048, 128, 384, false, true],
  [2048, 128, 512, false, true],
  [2048, 512, 128, false, true],
];

interface Executor {
  binding: { TF_ATTR_BOOL: number };
  executeMultipleOutputs(name: string, attrs: { name: string; type: number; value: boolean }[], inputs: tfjs.Tensor[], n: number): tfjs.Tensor[];
}

async function main(): Promise<void> {
  const env = threadEnv(2);
  for (const k of ['TF_NUM_INTRAOP_THREADS', 'TF_NUM_INTEROP_THREADS', 'TF_CPP_MIN_LOG_LEVEL'] as const) process.env[k] ??= env[k];
  const { initTfBackend } = await import('@srpo/core');
  await initTfBackend('tensorflow');
  const tf = await import('@tensorflow/tfjs');
  const { loadSrpoKernels } = await import('@srpo/kernels');
  const kernels = loadSrpoKernels();
  if (!kernels.loaded) throw new Error(`the fused kernels are not loaded: ${kernels.reason}`);
  const be = tf.backend() as unknown as Executor;
  const c = cpuDescription();
  console.log(
    `SrpoMatMul on the reference step's shapes, 2 threads; ${c.model}, ${c.vector}; srpo-kernels.${kernels.version}, ${kernels.gemmIsa} micro-kernel`,
  );
  const time = (shape: Shape, withSums: boolean): number => {
    const [m, n, k, ta, tb] = shape;
    const a = tf.randomNormal(ta ? [k, m] : [m, k]);
    const b = tf.randomNormal(tb ? [n, k] : [k, n]);
    const attrs = [
      { name: 'transpose_a', type: be.binding.TF_ATTR_BOOL, value: ta },
      { name: 'transpose_b', type: be.binding.TF_ATTR_BOOL, value: tb },
    ];
    // Eager tfjs-node runs each op to completion before returning: no sync is needed.
    const call = (): void => tf.dispose(be.executeMultipleOutputs(withSums ? 'SrpoMatMulColumnSum' : 'SrpoMatMul', attrs, [a, b], withSums ? 2 : 1));
    for (let i = 0; i < 10; i++) call();
    let best = Infinity;
    for (let r = 0; r < 5; r++) {
      const t0 = process.hrtime.bigint();
      for (let i = 0; i < 10; i++) call();
      best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e4);
    }
    tf.dispose([a, b]);
    console.log(
      `${String(m).padStart(5)} ${String(n).padStart(5)} ${String(k).padStart(5)} ta${+ta} tb${+tb}${withSums ? ' +sums' : '      '} ${best.toFixed(1).padStart(8)} us ${((2 * m * n * k) / best / 1e3).toFixed(1).padStart(6)} GF/s`,
    );
    return best;
  };
  let weights = 0;
  for (const s of WEIGHT_GRADIENTS) weights += time(s, true);
  let others = 0;
  for (const s of OTHERS) others += time(s, false);
  console.log(`weight gradients ${weights.toFixed(0)} us, the other shapes ${others.toFixed(0)} us, all ${(weights + others).toFixed(0)} us`);
}

main().catch((e: unknown) => {
  process.stderr.write(`${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
  process.exit(1);
});
