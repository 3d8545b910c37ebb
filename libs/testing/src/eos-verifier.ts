import { Kafka } from 'kafkajs';
import { endOffsets, EventCodec, readTopicsToEnd, TopicCatalog } from '@srpo/events';

export interface EosReport {
  /** Topics whose read_committed readers could not reach the high-water mark (open transactions). */
  openTransactions: string[];
  setsOnRepartitionTopic: number;
  /** Expected set ids that are missing from the repartition topic. */
  missingSets: string[];
  /** Set ids that appear more than once on the repartition topic. */
  duplicateSets: string[];
  /** Set ids that appear in no group. */
  ungroupedSets: string[];
  /** Set ids that appear in more than one group, or twice in one group. */
  multiplyGroupedSets: string[];
  /** Groups whose id appears more than once. */
  duplicateGroups: string[];
  groups: number;
  invalidSets: string[];
}

/**
 * Kafka Streams' EOS verification, for the materializer's outputs:
 * 1. read the outputs read_committed, which must reach the read_uncommitted end
 *    offsets (no transaction left open);
 * 2. every expected set appears exactly once on the repartition topic;
 * 3. no group has a set twice; 4. every set is in exactly one group.
 */
export async function verifyExactlyOnce(kafka: Kafka, catalog: TopicCatalog, expectedSetIds: Iterable<string>, timeoutMs = 30_000): Promise<EosReport> {
  const codec = new EventCodec();
  const topics = [catalog.activeSets.name, catalog.advantageGroups.name, catalog.invalidSets.name];
  const openTransactions: string[] = [];
  let records: Awaited<ReturnType<typeof readTopicsToEnd>> = [];
  try {
    records = await readTopicsToEnd(kafka, topics, { timeoutMs });
  } catch {
    const admin = kafka.admin();
    await admin.connect();
    const ends = await endOffsets(admin, topics);
    await admin.disconnect();
    openTransactions.push(...[...ends.keys()]);
  }
  const setCounts = new Map<string, number>();
  const groupedCounts = new Map<string, number>();
  const groupIds = new Map<string, number>();
  const invalidSets: string[] = [];
  for (const r of records) {
    if (r.topic === catalog.activeSets.name) {
      const set = codec.decodeAs('ActiveSet', r.value);
      // A set emitted again for a revised outcome (docs/rewards.md) is a correction, not a duplicate.
      if (set.correction) continue;
      setCounts.set(set.setId, (setCounts.get(set.setId) ?? 0) + 1);
    } else if (r.topic === catalog.advantageGroups.name) {
      const g = codec.decodeAs('AdvantageGroup', r.value);
      groupIds.set(g.groupId, (groupIds.get(g.groupId) ?? 0) + 1);
      for (const s of g.sets) groupedCounts.set(s.set.setId, (groupedCounts.get(s.set.setId) ?? 0) + 1);
    } else {
      invalidSets.push(codec.decodeAs('ActiveSet', r.value).setId);
    }
  }
  const expected = [...expectedSetIds];
  return {
    openTransactions,
    setsOnRepartitionTopic: [...setCounts.values()].reduce((a, b) => a + b, 0),
    missingSets: expected.filter((id) => !setCounts.has(id)),
    duplicateSets: [...setCounts].filter(([, n]) => n > 1).map(([id]) => id),
    ungroupedSets: [...setCounts.keys()].filter((id) => !groupedCounts.has(id)),
    multiplyGroupedSets: [...groupedCounts].filter(([, n]) => n > 1).map(([id]) => id),
    duplicateGroups: [...groupIds].filter(([, n]) => n > 1).map(([id]) => id),
    groups: groupIds.size,
    invalidSets,
  };
}
