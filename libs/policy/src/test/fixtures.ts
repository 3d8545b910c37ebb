import * as tf from '@tensorflow/tfjs';
import { tokenLogProbs } from '../log-probs';
import { Policy } from '../policy';
import { SeededRng } from '../rng';
import type { ActiveSet } from '../srpo-step';
import type { TransformerConfig } from '../transformer';

/** Small enough that a full update takes a few milliseconds. */
export const TINY: TransformerConfig = { vocabSize: 16, dModel: 16, nLayers: 2, nHeads: 2, maxSeqLen: 16 };

/** Every spec runs on native TensorFlow (tfjs-node); the kernels' helper, shared. */
export { nativeBackend } from '@srpo/kernels/testing';

/**
 * Deterministic active sets for `policy`: random tokens, behaviour log-probs
 * equal to the policy's own (ratio 1 at the start), alternating-sign advantages.
 */
export async function makeSets(policy: Policy, seed: number, numSets = 3, opts: { ctx?: number; resp?: number } = {}): Promise<ActiveSet[]> {
  const rng = new SeededRng(seed);
  const v = policy.model.config.vocabSize;
  const sets: ActiveSet[] = [];
  for (let s = 0; s < numSets; s++) {
    const k = 1 + (s % 3);
    const members = Array.from({ length: k }, (_, j) => ({
      outputId: `o${s}-${j}`,
      contextTokens: Array.from({ length: opts.ctx ?? 3 + rng.nextInt(3) }, () => rng.nextInt(v)),
      responseTokens: Array.from({ length: opts.resp ?? 2 + rng.nextInt(4) }, () => rng.nextInt(v)),
      logpOld: [] as number[],
    }));
    const { logProbs, mask } = tokenLogProbs(policy.model, members);
    const rows = await logProbs.array();
    tf.dispose([logProbs, mask]);
    members.forEach((m, j) => (m.logpOld = rows[j].slice(0, m.responseTokens.length)));
    sets.push({ setId: `set${s}`, advantage: s % 2 === 0 ? 1 : -1, members });
  }
  return sets;
}
