import { decodeMemberOutput, type AdvantageGroup, type EventCodec } from '@srpo/events';
import type { TrainingSet } from './policy-trainer';

/**
 * Loads the writer schemas of the members' original AgentOutput bytes: agents writing
 * Confluent-framed events (schema registry) nest those frames inside each set, and the
 * synchronous decode in {@link trainingSetsFromGroup} only knows schemas fetched
 * beforehand. No-op without a registry.
 */
export async function prefetchMemberSchemas(codec: EventCodec, groups: readonly AdvantageGroup[]): Promise<void> {
  await codec.prefetch(groups.flatMap((g) => g.sets.flatMap((gs) => gs.set.members.map((m) => m.output))));
}

/**
 * The trainer's view of a group: each member's original AgentOutput bytes,
 * decoded, so the importance ratio's logpOld is exactly what the agent
 * recorded. Shared by the learner, audit and replay, which must feed the
 * trainer the very same sets the learner did.
 */
export function trainingSetsFromGroup(codec: EventCodec, group: AdvantageGroup): TrainingSet[] {
  return group.sets.map((gs) => ({
    setId: gs.set.setId,
    advantage: gs.advantage,
    members: gs.set.members.map((m) => {
      const output = decodeMemberOutput(codec, m);
      return {
        outputId: m.outputId,
        contextTokens: output.contextTokenIds,
        responseTokens: output.responseTokenIds,
        logpOld: output.behaviourLogProbs,
        mask: output.lossMask.map((b) => (b ? 1 : 0)),
        temperature: m.temperature,
      };
    }),
  }));
}
