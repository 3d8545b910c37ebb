import { ConfigResourceTypes, type Admin, type ITopicConfig } from 'kafkajs';
import { ErrorCode, isRetriable, SrpoError } from '@srpo/core';
import type { EventType } from './event-types';

/**
 * The topics of one run. Raw topics (outputs, transitions, outcomes) are keyed by
 * episode id and must have the same partition count, so that one materializer task
 * sees every event of an episode (co-partitioning, as in Kafka Streams joins).
 * History is kept (retention.ms = -1 by default) so any run can be replayed. On raw topics the
 * broker refuses records stamped ahead of its clock (`message.timestamp.after.max.ms`).
 */
export interface TopicSpec {
  name: string;
  partitions: number;
  /** What the Kafka key is. */
  key: 'episodeId' | 'groupKey' | 'policyId' | 'originalKey' | 'erasureId';
  eventTypes: EventType[];
  config: Record<string, string>;
  /** Raw topics must agree on partition count. */
  coPartitioned: boolean;
}

export interface TopicCatalog {
  prefix: string;
  agentOutputs: TopicSpec;
  transitions: TopicSpec;
  episodeOutcomes: TopicSpec;
  /** Complete active sets re-keyed by group key: the repartition topic for grouping. */
  activeSets: TopicSpec;
  /** Sets that never completed (missing members at TTL), keyed by episode id. */
  invalidSets: TopicSpec;
  /** Ready advantage groups, keyed by policy id; the learner's input. */
  advantageGroups: TopicSpec;
  policyUpdates: TopicSpec;
  policyVersions: TopicSpec;
  deadLetter: TopicSpec;
  /** AgentBrew offline runs: the inferred task of every trajectory read, keyed by episode id. */
  inferredTasks: TopicSpec;
  /** AgentBrew offline runs: per-action PMI credits and training weights, keyed by episode id. */
  actionCredits: TopicSpec;
  /** Erasures of content (`srpo erase`), keyed by erasure id; every materializer reads it whole. */
  erasures: TopicSpec;
  all(): TopicSpec[];
}

export interface TopicCatalogOptions {
  /** Prefix of every topic name (default `srpo.`); replays use their own prefix. */
  prefix?: string;
  /** Partitions of the raw, co-partitioned topics (default 6). */
  rawPartitions?: number;
  /** Partitions of derived topics (default 3). */
  derivedPartitions?: number;
  /** retention.ms of every topic (default -1: keep forever, for replay). */
  retentionMs?: number;
  /** Largest message the broker accepts on these topics (default 4 MiB). */
  maxMessageBytes?: number;
  /**
   * How far ahead of the broker's clock a producer may stamp a record of a raw topic
   * (`message.timestamp.after.max.ms`, default 10 s); the broker refuses later ones.
   */
  maxTimestampAheadMs?: number;
}

/** The default of `TopicCatalogOptions.maxTimestampAheadMs`: room for NTP-synced clocks. */
export const DEFAULT_MAX_TIMESTAMP_AHEAD_MS = 10_000;

