import { fixtureCoordinates, member, activeSet, advantageGroup, SEED, TINY_MODEL } from '@srpo/testing';
import type { AdvantageGroup } from '@srpo/events';
import { tokenLogProbs, TransformerModel } from '@srpo/policy';
import type { ReadyGroup } from '../src/group-source';

/*
 * The learner's own fixtures: what needs its ReadyGroup or the policy at run time. The
 * groups, sets and members themselves come from @srpo/testing (learner-fixtures.ts).
 */

/** The per-token log-probs the version-0 policy (seed {@link SEED}) gives a response: what an agent would have recorded. */
export async function versionZeroLogProbs(context: number[], response: number[], temperature = 1): Promise<number[]> {
  const model = TransformerModel.create(TINY_MODEL, SEED);
  try {
    const { logProbs, mask } = tokenLogProbs(model, [{ contextTokens: context, responseTokens: response }], { temperature });
    const values = Array.from(await logProbs.data()).slice(0, response.length);
    logProbs.dispose();
    mask.dispose();
    return values;
  } finally {
    model.dispose();
  }
}

export function ready(group: AdvantageGroup): ReadyGroup {
  return { group, source: fixtureCoordinates('srpo.advantage-groups', 0) };
}

/** A simple valid group of one single-member set whose behaviour log-probs are made up (any valid values). */
export function simpleGroup(groupId: string, options: { version?: number; temperature?: number; policyId?: string } = {}): ReadyGroup {
  const m = member({ outputId: `${groupId}/o`, logpOld: [-2.5, -2.75, -3], version: options.version, temperature: options.temperature, policyId: options.policyId });
  return ready(advantageGroup(groupId, [{ set: activeSet(`${groupId}/s`, [m]), advantage: 1 }], options.policyId));
}
