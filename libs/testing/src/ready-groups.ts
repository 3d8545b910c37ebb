import type { AdvantageGroup, KafkaCoordinates } from '@srpo/events';
import { tokenLogProbs, TransformerModel } from '@srpo/policy';
import { activeSet, advantageGroup, fixtureCoordinates, member, SEED, TINY_MODEL } from './learner-fixtures';

/*
 * The update cycle's inputs: ready groups (a group with where it was read, the shape of
 * @srpo/trainer's ReadyGroup) and the behaviour log-probs the version-0 policy gives, for
 * the update-cycle spec and the learner's integration specs. The groups, sets and members
 * themselves are learner-fixtures.ts'.
 */

/** A group with where it was read: @srpo/trainer's ReadyGroup (structurally; this lib does not import the trainer). */
export interface ReadyGroupFixture {
  group: AdvantageGroup;
  source: KafkaCoordinates;
}

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

export function ready(group: AdvantageGroup): ReadyGroupFixture {
  return { group, source: fixtureCoordinates('srpo.advantage-groups', 0) };
}

/** A simple valid group of one single-member set whose behaviour log-probs are made up (any valid values). */
export function simpleGroup(groupId: string, options: { version?: number; temperature?: number; policyId?: string } = {}): ReadyGroupFixture {
  const m = member({
    outputId: `${groupId}/o`,
    logpOld: [-2.5, -2.75, -3],
    version: options.version,
    temperature: options.temperature,
    policyId: options.policyId,
  });
  return ready(advantageGroup(groupId, [{ set: activeSet(`${groupId}/s`, [m]), advantage: 1 }], options.policyId));
}