export function topicCatalog(options: TopicCatalogOptions = {}): TopicCatalog {
  const prefix = options.prefix ?? 'srpo.';
  const raw = options.rawPartitions ?? 6;
  const derived = options.derivedPartitions ?? 3;
  const config = {
    'retention.ms': String(options.retentionMs ?? -1),
    'max.message.bytes': String(options.maxMessageBytes ?? 4 * 1024 * 1024),
  };
  // The raw topics (the co-partitioned ones) are written by agents. The materializer bounds event
  // time by the record timestamp, so the broker must bound that: CreateTime, refused beyond
  // after.max.ms ahead of its clock. Not LogAppendTime: the broker then writes its time into the
  // batch header only, which kafkajs reads and @platformatic/kafka 1.35 ignores (it would hand
  // the processor the producer's unchecked CreateTime).
  const rawTimestamps = {
    'message.timestamp.type': 'CreateTime',
    'message.timestamp.after.max.ms': String(options.maxTimestampAheadMs ?? DEFAULT_MAX_TIMESTAMP_AHEAD_MS),
  };
  const spec = (suffix: string, partitions: number, key: TopicSpec['key'], eventTypes: EventType[], coPartitioned = false): TopicSpec => ({
    name: prefix + suffix,
    partitions,
    key,
    eventTypes,
    config: coPartitioned ? { ...config, ...rawTimestamps } : { ...config },
    coPartitioned,
  });
  const catalog = {
    prefix,
    agentOutputs: spec('agent-outputs', raw, 'episodeId', ['AgentOutput'], true),
    transitions: spec('transitions', raw, 'episodeId', ['Transition'], true),
    episodeOutcomes: spec('episode-outcomes', raw, 'episodeId', ['EpisodeOutcome'], true),
    activeSets: spec('active-sets', derived, 'groupKey', ['ActiveSet']),
    invalidSets: spec('invalid-sets', derived, 'episodeId', ['ActiveSet']),
    advantageGroups: spec('advantage-groups', derived, 'policyId', ['AdvantageGroup']),
    policyUpdates: spec('policy-updates', 1, 'policyId', ['PolicyUpdate']),
    policyVersions: spec('policy-versions', 1, 'policyId', ['PolicyVersion']),
    deadLetter: spec('dead-letter', 1, 'originalKey', ['DeadLetter']),
    inferredTasks: spec('inferred-tasks', derived, 'episodeId', ['InferredTask']),
    actionCredits: spec('action-credits', derived, 'episodeId', ['ActionCredit']),
    erasures: spec('erasures', 1, 'erasureId', ['Erasure']),
  };
  return {
    ...catalog,
    all: () => [
      catalog.agentOutputs,
      catalog.transitions,
      catalog.episodeOutcomes,
      catalog.activeSets,
      catalog.invalidSets,
      catalog.advantageGroups,
      catalog.policyUpdates,
      catalog.policyVersions,
      catalog.deadLetter,
      catalog.inferredTasks,
      catalog.actionCredits,
      catalog.erasures,
    ],
  };
}

/**
 * The replication a topic is created with on a cluster of `brokers`: three copies with
 * `min.insync.replicas=2` from three brokers on (a write acknowledged by all in-sync replicas
 * survives the loss of any one broker, and one broker down still takes writes), else one copy
 * per broker up to that.
 */
export function replicationFor(brokers: number): { replicationFactor: number; minInsyncReplicas: number } {
  const replicationFactor = Math.max(1, Math.min(3, brokers));
  return { replicationFactor, minInsyncReplicas: replicationFactor >= 3 ? 2 : 1 };
}

/**
 * Creates missing topics and checks existing ones: co-partitioned topics must
 * have the catalog's partition count, or joins would silently miss events.
 * New topics are replicated as {@link replicationFor} says for the cluster's size.
 */
export async function ensureTopics(admin: Admin, specs: TopicSpec[]): Promise<{ created: string[] }> {
  const existing = new Set(await admin.listTopics());
  const missing = specs.filter((s) => !existing.has(s.name));
  if (missing.length > 0) {
    const { replicationFactor, minInsyncReplicas } = replicationFor((await admin.describeCluster()).brokers.length);
    await createTopicsIdempotent(
      admin,
      missing.map((s) => ({
        topic: s.name,
        numPartitions: s.partitions,
        replicationFactor,
        configEntries: Object.entries({ 'min.insync.replicas': String(minInsyncReplicas), ...s.config }).map(([name, value]) => ({ name, value })),
      })),
    );
  }
  const present = specs.filter((s) => existing.has(s.name) && s.coPartitioned);
  if (present.length > 0) {
    const meta = await admin.fetchTopicMetadata({ topics: present.map((s) => s.name) });
    for (const t of meta.topics) {
      const s = present.find((p) => p.name === t.name);
      if (s && t.partitions.length !== s.partitions) {
        throw new SrpoError(
          ErrorCode.CONFIG_INVALID,
          `topic ${t.name} has ${t.partitions.length} partitions but the catalog expects ${s.partitions}; co-partitioned topics must agree`,
        );
      }
    }
  }
  return { created: missing.map((s) => s.name) };
}

