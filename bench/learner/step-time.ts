/**
 * The tfjs native side's step time alone (no PyTorch), for comparing two builds of the native
 * kernels across processes: run it alternately with each build's addon in place. Not a timed test.
 *
 *   npm run build && node dist/bench/learner/step-time.js [--steps 30]
 */
import { cpuDescription } from '../cpu';
import { threadEnv } from './bench-common';

async function main(): Promise<void> {
  const i = process.argv.indexOf('--steps');
  const steps = i >= 0 ? Number(process.argv[i + 1]) : 30;
  if (!Number.isInteger(steps) || steps < 1) throw new Error('--steps must be an integer >= 1');
  // Apply the bench's thread settings before TensorFlow loads.
  const env = threadEnv(2);
  for (const k of ['TF_NUM_INTRAOP_THREADS', 'TF_NUM_INTEROP_THREADS', 'TF_CPP_MIN_LOG_LEVEL'] as const) process.env[k] ??= env[k];
  const { initTfBackend } = await import('@srpo/core');
  const backend = await initTfBackend('tensorflow');
  const { SrpoTrainer, loadSrpoKernels, backendLabel } = await import('@srpo/policy');
  const kernels = loadSrpoKernels();
  if (!kernels.loaded) throw new Error(`the fused kernels are not loaded: ${kernels.reason}`);
  const { buildWorkload, REFERENCE: w } = await import('./workload');
  const { policy, sets } = await buildWorkload(w);
  const trainer = new SrpoTrainer(policy, { objective: w.objective, schedule: { kind: 'constant', lr: w.lr }, maxGradNorm: w.maxGradNorm });
  for (let s = 0; s < 5; s++) await trainer.update(sets);
  const t0 = process.hrtime.bigint();
  for (let s = 0; s < steps; s++) await trainer.update(sets);
  const ms = Number(process.hrtime.bigint() - t0) / 1e6 / steps;
  const c = cpuDescription();
  console.log(`${ms.toFixed(1)} ms/step over ${steps} steps; ${backendLabel({ name: backend.name })}; ${c.model}, ${c.vector}`);
  trainer.dispose();
  policy.dispose();
}

main().catch((e: unknown) => {
  process.stderr.write(`${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
  process.exit(1);
});
