import type { Kafka } from 'kafkajs';
import { ErrorCode, Logger, SrpoError } from '@srpo/core';
import { AdvantageGroup, bulkReadToOffsets, endOffsets, ensureTopics, EventCodec, KafkaCoordinates, RawRecord, topicCatalog, TopicCatalog } from '@srpo/events';
import {
  BulkMessage,
  bulkWrite,
  decodeRecord,
  deadLetterOf,
  encodeDeadLetter,
  InProcessSink,
  InProcessTask,
  keyPartition,
  mergeByEventTime,
  OffsetAllocator,
  recordEventTime,
  reserveAvroScratch,
} from '@srpo/streams';
import type { ActiveSetStores } from './active-set.processor';
import type { AdvantageGroupStores } from './advantage-group.processor';
import { latestOutcomeRevisionsFirst } from './outcome-revisions';
import { materializerTopology, type MaterializerSettings } from './topology';

/** The materializer settings that decide sets and groups; a faithful re-materialization uses the live values. */
export type RematerializeSettings = MaterializerSettings;

export interface RematerializeProgress {
  phase: 'read' | 'process' | 'write';
  done: number;
  total: number;
  /** Raw events per second since the start of the re-materialization. */
  eventsPerSecond: number;
  etaMs: number;
}

export interface RematerializeOptions {
  kafka: Kafka;
  /** Catalog of the recorded run: its raw topics are read, never written. */
  source: TopicCatalog;
  /** Prefix of the run's own derived topics (active-sets, invalid-sets, advantage-groups, dead-letter). */
  targetPrefix: string;
  settings: RematerializeSettings;
  codec?: EventCodec;
  onProgress?: (p: RematerializeProgress) => void;
  /** Consumer group of the bulk read (it commits nothing). */
  groupId?: string;
}

/** A re-derived group as written to the run's advantage-groups topic. */
export interface RematerializedGroup {
  group: AdvantageGroup;
  bytes: Buffer;
  source: KafkaCoordinates;
}

export interface RematerializeResult {
  target: TopicCatalog;
  /** Raw records read: from the start of the raw topics to their end offsets when the replay started. */
  events: number;
  /** The raw range read (exclusive end offset per `topic:partition`). */
  sourceEnds: Map<string, number>;
  setsComplete: number;
  setsInvalid: number;
  deadLetters: number;
  /** Episodes whose first outcome record was processed with their latest revision's value (docs/rewards.md, "Replay"). */
  revisedOutcomes: number;
  groups: Map<string, RematerializedGroup>;
  /** setId -> groupId of the re-derived group holding it. */
  groupOfSet: Map<string, string>;
  readMs: number;
  processMs: number;
  writeMs: number;
  eventsPerSecond: number;
}

/**
 * Re-derives active sets and advantage groups from the raw events, in-process:
 * one bulk read of the raw topics (read_committed), both materializer
 * processors driven by {@link InProcessTask}s with in-memory stores (one per raw
 * partition, one per active-sets partition, as the live tasks), the raw
 * partitions merged by event time, every set routed to the group task its key
 * hashes to, and the outputs written to the run's own topics in large batches.
 * Coordinates inside the events (an AdvantageGroup's set sources) are known
 * before the write because only this run writes those topics, which must be
 * empty at the start.
 */
