// Spec helpers of @srpo/hf. The native backend and seeded values are the kernels' spec helpers
// (@srpo/kernels/testing); makeSets is a copy of @srpo/policy's (libs/policy/src/test/fixtures.ts),
// so that no library reaches into another's test folder.
import * as tf from '@tensorflow/tfjs';
import { tokenLogProbs, SeededRng, type ActiveSet, type Policy } from '@srpo/policy';

export { nativeBackend, seededValues } from '@srpo/kernels/testing';

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
    const rows = (await logProbs.array()) as number[][];
    tf.dispose([logProbs, mask]);
    members.forEach((m, j) => (m.logpOld = rows[j].slice(0, m.responseTokens.length)));
    sets.push({ setId: `set${s}`, advantage: s % 2 === 0 ? 1 : -1, members });
  }
  return sets;
}
