/**
 * The project's fused TensorFlow kernels on and off, in one process (#21): the reference SRPO step
 * in alternating blocks of 5 steps with the kernels on and off (configureSrpoKernels), so that a
 * noisy machine slows both alike. Prints the median step time of each and the median of the
 * per-pair ratios. With `--adds`, only the routing of tfjs's adds to `SrpoAdd` is switched; with
 * `--ops A,B`, only the named kernels (every other fused kernel stays on); with `--matmul`, the
 * 2-D products between `SrpoMatMul` (on) and TensorFlow's `MatMul` (off), whatever `auto` picks here;
 * with `--isa gemm|elementwise`, that part of the addon between its AVX-512 (on) and AVX2 (off)
 * builds (setKernelIsa; needs AVX-512F).
 *
 *   npm run build:bench && node dist-bench/bench/learner/fused-ab.js [--pairs 12] [--block 5] [--adds | --ops SrpoAttention | --matmul | --isa elementwise]
 */
import { cpuDescription } from '../cpu';
import { threadEnv } from './bench-common';

function arg(name: string, fallback: number): number {
  const i = process.argv.indexOf(name);
  const v = i >= 0 ? Number(process.argv[i + 1]) : fallback;
  if (!Number.isInteger(v) || v < 1) throw new Error(`${name} must be an integer >= 1`);
  return v;
}

async function main(): Promise<void> {
  const pairs = arg('--pairs', 12);
  const addsOnly = process.argv.includes('--adds');
  const matMulOnly = process.argv.includes('--matmul');
  const opsAt = process.argv.indexOf('--ops');
  const ops = opsAt >= 0 ? (process.argv[opsAt + 1] ?? '').split(',').filter((o) => o.length > 0) : [];
  if (opsAt >= 0 && ops.length === 0) throw new Error('--ops needs a comma-separated list of kernel names');
  const isaAt = process.argv.indexOf('--isa');
  const isaArg = isaAt >= 0 ? process.argv[isaAt + 1] : undefined;
  if (isaAt >= 0 && isaArg !== 'gemm' && isaArg !== 'elementwise') throw new Error('--isa takes gemm or elementwise');
  const isaPart = isaArg as 'gemm' | 'elementwise' | undefined;
  const block = arg('--block', 5);
  // Both settings run in this process: apply the bench's thread settings before TensorFlow loads.
  const env = threadEnv(2);
  for (const k of ['TF_NUM_INTRAOP_THREADS', 'TF_NUM_INTEROP_THREADS', 'TF_CPP_MIN_LOG_LEVEL'] as const) process.env[k] ??= env[k];
  const { initTfBackend } = await import('@srpo/core');
  await initTfBackend('tensorflow');
  const { SrpoTrainer } = await import('@srpo/policy');
  const { configureSrpoKernels, loadSrpoKernels } = await import('@srpo/kernels');
  const { setKernelIsa } = await import('@srpo/kernels/tuning');
  const kernels = loadSrpoKernels();
  if (!kernels.loaded) throw new Error(`the fused kernels are not loaded: ${kernels.reason}`);
  const unknown = ops.filter((o) => !kernels.ops.includes(o));
  if (unknown.length > 0) throw new Error(`--ops: not in kernel set ${kernels.version}: ${unknown.join(', ')}`);
  const { buildWorkload, REFERENCE: w } = await import('./workload');
  const { policy, sets } = await buildWorkload(w);
  const trainer = new SrpoTrainer(policy, { objective: w.objective, schedule: { kind: 'constant', lr: w.lr }, maxGradNorm: w.maxGradNorm });
  for (let i = 0; i < 5; i++) await trainer.update(sets);
  const ms = { on: [] as number[], off: [] as number[] };
  for (let p = 0; p < pairs; p++) {
    for (const mode of ['on', 'off'] as const) {
      if (isaPart) setKernelIsa(isaPart, mode === 'on' ? 'avx512' : 'avx2');
      else if (matMulOnly) configureSrpoKernels({ matMul: mode === 'on' ? 'srpo' : 'tensorflow' });
      else configureSrpoKernels(addsOnly ? { adds: mode === 'on' } : ops.length > 0 ? { except: mode === 'on' ? [] : ops } : { enabled: mode === 'on' });
      await trainer.update(sets); // the first step after a switch builds its kernels
      const t0 = process.hrtime.bigint();
      for (let i = 0; i < block; i++) await trainer.update(sets);
      ms[mode].push(Number(process.hrtime.bigint() - t0) / 1e6 / block);
    }
  }
  configureSrpoKernels({ enabled: true, adds: true, except: [], matMul: 'auto' });
  if (isaPart) setKernelIsa(isaPart, isaPart === 'gemm' ? (kernels.gemmIsa ?? 'avx2') : (kernels.elementwiseIsa ?? 'avx2'));
  const med = (v: number[]): number => [...v].sort((a, b) => a - b)[(v.length - 1) >> 1];
  const ratios = ms.on.map((v, i) => v / ms.off[i]);
  const c = cpuDescription();
  console.log(
    `${isaPart ? `${isaPart} AVX-512 against AVX2` : matMulOnly ? 'SrpoMatMul against MatMul' : addsOnly ? 'SrpoAdd routing' : ops.length > 0 ? ops.join(', ') : 'fused kernels'} A/B, reference workload, ${pairs} pairs of ${block}-step blocks; ${c.model}, ${c.vector}; srpo-kernels.${kernels.version}: ${kernels.ops.join(', ')}`,
  );
  console.log(
    `ms/step: on median ${med(ms.on).toFixed(1)}, off median ${med(ms.off).toFixed(1)}; on/off per pair: median ${med(ratios).toFixed(3)} (${ratios.map((r) => r.toFixed(2)).join(' ')})`,
  );
  trainer.dispose();
  policy.dispose();
}

main().catch((e: unknown) => {
  process.stderr.write(`${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
  process.exit(1);
});