export async function rematerialize(options: RematerializeOptions): Promise<RematerializeResult> {
  const log = new Logger('rematerialize');
  const { kafka, source, settings } = options;
  const codec = options.codec ?? new EventCodec();
  // With a registry the run's outputs are Confluent-framed like the live materializer's: register first.
  await codec.useRegistry();
  reserveAvroScratch(4 * 1024 * 1024);
  const rawTopics = [source.agentOutputs.name, source.transitions.name, source.episodeOutcomes.name];
  const admin = kafka.admin();
  await admin.connect();
  let target: TopicCatalog;
  try {
    const meta = await admin.fetchTopicMetadata({ topics: [...rawTopics, source.activeSets.name] });
    const partitionsOf = (name: string) => meta.topics.find((t) => t.name === name)?.partitions.length ?? 0;
    const rawPartitions = partitionsOf(source.agentOutputs.name);
    // The group tasks must see the same key -> partition routing as the live ones.
    const derivedPartitions = partitionsOf(source.activeSets.name);
    if (rawPartitions === 0 || derivedPartitions === 0)
      throw new SrpoError(ErrorCode.NOT_FOUND, `source topics ${source.agentOutputs.name} / ${source.activeSets.name} do not exist`);
    target = topicCatalog({ prefix: options.targetPrefix, rawPartitions, derivedPartitions });
    const outputs = [target.activeSets, target.invalidSets, target.advantageGroups, target.deadLetter];
    await ensureTopics(admin, outputs);
    const used = [
      ...(await endOffsets(
        admin,
        outputs.map((t) => t.name),
      )),
    ].filter(([, end]) => end > 0);
    if (used.length > 0)
      throw new SrpoError(ErrorCode.CONFLICT, `run topic ${used[0][0]} already holds records; a re-materialization writes only fresh topics`);
  } finally {
    await admin.disconnect();
  }

  const started = Date.now();
  const rate = (done: number) => (done * 1000) / Math.max(1, Date.now() - started);
  const read = await bulkReadToOffsets(kafka, rawTopics, {
    groupId: options.groupId,
    onProgress: (done, total) => options.onProgress?.({ phase: 'read', done, total, eventsPerSecond: rate(done), etaMs: 0 }),
  });
  const readMs = Date.now() - started;

  const processStart = Date.now();
  const allocator = new OffsetAllocator();
  const writes: BulkMessage[] = [];
  const groups = new Map<string, RematerializedGroup>();
  const groupOfSet = new Map<string, string>();
  let setsComplete = 0;
  let setsInvalid = 0;
  let deadLetters = 0;
  const processedAt = Date.now();

  // The same graph the live materializer runs (libs/materializer/src/topology.ts).
  const topology = materializerTopology(target, codec, settings);
  const groupProcessor = topology.groups.processor;
  const setProcessor = topology.sets.processor;

  // Dead letters name the processor, as the live runner's do; one wall-clock time for the whole pass (processors see no clock).
  const deadLetterFor =
    (processor: string): InProcessSink['deadLetter'] =>
    (_task, record, reasonCode, reason, details) => {
      const key = record.key === null ? null : Buffer.from(record.key);
      const dl = deadLetterOf({ key, value: record.raw, source: record.source }, reasonCode, reason, processor, details, processedAt);
      writes.push({ topic: target.deadLetter.name, partition: 0, key, value: encodeDeadLetter(codec, dl).bytes });
      allocator.take(target.deadLetter.name, 0);
      deadLetters++;
    };
  const groupSink: InProcessSink = {
    emit: (_task, o) => {
      if (o.type !== 'AdvantageGroup') throw new SrpoError(ErrorCode.INVARIANT_VIOLATED, `the group processor emitted a ${o.type} to ${o.topic}`);
      const partition = keyPartition(o.topic, o.key, target.advantageGroups.partitions);
      const bytes = codec.encode('AdvantageGroup', o.value);
      const coords = { topic: o.topic, partition, offset: allocator.take(o.topic, partition) };
      writes.push({ topic: o.topic, partition, key: o.key, value: bytes });
      groups.set(o.value.groupId, { group: o.value, bytes, source: coords });
      for (const s of o.value.sets) groupOfSet.set(s.set.setId, o.value.groupId);
    },
    deadLetter: deadLetterFor(groupProcessor.name),
  };
  const groupTasks = Array.from({ length: target.activeSets.partitions }, (_, q) => new InProcessTask<AdvantageGroupStores>(groupProcessor, q, groupSink));
  const setSink: InProcessSink = {
    emit: (_task, o) => {
      const partition = keyPartition(o.topic, o.key, target.activeSets.partitions);
      const bytes = codec.encode(o.type, o.value);
      const offset = allocator.take(o.topic, partition);
      writes.push({ topic: o.topic, partition, key: o.key, value: bytes });
      if (o.topic === target.activeSets.name && o.type === 'ActiveSet') {
        setsComplete++;
        // The live group task reads this record from the active-sets partition its key hashes to.
        // Its Kafka timestamp would be the write's wall clock, as the live producer's; the group stage does not read it.
        const record = { source: { topic: o.topic, partition, offset }, key: o.key, event: { type: 'ActiveSet' as const, value: o.value }, raw: bytes };
        groupTasks[partition].feed({ ...record, timestampMs: processedAt });
      } else setsInvalid++;
    },
    deadLetter: deadLetterFor(setProcessor.name),
  };

  // Each episode's latest outcome revision wins (outcome-revisions.ts): the run rebuilds with corrected rewards.
  let revisedOutcomes = 0;
  const outcomesOf = new Map<number, RawRecord[]>();
  for (let p = 0; p < target.agentOutputs.partitions; p++) {
    const records = read.partitions.get(`${source.episodeOutcomes.name}:${p}`) ?? [];
    await codec.prefetch(records.map((r) => r.value));
    const latest = latestOutcomeRevisionsFirst(records, codec);
    outcomesOf.set(p, latest.records);
    revisedOutcomes += latest.revised;
  }
  const inputs: RawRecord[][] = [];
  const pendingByTask = new Map<number, Map<string, number>>();
  for (const topic of rawTopics) {
    for (let p = 0; p < target.agentOutputs.partitions; p++) {
      const records = (topic === source.episodeOutcomes.name ? outcomesOf.get(p) : read.partitions.get(`${topic}:${p}`)) ?? [];
      inputs.push(records);
      const pending = pendingByTask.get(p) ?? new Map<string, number>();
      pending.set(topic, records.length);
      pendingByTask.set(p, pending);
    }
  }
  const setTasks = Array.from(
    { length: target.agentOutputs.partitions },
    (_, p) => new InProcessTask<ActiveSetStores>(setProcessor, p, setSink, pendingByTask.get(p)),
  );
  let done = 0;
  const total = read.count;
  const every = Math.max(1000, Math.floor(total / 100));
  // Confluent-framed raw events: load their writer schemas once, before the synchronous decode (no-op without a registry).
  await codec.prefetch(inputs.flatMap((records) => records.map((r) => r.value)));
  for (const d of mergeByEventTime(inputs, (r) => decodeRecord(codec, r), recordEventTime)) {
    const partition = 'record' in d ? d.record.source.partition : d.failed.partition;
    setTasks[partition].feedDecoded(d);
    if (++done % every === 0) {
      const eps = rate(done);
      options.onProgress?.({ phase: 'process', done, total, eventsPerSecond: eps, etaMs: ((total - done) * 1000) / Math.max(1, eps) });
    }
  }
  for (const t of setTasks) t.finish();
  for (const t of groupTasks) t.finish();
  const processMs = Date.now() - processStart;
  options.onProgress?.({ phase: 'process', done: total, total, eventsPerSecond: rate(total), etaMs: 0 });

  const writeStart = Date.now();
  await bulkWrite(kafka, writes, {
    onProgress: (n) => options.onProgress?.({ phase: 'write', done: n, total: writes.length, eventsPerSecond: rate(total), etaMs: 0 }),
  });
  await checkWritten(kafka, allocator.ends());
  const writeMs = Date.now() - writeStart;
  const eventsPerSecond = rate(total);
  log.info('re-materialized', {
    events: total,
    setsComplete,
    setsInvalid,
    groups: groups.size,
    deadLetters,
    revisedOutcomes,
    readMs,
    processMs,
    writeMs,
    eventsPerSecond: Math.round(eventsPerSecond),
  });
  return {
    target,
    events: total,
    sourceEnds: read.to,
    setsComplete,
    setsInvalid,
    deadLetters,
    revisedOutcomes,
    groups,
    groupOfSet,
    readMs,
    processMs,
    writeMs,
    eventsPerSecond,
  };
}

/** The coordinates put into events before the write must be where the records landed. */
async function checkWritten(kafka: Kafka, expected: Map<string, number>): Promise<void> {
  if (expected.size === 0) return;
  const admin = kafka.admin();
  await admin.connect();
  try {
    const topics = [...new Set([...expected.keys()].map((k) => k.slice(0, k.lastIndexOf(':'))))];
    const actual = await endOffsets(admin, topics);
    for (const [key, end] of expected) {
      if (actual.get(key) !== end) {
        throw new SrpoError(
          ErrorCode.INTEGRITY_FAILED,
          `run topic ${key} ends at offset ${actual.get(key)}, expected ${end}: another writer used it during the re-materialization`,
        );
      }
    }
  } finally {
    await admin.disconnect();
  }
}
