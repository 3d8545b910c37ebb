import * as tf from '@tensorflow/tfjs';
import { DEFAULT_OBJECTIVE_CONFIG, type ObjectiveConfig } from '@srpo/srpo';
import { Policy, SeededRng, tokenLogProbs, type ActiveSet, type TransformerConfig } from '@srpo/policy';

/** A benchmark configuration: model, batch shape and optimizer settings. */
export interface Workload {
  /** `reference` or `large`; printed in results. */
  name: string;
  model: TransformerConfig;
  /** Members (sequences) per update step. */
  sequences: number;
  /** Context + response tokens of each member; together maxSeqLen + 1, so inputs fill the context. */
  contextTokens: number;
  responseTokens: number;
  /** Active-set sizes are drawn uniformly from 1..maxSetSize until `sequences` members are placed. */
  maxSetSize: number;
  lr: number;
  maxGradNorm: number;
  objective: ObjectiveConfig;
  modelSeed: number;
  dataSeed: number;
}

const objective = (): ObjectiveConfig => ({ ...DEFAULT_OBJECTIVE_CONFIG, progress: { ...DEFAULT_OBJECTIVE_CONFIG.progress } });

/** The reference configuration the learner benchmark measures (RESULTS.md). */
export const REFERENCE: Workload = {
  name: 'reference',
  model: { vocabSize: 64, dModel: 128, nLayers: 2, nHeads: 4, maxSeqLen: 64, tiedEmbeddings: true },
  sequences: 32,
  /** 16 context + 49 response tokens = 64 model input positions (the full context length). */
  contextTokens: 16,
  responseTokens: 49,
  maxSetSize: 4,
  lr: 1e-4,
  maxGradNorm: 1,
  objective: objective(),
  modelSeed: 1,
  dataSeed: 2,
};

/**
 * GPU-sized configuration (docs/gpu.md): 19.4M parameters, 8192 input
 * positions per step, about 1 TFLOP per step. The vocabulary stays at the
 * one-hot embedding limit (512) so both backends run the same embedding code.
 */
export const LARGE: Workload = {
  ...REFERENCE,
  name: 'large',
  model: { vocabSize: 512, dModel: 512, nLayers: 6, nHeads: 8, maxSeqLen: 256, tiedEmbeddings: true },
  sequences: 32,
  contextTokens: 64,
  responseTokens: 193,
  objective: objective(),
};

export const WORKLOADS: Readonly<Record<string, Workload>> = { reference: REFERENCE, large: LARGE };

/** One-line description for result headers. */
export function describeWorkload(w: Workload): string {
  const m = w.model;
  return `${w.name}: vocab ${m.vocabSize}, width ${m.dModel}, ${m.nLayers} layers, ${m.nHeads} heads, sequence ${m.maxSeqLen}, ${w.sequences} sequences/step, sets of 1-${w.maxSetSize}`;
}

/**
 * Builds the policy and one mini-batch of active sets, deterministically.
 * Behaviour log-probs are the initial policy's, perturbed slightly so ratios are not all 1.
 * `sequences` overrides the batch size (smoke runs of the large model on a software GPU).
 */
export async function buildWorkload(w: Workload = REFERENCE, sequences = w.sequences): Promise<{ policy: Policy; sets: ActiveSet[] }> {
  const policy = Policy.create('bench', w.model, w.modelSeed);
  const rng = new SeededRng(w.dataSeed);
  const sets: ActiveSet[] = [];
  let placed = 0;
  while (placed < sequences) {
    const k = Math.min(1 + rng.nextInt(w.maxSetSize), sequences - placed);
    const members = Array.from({ length: k }, (_, j) => ({
      outputId: `o${placed + j}`,
      contextTokens: Array.from({ length: w.contextTokens }, () => rng.nextInt(w.model.vocabSize)),
      responseTokens: Array.from({ length: w.responseTokens }, () => rng.nextInt(w.model.vocabSize)),
      logpOld: [] as number[],
    }));
    const { logProbs, mask } = tokenLogProbs(policy.model, members);
    const rows = await logProbs.array();
    tf.dispose([logProbs, mask]);
    members.forEach((m, j) => (m.logpOld = rows[j].map((x) => Math.min(0, x + 0.02 * rng.nextNormal()))));
    sets.push({ setId: `s${sets.length}`, advantage: rng.nextNormal(), members });
    placed += k;
  }
  return { policy, sets };
}
