import type { Kafka } from 'kafkajs';
import { ErrorCode, SrpoError } from '@srpo/core';
import { EventCodec, readRanges, validateEpisodeOutcome, type EpisodeOutcome, type KafkaCoordinates } from '@srpo/events';
import { keyPartition } from '@srpo/streams';
import type { AuditStore } from '@srpo/store';

/** An outcome of the episode as the log holds it. */
export interface EpisodeOutcomeRecord {
  source: KafkaCoordinates;
  revision: number;
  outcomeReward: number;
  rewardSource: string;
  eventTimeMs: number;
}

/** What the log holds of an episode that decides its rewards: its outcomes (in offset order) and its transitions' ids (its sets' ids). */
export interface EpisodeEvents {
  outcomes: EpisodeOutcomeRecord[];
  transitionIds: string[];
}

/** One recorded update that trained on a set of the episode. */
export interface EpisodeUse {
  updateId: string;
  policyId: string;
  versionBefore: number;
  versionAfter: number;
  committedAtMs: number;
  groupId: string;
  groupSource: KafkaCoordinates;
  setId: string;
  advantage: number;
  /** The outcome the set's reward came from; null: an immediate reward. */
  outcome: KafkaCoordinates | null;
  /** That outcome's revision; null for an immediate reward or an outcome no longer in the log. */
  revision: number | null;
  /** The set was trained with an outcome a later revision replaced; null when that cannot be told (see `revision`). */
  superseded: boolean | null;
}

/** `srpo audit trace --episode ID`: the episode's outcome revisions and every update that used one of its sets. */
export interface EpisodeTrace {
  episodeId: string;
  outcomes: EpisodeOutcomeRecord[];
  /** The highest revision in the log (the one a re-materialization uses); null: no outcome. */
  latestRevision: number | null;
  uses: EpisodeUse[];
}

/**
 * Reads the episode's outcomes and transitions: the whole partition its id hashes to (as the
 * producers' murmur2 partitioner placed them) of each topic, read_committed, filtered by key.
 * A forensic read, proportional to that partition's size.
 */
export async function readEpisodeEvents(
  kafka: Kafka,
  topics: { transitions: string; episodeOutcomes: string },
  episodeId: string,
  codec: EventCodec = new EventCodec(),
): Promise<EpisodeEvents> {
  const records = async (topic: string) => {
    const admin = kafka.admin();
    await admin.connect();
    let offsets;
    try {
      offsets = await admin.fetchTopicOffsets(topic);
    } finally {
      await admin.disconnect();
    }
    const partition = keyPartition(topic, episodeId, offsets.length);
    const p = offsets.find((o) => o.partition === partition);
    const low = Number(p?.low ?? 0);
    const high = Number(p?.high ?? 0);
    if (high <= low) return [];
    const read = await readRanges(kafka, topic, [{ partition, from: low, to: high - 1 }]);
    return read.filter((r) => r.key?.toString() === episodeId && r.value);
  };
  const outcomes: EpisodeOutcomeRecord[] = [];
  for (const r of await records(topics.episodeOutcomes)) {
    try {
      const o: EpisodeOutcome = codec.decodeAs('EpisodeOutcome', r.value);
      validateEpisodeOutcome(o);
      if (o.episodeId !== episodeId) continue;
      outcomes.push({
        source: { topic: r.topic, partition: r.partition, offset: r.offset },
        revision: o.revision ?? 0,
        outcomeReward: o.outcomeReward,
        rewardSource: o.rewardSource ?? '',
        eventTimeMs: o.eventTimeMs,
      });
    } catch {
      // Undecodable or invalid: the materializer dead-lettered it; it rewarded no set.
    }
  }
  const transitionIds: string[] = [];
  for (const r of await records(topics.transitions)) {
    try {
      const t = codec.decodeAs('Transition', r.value);
      if (t.episodeId === episodeId && !transitionIds.includes(t.transitionId)) transitionIds.push(t.transitionId);
    } catch {
      // As above.
    }
  }
  return { outcomes, transitionIds };
}

/**
 * Which recorded updates trained on a set of the episode, with the outcome revision each used
 * and whether a later revision superseded it: the ledger rows holding the episode's set ids,
 * matched by the outcome coordinates they recorded. NOT_FOUND when the log holds nothing of
 * the episode and no update used it.
 */
export async function traceEpisode(store: AuditStore, episodeId: string, events: EpisodeEvents): Promise<EpisodeTrace> {
  const latestRevision = events.outcomes.length > 0 ? Math.max(...events.outcomes.map((o) => o.revision)) : null;
  const at = (c: KafkaCoordinates) =>
    events.outcomes.find((o) => o.source.partition === c.partition && o.source.offset === c.offset && o.source.topic === c.topic);
  const uses: EpisodeUse[] = [];
  for (const setId of events.transitionIds) {
    for (const g of await store.findGroupsWithSet(setId)) {
      const position = g.setIds.indexOf(setId);
      const outcome = g.sources[position].outcome;
      const used = outcome ? at(outcome) : undefined;
      const u = await store.getUpdate(g.updateId);
      uses.push({
        updateId: u.updateId,
        policyId: u.policyId,
        versionBefore: u.versionBefore,
        versionAfter: u.versionAfter,
        committedAtMs: u.committedAtMs,
        groupId: g.groupId,
        groupSource: g.source,
        setId,
        advantage: g.advantages[position],
        outcome,
        revision: used ? used.revision : null,
        superseded: !outcome ? false : used && latestRevision !== null ? used.revision < latestRevision : null,
      });
    }
  }
  if (uses.length === 0 && events.outcomes.length === 0 && events.transitionIds.length === 0) {
    throw new SrpoError(ErrorCode.NOT_FOUND, `no outcome, transition or recorded update of episode ${episodeId}`, { field: 'episodeId' });
  }
  uses.sort((a, b) => a.committedAtMs - b.committedAtMs || (a.updateId < b.updateId ? -1 : a.updateId > b.updateId ? 1 : 0));
  return { episodeId, outcomes: events.outcomes, latestRevision, uses };
}
