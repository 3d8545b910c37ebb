import type { AdvantageGroup, KafkaCoordinates } from '@srpo/events';
import type { GroupLedgerInput } from './audit-types';

/**
 * The ledger row for a consumed AdvantageGroup: its own coordinates plus those
 * of every event each set was built from, so any update can be traced back to
 * the agent outputs, transitions and outcomes it trained on.
 */
export function ledgerEntryFromGroup(group: AdvantageGroup, source: KafkaCoordinates): GroupLedgerInput {
  const coords = (c: KafkaCoordinates): KafkaCoordinates => ({ topic: c.topic, partition: c.partition, offset: c.offset });
  return {
    groupId: group.groupId,
    groupKey: group.groupKey,
    source: coords(source),
    setIds: group.sets.map((s) => s.set.setId),
    advantages: group.sets.map((s) => s.advantage),
    sources: group.sets.map((s) => ({
      setId: s.set.setId,
      set: coords(s.setSource),
      transition: coords(s.set.transitionSource),
      outcome: s.set.outcomeSource ? coords(s.set.outcomeSource) : null,
      members: s.set.members.map((m) => ({ outputId: m.outputId, source: coords(m.source) })),
    })),
    objectiveConfig: group.objectiveConfig,
  };
}