/** A topic as the cluster has it: partitions, copies and `min.insync.replicas` (`srpo events topics`). */
export interface TopicSettings {
  name: string;
  partitions: number;
  replicationFactor: number;
  minInsyncReplicas: number;
}

/** Reads back each topic's partitions, replication and `min.insync.replicas` from the cluster. */
export async function describeTopicSettings(admin: Admin, specs: TopicSpec[]): Promise<TopicSettings[]> {
  const names = specs.map((s) => s.name);
  const meta = await admin.fetchTopicMetadata({ topics: names });
  const { resources } = await admin.describeConfigs({
    includeSynonyms: false,
    resources: names.map((name) => ({ type: ConfigResourceTypes.TOPIC, name, configNames: ['min.insync.replicas'] })),
  });
  return names.map((name) => {
    const t = meta.topics.find((x) => x.name === name);
    const isr = resources.find((r) => r.resourceName === name)?.configEntries.find((e) => e.configName === 'min.insync.replicas')?.configValue;
    return { name, partitions: t?.partitions.length ?? 0, replicationFactor: t?.partitions[0]?.replicas.length ?? 0, minInsyncReplicas: Number(isr ?? 1) };
  });
}

const TIMESTAMP_CONFIGS = ['message.timestamp.type', 'message.timestamp.after.max.ms'];

/**
 * Existing topics whose spec bounds record timestamps (the raw topics) but whose settings bound
 * them less: another timestamp type, or a longer `message.timestamp.after.max.ms` (topics created
 * before the catalog asked for it; the broker's default is far longer). `ensureTopics` leaves
 * existing topics' settings alone; the materializer warns about these (docs/materializer.md).
 */
export async function topicsWithoutTimestampBound(admin: Admin, specs: TopicSpec[]): Promise<string[]> {
  const wanted = specs.filter((s) => s.config['message.timestamp.after.max.ms'] !== undefined);
  if (wanted.length === 0) return [];
  const { resources } = await admin.describeConfigs({
    includeSynonyms: false,
    resources: wanted.map((s) => ({ type: ConfigResourceTypes.TOPIC, name: s.name, configNames: TIMESTAMP_CONFIGS })),
  });
  return resources
    .filter((r) => {
      const spec = wanted.find((s) => s.name === r.resourceName);
      const value = (name: string) => r.configEntries.find((e) => e.configName === name)?.configValue;
      return (
        spec === undefined ||
        value('message.timestamp.type') !== spec.config['message.timestamp.type'] ||
        !(Number(value('message.timestamp.after.max.ms')) <= Number(spec.config['message.timestamp.after.max.ms']))
      );
    })
    .map((r) => r.resourceName);
}

/**
 * Creates topics, tolerating another process creating them at the same moment
 * (two instances starting together), and waits until every partition has a
 * leader, so that the next produce or offset request does not race the election.
 */
export async function createTopicsIdempotent(admin: Admin, topics: ITopicConfig[], timeoutMs = 30_000): Promise<void> {
  try {
    await admin.createTopics({ topics, waitForLeaders: true });
  } catch (e) {
    const errors = (e as { errors?: { type?: string }[] }).errors ?? [];
    const onlyExists = errors.length > 0 && errors.every((x) => x.type === 'TOPIC_ALREADY_EXISTS');
    // kafkajs's own leader wait gives up with a retriable error on a busy broker (one just
    // restarted with many partitions); the topics exist by then, so poll below instead.
    if (!onlyExists && !isRetriable(e)) throw e;
  }
  const names = topics.map((t) => t.topic);
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      const meta = await admin.fetchTopicMetadata({ topics: names });
      if (meta.topics.length === names.length && meta.topics.every((t) => t.partitions.length > 0 && t.partitions.every((p) => p.leader >= 0))) return;
    } catch (e) {
      if (Date.now() > deadline) throw e;
    }
    if (Date.now() > deadline)
      throw new SrpoError(ErrorCode.UNAVAILABLE, `topics ${names.join(', ')} have no leaders after ${timeoutMs} ms`, { retriable: true });
    await new Promise((r) => setTimeout(r, 200));
  }
}
