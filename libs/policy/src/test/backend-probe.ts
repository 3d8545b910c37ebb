/**
 * Child process for webgpu.spec.ts: runs the same policy computations on one
 * backend and prints them as one JSON line on stdout, so a spec can compare two
 * backends that cannot share a process cleanly.
 *
 *   node libs/policy/src/test/run-ts.js libs/policy/src/test/backend-probe.ts <backend> [sets.json [reference.json]]
 *
 * With a reference (another backend's output, same sets), it also prints the
 * agreement checks of probe-compare.ts and exits 1 if one fails: how the GPU
 * machine run checks numerics without libtensorflow there.
 */
import { readFileSync } from 'node:fs';
import * as tf from '@tensorflow/tfjs';
import { EnvReader, initTfBackend, releaseTfBackend, tfBackendSettings, type BackendRequest } from '@srpo/core';
import { packedLogProbs, packedToTensors, packPairs, disposePacked, tokenLogProbs } from '../log-probs';
import { nativeKernelsActive } from '@srpo/kernels';
import { Policy } from '../policy';
import { sampleBatch } from '../sampler';
import { SrpoTrainer, type ActiveSet } from '../srpo-step';
import type { TransformerConfig } from '../transformer';
import { makeSets, TINY } from './fixtures';
import { compareProbes } from './probe-compare';

/** Above the one-hot limit (512), so the embedding takes gather and its scatter gradient. */
const WIDE_VOCAB: TransformerConfig = { vocabSize: 600, dModel: 16, nLayers: 1, nHeads: 2, maxSeqLen: 12 };

export interface ProbeResult {
  backend: string;
  adapter?: string;
  nativeKernels: boolean;
  /** TINY model logits on a fixed batch, row-major. */
  logits: number[];
  /** Gradient of Σ log-probs (response tokens) per weight, canonical order. */
  grads: Record<string, number[]>;
  /** The same for the gather-embedding model. */
  wideLogits: number[];
  wideGrads: Record<string, number[]>;
  /** Behaviour log-probs (tokenLogProbs) of the SRPO batch. */
  tokenLogProbs: number[];
  /** Seeded sampling: tokens and their log-probs. */
  samples: { tokens: number[]; logProbs: number[] }[];
  /** SRPO trajectory: per step loss and pre-clip gradient norm; weights after the last step. */
  losses: number[];
  gradNorms: number[];
  finalWeights: Record<string, number[]>;
  initialWeights: Record<string, number[]>;
  tensorsLeaked: number;
  /** A second identical training run ended with bit-identical weights. */
  deterministic: boolean;
  /** The SRPO batch used (pass it to the other side). */
  sets: ActiveSet[];
  ms: number;
}

async function weightsOf(policy: Policy): Promise<Record<string, number[]>> {
  const out: Record<string, number[]> = {};
  for (const n of policy.model.weightNames()) out[n] = Array.from(await policy.model.weight(n).data());
  return out;
}

async function logitsAndGrads(config: TransformerConfig, seed: number): Promise<{ logits: number[]; grads: Record<string, number[]> }> {
  const policy = Policy.create('probe', config, seed);
  try {
    const v = config.vocabSize;
    const pairs = [0, 1, 2].map((i) => ({
      contextTokens: Array.from({ length: 3 + i }, (_, j) => (7 * i + 3 * j + 1) % v),
      responseTokens: Array.from({ length: 4 + i }, (_, j) => (11 * i + 5 * j + 2) % v),
    }));
    const packed = packPairs(pairs, policy.model);
    const t = packedToTensors(packed);
    try {
      const logits = policy.model.logits2d(t.inputs);
      const vars = policy.model.trainableVariables();
      const { grads } = tf.variableGrads(() => tf.sum<tf.Scalar>(packedLogProbs(policy.model, t, 1)), vars);
      const out: Record<string, number[]> = {};
      const names = policy.model.weightNames();
      for (let i = 0; i < names.length; i++) out[names[i]] = Array.from(await grads[vars[i].name].data());
      const result = { logits: Array.from(await logits.data()), grads: out };
      tf.dispose([logits, ...Object.values(grads)]);
      return result;
    } finally {
      disposePacked(t);
    }
  } finally {
    policy.dispose();
  }
}

