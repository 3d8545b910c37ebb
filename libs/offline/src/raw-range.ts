import type { Kafka } from 'kafkajs';
import { errorMessage, type Logger } from '@srpo/core';
import {
  readRanges,
  type AgentOutput,
  type EpisodeOutcome,
  type EventCodec,
  type EventType,
  type KafkaCoordinates,
  type OffsetRange,
  type TopicCatalog,
  type Transition,
} from '@srpo/events';
import type { Located, RawEpisodeEvents } from './trajectory';

/** The raw events of a time range, with the offsets they came from and how many records did not decode. */
export interface RawRange {
  /** The raw offsets read, per topic and partition (inclusive). */
  sourceRanges: Record<string, OffsetRange[]>;
  events: RawEpisodeEvents;
  undecodable: number;
}

/**
 * Reads the raw topics (AgentOutput, Transition, EpisodeOutcome) over the records whose Kafka
 * timestamp is in `[fromMs, toMs)`, never writing them. A record that does not decode is left
 * out, logged and counted (the materializer dead-letters such records).
 */
export async function readRawRange(
  kafka: Kafka,
  codec: EventCodec,
  catalog: TopicCatalog,
  window: { fromMs: number; toMs: number },
  log: Logger,
  onTopicRead: (done: number, total: number) => void,
): Promise<RawRange> {
  const raw = [catalog.agentOutputs.name, catalog.transitions.name, catalog.episodeOutcomes.name];
  const sourceRanges = await rangesByTime(kafka, raw, window.fromMs, window.toMs);
  const events: RawEpisodeEvents = { outputs: [], transitions: [], outcomes: [] };
  let undecodable = 0;
  for (const [i, topic] of raw.entries()) {
    const records = sourceRanges[topic].length > 0 ? await readRanges(kafka, topic, sourceRanges[topic], { timeoutMs: 60_000 }) : [];
    for (const r of records) {
      const source = { topic: r.topic, partition: r.partition, offset: r.offset };
      try {
        if (i === 0) events.outputs.push(located<AgentOutput>(codec, 'AgentOutput', r.value, source));
        else if (i === 1) events.transitions.push(located<Transition>(codec, 'Transition', r.value, source));
        else events.outcomes.push(located<EpisodeOutcome>(codec, 'EpisodeOutcome', r.value, source));
      } catch (e) {
        // The materializer dead-letters such records; here they are left out and counted.
        undecodable++;
        log.warn('raw record left out', { topic, partition: r.partition, offset: r.offset, reason: errorMessage(e) });
      }
    }
    onTopicRead(i + 1, raw.length);
  }
  return { sourceRanges, events, undecodable };
}

function located<T>(codec: EventCodec, type: EventType, value: Buffer | null, source: KafkaCoordinates): Located<T> {
  return { value: codec.decodeAs(type, value) as unknown as T, source };
}

/**
 * Offsets of `[fromMs, toMs)` per partition, by the brokers' time index: the
 * first offset at or after `fromMs` to the last before `toMs` (inclusive).
 */
export async function rangesByTime(kafka: Kafka, topics: string[], fromMs: number, toMs: number): Promise<Record<string, OffsetRange[]>> {
  const admin = kafka.admin();
  await admin.connect();
  try {
    const out: Record<string, OffsetRange[]> = {};
    for (const topic of topics) {
      const starts = await admin.fetchTopicOffsetsByTimestamp(topic, fromMs);
      const ends = await admin.fetchTopicOffsetsByTimestamp(topic, toMs);
      out[topic] = starts
        .map((s) => ({ partition: s.partition, from: Number(s.offset), to: Number(ends.find((e) => e.partition === s.partition)?.offset ?? s.offset) - 1 }))
        .filter((r) => r.to >= r.from)
        .sort((a, b) => a.partition - b.partition);
    }
    return out;
  } finally {
    await admin.disconnect();
  }
}
