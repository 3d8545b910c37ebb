import * as tf from '@tensorflow/tfjs';
import { DEFAULT_OBJECTIVE_CONFIG, type ObjectiveConfig } from '@srpo/srpo';
import { Policy, SeededRng, tokenLogProbs, type ActiveSet, type TransformerConfig } from '@srpo/policy';

/** The reference configuration the learner benchmark measures. */
export const REFERENCE = {
  model: { vocabSize: 64, dModel: 128, nLayers: 2, nHeads: 4, maxSeqLen: 64, tiedEmbeddings: true } satisfies TransformerConfig,
  /** Members (sequences) per update step. */
  sequences: 32,
  /** Each member: 16 context + 49 response tokens = 64 model input positions (the full context length). */
  contextTokens: 16,
  responseTokens: 49,
  /** Active-set sizes are drawn uniformly from 1..maxSetSize until `sequences` members are placed. */
  maxSetSize: 4,
  lr: 1e-4,
  maxGradNorm: 1,
  objective: { ...DEFAULT_OBJECTIVE_CONFIG, progress: { ...DEFAULT_OBJECTIVE_CONFIG.progress } } as ObjectiveConfig,
  modelSeed: 1,
  dataSeed: 2,
} as const;

/**
 * Builds the reference policy and one mini-batch of active sets, deterministically.
 * Behaviour log-probs are the initial policy's, perturbed slightly so ratios are not all 1.
 */
export async function buildWorkload(): Promise<{ policy: Policy; sets: ActiveSet[] }> {
  const policy = Policy.create('bench', REFERENCE.model, REFERENCE.modelSeed);
  const rng = new SeededRng(REFERENCE.dataSeed);
  const sets: ActiveSet[] = [];
  let placed = 0;
  while (placed < REFERENCE.sequences) {
    const k = Math.min(1 + rng.nextInt(REFERENCE.maxSetSize), REFERENCE.sequences - placed);
    const members = Array.from({ length: k }, (_, j) => ({
      outputId: `o${placed + j}`,
      contextTokens: Array.from({ length: REFERENCE.contextTokens }, () => rng.nextInt(REFERENCE.model.vocabSize)),
      responseTokens: Array.from({ length: REFERENCE.responseTokens }, () => rng.nextInt(REFERENCE.model.vocabSize)),
      logpOld: [] as number[],
    }));
    const { logProbs, mask } = tokenLogProbs(policy.model, members);
    const rows = (await logProbs.array()) as number[][];
    tf.dispose([logProbs, mask]);
    members.forEach((m, j) => (m.logpOld = rows[j].map((x) => Math.min(0, x + 0.02 * rng.nextNormal()))));
    sets.push({ setId: `s${sets.length}`, advantage: rng.nextNormal(), members });
    placed += k;
  }
  return { policy, sets };
}