async function main(): Promise<void> {
  const backend = process.argv[2] as BackendRequest;
  const t0 = Date.now();
  const info = await initTfBackend(backend, tfBackendSettings(new EnvReader(process.env))); // SRPO_DAWN_NODE in the GPU bundle
  const a = await logitsAndGrads(TINY, 21);
  const w = await logitsAndGrads(WIDE_VOCAB, 22);

  const data = Policy.create('data', TINY, 100);
  // The same batch on both sides: the second process takes the first one's sets (argv[3]).
  const sets: ActiveSet[] = process.argv[3] ? (JSON.parse(readFileSync(process.argv[3], 'utf8')) as ActiveSet[]) : await makeSets(data, 7, 4);
  const lp = tokenLogProbs(
    data.model,
    sets.flatMap((s) => s.members),
  );
  const tokenLp = Array.from(await lp.logProbs.data());
  tf.dispose([lp.logProbs, lp.mask]);
  const samples = await sampleBatch(
    data.model,
    [
      [1, 2, 3],
      [4, 5],
    ],
    { seed: 5, maxNewTokens: 6, temperature: 0.8, topK: 8 },
  );
  data.dispose();

  const train = async (): Promise<{
    losses: number[];
    gradNorms: number[];
    initialWeights: Record<string, number[]>;
    finalWeights: Record<string, number[]>;
    tensorsLeaked: number;
  }> => {
    // Small steps so the trajectory stays in the smooth region (no clip boundary crossed).
    const policy = Policy.create('p', TINY, 11);
    const trainer = new SrpoTrainer(policy, { schedule: { kind: 'constant', lr: 1e-4 } });
    try {
      const initialWeights = await weightsOf(policy);
      const losses: number[] = [];
      const gradNorms: number[] = [];
      const first = await trainer.update(sets);
      losses.push(first.loss);
      gradNorms.push(first.gradNorm);
      const before = tf.memory().numTensors;
      for (let i = 0; i < 4; i++) {
        const r = await trainer.update(sets);
        losses.push(r.loss);
        gradNorms.push(r.gradNorm);
      }
      const tensorsLeaked = tf.memory().numTensors - before;
      return { losses, gradNorms, initialWeights, finalWeights: await weightsOf(policy), tensorsLeaked };
    } finally {
      trainer.dispose();
      policy.dispose();
    }
  };
  const { losses, gradNorms, initialWeights, finalWeights, tensorsLeaked } = await train();
  // Same weights, same batch, same bits: the audit trail's weights hash depends on it.
  const again = await train();
  const deterministic = JSON.stringify(again.finalWeights) === JSON.stringify(finalWeights);

  const result: ProbeResult = {
    backend: info.name,
    adapter: info.adapter ? `${info.adapter.vendor} ${info.adapter.architecture} ${info.adapter.description}`.trim() : undefined,
    nativeKernels: nativeKernelsActive(),
    logits: a.logits,
    grads: a.grads,
    wideLogits: w.logits,
    wideGrads: w.grads,
    tokenLogProbs: tokenLp,
    samples: samples.map((s) => ({ tokens: s.tokens, logProbs: s.logProbs })),
    losses,
    gradNorms,
    finalWeights,
    initialWeights,
    tensorsLeaked,
    deterministic,
    sets,
    ms: Date.now() - t0,
  };
  process.stdout.write(JSON.stringify(result) + '\n');
  releaseTfBackend();
  if (process.argv[4]) {
    const ref = JSON.parse(readFileSync(process.argv[4], 'utf8')) as ProbeResult;
    const checks = compareProbes(ref, result);
    for (const c of checks) process.stderr.write(`${c.ok ? 'ok  ' : 'FAIL'} ${c.name}: ${c.value.toExponential(2)} (limit ${c.limit})\n`);
    const failed = checks.filter((c) => !c.ok).length;
    process.stderr.write(`${result.backend} vs ${ref.backend}: ${checks.length - failed}/${checks.length} checks pass (${result.adapter ?? ''})\n`);
    if (failed > 0) process.exitCode = 1;
  }
}

main().catch((e: unknown) => {
  process.stderr.write(`${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
  process.exit(1);
});
