import { decodeMemberOutput, type AdvantageGroup, type EventCodec } from '@srpo/events';
import type { GroupStatsInput } from './audit-types';

/**
 * The dashboard's statistics of a group the learner trains on at
 * `learnerVersion`. Member event times come from the members' original
 * AgentOutput bytes (the set summary does not carry them), so an output that
 * waited long for its set counts in the group-fill latency.
 */
export function groupStatsFromGroup(group: AdvantageGroup, learnerVersion: number, codec: EventCodec): GroupStatsInput {
  const kinds = new Set(group.sets.map((s) => s.set.workflowKind));
  let rewardSum = 0;
  let successCount = 0;
  let successKnown = 0;
  let lagMax = Number.NEGATIVE_INFINITY;
  let lagSum = 0;
  let memberCount = 0;
  let earliest = Number.POSITIVE_INFINITY;
  for (const { set } of group.sets) {
    rewardSum += set.reward;
    if (set.success !== null) {
      successKnown++;
      if (set.success) successCount++;
    }
    earliest = Math.min(earliest, set.eventTimeMs);
    for (const m of set.members) {
      const lag = learnerVersion - m.policyVersion;
      lagMax = Math.max(lagMax, lag);
      lagSum += lag;
      memberCount++;
      earliest = Math.min(earliest, decodeMemberOutput(codec, m).eventTimeMs);
    }
  }
  const setCount = group.sets.length;
  return {
    groupId: group.groupId,
    workflowKind: kinds.size === 1 ? [...kinds][0] : null,
    setCount,
    memberCount,
    rewardMean: setCount === 0 ? 0 : rewardSum / setCount,
    successCount,
    successKnown,
    lagMax: memberCount === 0 ? 0 : lagMax,
    lagMean: memberCount === 0 ? 0 : lagSum / memberCount,
    fillLatencyMs: Number.isFinite(earliest) ? group.eventTimeMs - earliest : 0,
    groupEventTimeMs: group.eventTimeMs,
  };
}
