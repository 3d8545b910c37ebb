import type { Kafka } from 'kafkajs';
import { errorMessage, type Logger } from '@srpo/core';
import { bulkReadToOffsets, type EventCodec } from '@srpo/events';

/**
 * The episodes a judge has produced an outcome for, newest `capacity` kept (a Set iterates in
 * insertion order, so the first is the oldest). It stops a second outcome for one episode:
 * a second judged output of the episode in output mode, or an episode read again after a
 * restart. Filled at start from the tail of the outcome topic (`JudgeService`), so it outlives
 * the process as far as that tail reaches.
 */
export class JudgedEpisodes {
  private readonly ids = new Set<string>();

  constructor(readonly capacity: number) {}

  has(episodeId: string): boolean {
    return this.ids.has(episodeId);
  }

  add(episodeId: string): void {
    this.ids.delete(episodeId);
    this.ids.add(episodeId);
    while (this.ids.size > this.capacity) this.ids.delete(this.ids.values().next().value as string);
  }

  forget(episodeId: string): void {
    this.ids.delete(episodeId);
  }

  get size(): number {
    return this.ids.size;
  }
}

/**
 * Fills `judged` with the episodes `verifier` already judged, from the last records of each
 * partition of the outcome topic (as many as `judged` holds, spread over the partitions), so a
 * restart that reads an episode again does not judge it twice. A read that fails is logged and
 * leaves the set as it was: the judge still starts.
 */
export async function restoreJudgedEpisodes(
  kafka: Kafka,
  codec: EventCodec,
  topic: string,
  verifier: string,
  judged: JudgedEpisodes,
  log: Logger,
): Promise<void> {
  try {
    const admin = kafka.admin();
    await admin.connect();
    let offsets: { partition: number; low: string; high: string }[];
    try {
      offsets = await admin.fetchTopicOffsets(topic);
    } finally {
      await admin.disconnect();
    }
    const perPartition = Math.ceil(judged.capacity / Math.max(1, offsets.length));
    const from = new Map(offsets.map((p) => [`${topic}:${p.partition}`, Math.max(Number(p.low), Number(p.high) - perPartition)]));
    const to = new Map(offsets.map((p) => [`${topic}:${p.partition}`, Number(p.high)]));
    const { partitions } = await bulkReadToOffsets(kafka, [topic], { from, to, onlyListed: true, timeoutMs: 30_000 });
    for (const records of partitions.values())
      for (const r of records) {
        try {
          const outcome = codec.decodeAs('EpisodeOutcome', r.value);
          if (outcome.verifier === verifier) judged.add(outcome.episodeId);
        } catch {
          // Bad bytes on the outcome topic are the materializer's to dead-letter, not the judge's.
        }
      }
    log.info('remembered judged episodes', { episodes: judged.size });
  } catch (e) {
    log.warn('could not read the outcome topic; episodes read again may be judged again', { error: errorMessage(e) });
  }
}
