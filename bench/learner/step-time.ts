/**
 * The tfjs native side's step time alone (no PyTorch), for comparing two builds of the native
 * kernels across processes: run it alternately with each build's addon in place. Not a timed test.
 * `--curve N` instead times the first N steps of a fresh process in windows of 10: the warm-up
 * that run.ts's `--warmup` leaves out (V8 compiling the step's JavaScript as it gets hot).
 *
 *   npm run build:bench && node dist-bench/bench/learner/step-time.js [--steps 30] [--warmup 40] [--curve 80]
 */
import { cpuDescription } from '../cpu';
import { threadEnv } from './bench-common';

async function main(): Promise<void> {
  const intArg = (name: string, fallback: number, min: number): number => {
    const i = process.argv.indexOf(name);
    const v = i >= 0 ? Number(process.argv[i + 1]) : fallback;
    if (!Number.isInteger(v) || v < min) throw new Error(`${name} must be an integer >= ${min}`);
    return v;
  };
  const steps = intArg('--steps', 30, 1);
  const warmup = intArg('--warmup', 40, 0);
  const curve = intArg('--curve', 0, 0);
  // Apply the bench's thread settings before TensorFlow loads.
  const env = threadEnv(2);
  for (const k of ['TF_NUM_INTRAOP_THREADS', 'TF_NUM_INTEROP_THREADS', 'TF_CPP_MIN_LOG_LEVEL'] as const) process.env[k] ??= env[k];
  const { initTfBackend } = await import('@srpo/core');
  const backend = await initTfBackend('tensorflow');
  const { SrpoTrainer } = await import('@srpo/policy');
  const { loadSrpoKernels, backendLabel } = await import('@srpo/kernels');
  const kernels = loadSrpoKernels();
  if (!kernels.loaded) throw new Error(`the fused kernels are not loaded: ${kernels.reason}`);
  const { buildWorkload, REFERENCE: w } = await import('./workload');
  const { policy, sets } = await buildWorkload(w);
  const trainer = new SrpoTrainer(policy, { objective: w.objective, schedule: { kind: 'constant', lr: w.lr }, maxGradNorm: w.maxGradNorm });
  const c = cpuDescription();
  if (curve > 0) {
    const windows: string[] = [];
    for (let s0 = 0; s0 < curve; s0 += 10) {
      const n = Math.min(10, curve - s0);
      const t0 = process.hrtime.bigint();
      for (let s = 0; s < n; s++) await trainer.update(sets);
      windows.push(`${s0}-${s0 + n - 1}: ${(Number(process.hrtime.bigint() - t0) / 1e6 / n).toFixed(1)}`);
    }
    console.log(`ms/step by steps from the first: ${windows.join(', ')}; ${backendLabel({ name: backend.name })}; ${c.model}, ${c.vector}`);
  } else {
    for (let s = 0; s < warmup; s++) await trainer.update(sets);
    const t0 = process.hrtime.bigint();
    for (let s = 0; s < steps; s++) await trainer.update(sets);
    const ms = Number(process.hrtime.bigint() - t0) / 1e6 / steps;
    console.log(`${ms.toFixed(1)} ms/step over ${steps} steps after ${warmup} warm-up; ${backendLabel({ name: backend.name })}; ${c.model}, ${c.vector}`);
  }
  trainer.dispose();
  policy.dispose();
}

main().catch((e: unknown) => {
  process.stderr.write(`${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
  process.exit(1);
});
