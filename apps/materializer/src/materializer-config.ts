import * as os from 'os';
import * as path from 'path';
import { ConfigError, EnvReader, Logger, LogLevel } from '@srpo/core';
import { EventLimits, KafkaConnectionOptions, readKafkaConnection, readSchemaRegistry, SchemaRegistryClient, TopicCatalogOptions } from '@srpo/events';
import { readMaterializerSettings } from '@srpo/materializer';
import { ObjectiveConfig } from '@srpo/srpo';
import { DEFAULT_MAX_PROCESSING_ATTEMPTS, STREAM_CLIENT_NAMES, type StreamClientName } from '@srpo/streams';

/**
 * The materializer's configuration; the only module of the app that reads the
 * environment. Fails at boot with the name of a bad variable.
 *
 * | variable | default | meaning |
 * | --- | --- | --- |
 * | KAFKA_* | local broker | see readKafkaConnection |
 * | SRPO_TOPIC_PREFIX | `srpo.` | topic names |
 * | SRPO_RAW_PARTITIONS / SRPO_DERIVED_PARTITIONS | 6 / 3 | partitions when creating topics |
 * | SRPO_APP_ID | `<prefix>materializer` | consumer groups, transactional ids, changelogs |
 * | SRPO_SET_TTL_MS, SRPO_GROUP_TTL_MS, SRPO_REWARD_WINDOWS, SRPO_DEDUPE_RETENTION_MS, SRPO_MAX_BROKER_SKEW_MS, SRPO_MAX_LATENESS_MS, SRPO_ADVANTAGE_STD, SRPO_ADVANTAGE_EPS, SRPO_PROGRESS_FALLBACK | see readMaterializerSettings (libs/materializer) | the settings that decide sets and groups, shared with `srpo replay --rematerialize` |
 * | SRPO_MAX_PAYLOAD_BYTES | 1048576 | larger messages are dead-lettered |
 * | SRPO_RECORDS_PER_TRANSACTION | 500 | chunk size of one Kafka transaction |
 * | SRPO_MAX_PROCESSING_ATTEMPTS | 3 | times a processor may throw on one record before the record is dead-lettered as `PROCESSING_FAILED` and its partition moves on (errors marked retriable and failed transactions do not count) |
 * | SRPO_STATE_STORE | lmdb | `lmdb`: processor state in a local LMDB copy under the changelog (restart reads the copy and the changelog since its checkpoint); `memory`: on the heap, restored from the whole changelog |
 * | SRPO_STATE_DIR | `<os tmpdir>/srpo-state` | where the local copies live (one directory per task); put it on a persistent volume, as Kafka Streams' state.dir |
 * | SRPO_STATE_CACHE_VALUES | 4096 | decoded values each local store keeps in memory |
 * | SRPO_FAULT_KILL_AT_LOCAL_WRITE | unset | TEST-ONLY: SIGKILL inside the N-th local state write, before it commits |
 * | SRPO_KAFKA_CLIENT | kafkajs | the stream runtime's client for consuming and transactions: `kafkajs` or `platformatic` (@platformatic/kafka; docs/state.md, docs/benchmarks.md) |
 * | SRPO_MATERIALIZER_ROLES | sets,groups | sub-topologies this process runs; run `sets` and `groups` in separate processes to use two cores |
 * | SRPO_SESSION_TIMEOUT_MS | 30000 | consumer session timeout: how fast a dead instance's tasks move |
 * | SRPO_SCHEMA_REGISTRY_URL (+ _USER, _PASSWORD) | unset | Confluent wire format with this registry; unset: single-object encoding |
 * | SRPO_METRICS_PORT | 0 (off) | `/metrics` and `/health` on 127.0.0.1 |
 * | SRPO_LOG_LEVEL | info | debug, info, warn, error |
 */
export interface MaterializerConfig {
  kafka: KafkaConnectionOptions;
  topics: TopicCatalogOptions;
  appId: string;
  setTtlMs: number;
  groupTtlMs: number;
  /** Per reward source, the wait for its outcome (SRPO_REWARD_WINDOWS, docs/rewards.md). */
  rewardWindows: Record<string, number>;
  dedupeRetentionMs: number;
  maxBrokerSkewMs: number;
  maxLatenessMs: number;
  maxPayloadBytes: number;
  objective: ObjectiveConfig;
  recordsPerTransaction: number;
  /** Processor throws on one record before it is dead-lettered as a poison record (SRPO_MAX_PROCESSING_ATTEMPTS). */
  maxProcessingAttempts: number;
  /** Local state copies' directory; undefined: in-memory stores (SRPO_STATE_STORE=memory). */
  stateDir?: string;
  stateCacheValues: number;
  /** TEST-ONLY (SRPO_FAULT_KILL_AT_LOCAL_WRITE): kill the process inside this local write (1-based). */
  killAtLocalWrite?: number;
  sessionTimeoutMs: number;
  /** The stream runtime's Kafka client (SRPO_KAFKA_CLIENT). */
  kafkaClient: StreamClientName;
  roles: ('sets' | 'groups')[];
  schemaRegistry?: SchemaRegistryClient;
  metricsPort: number;
  limits: EventLimits;
  logLevel: LogLevel;
}

export function loadMaterializerConfig(env: Readonly<Record<string, string | undefined>> = process.env): MaterializerConfig {
  const r = new EnvReader(env);
  const prefix = r.str('SRPO_TOPIC_PREFIX', 'srpo.');
  const settings = readMaterializerSettings(env);
  const config: MaterializerConfig = {
    kafka: readKafkaConnection(r, r.str('SRPO_CLIENT_ID', 'srpo-materializer')),
    topics: {
      prefix,
      rawPartitions: r.int('SRPO_RAW_PARTITIONS', 6, { min: 1, max: 1024 }),
      derivedPartitions: r.int('SRPO_DERIVED_PARTITIONS', 3, { min: 1, max: 1024 }),
    },
    appId: r.str('SRPO_APP_ID', `${prefix}materializer`),
    setTtlMs: settings.setTtlMs,
    groupTtlMs: settings.groupTtlMs,
    rewardWindows: settings.rewardWindows,
    dedupeRetentionMs: settings.dedupeRetentionMs,
    maxBrokerSkewMs: settings.maxBrokerSkewMs,
    maxLatenessMs: settings.maxLatenessMs,
    maxPayloadBytes: r.int('SRPO_MAX_PAYLOAD_BYTES', 1024 * 1024, { min: 1024 }),
    objective: settings.objective,
    recordsPerTransaction: r.int('SRPO_RECORDS_PER_TRANSACTION', 500, { min: 1, max: 100_000 }),
    maxProcessingAttempts: r.int('SRPO_MAX_PROCESSING_ATTEMPTS', DEFAULT_MAX_PROCESSING_ATTEMPTS, { min: 1, max: 100 }),
    ...readStateStore(r),
    sessionTimeoutMs: r.int('SRPO_SESSION_TIMEOUT_MS', 30_000, { min: 6_000, max: 300_000 }),
    kafkaClient: r.oneOf('SRPO_KAFKA_CLIENT', STREAM_CLIENT_NAMES, 'kafkajs'),
    roles: readRoles(r),
    schemaRegistry: readSchemaRegistry(r),
    metricsPort: r.int('SRPO_METRICS_PORT', 0, { min: 0, max: 65535 }),
    limits: settings.limits,
    logLevel: r.oneOf('SRPO_LOG_LEVEL', ['debug', 'info', 'warn', 'error'] as const, 'info'),
  };
  Logger.configure({ level: config.logLevel });
  return config;
}

function readStateStore(r: EnvReader): Pick<MaterializerConfig, 'stateDir' | 'stateCacheValues' | 'killAtLocalWrite'> {
  const kind = r.oneOf('SRPO_STATE_STORE', ['lmdb', 'memory'] as const, 'lmdb');
  const dir = r.str('SRPO_STATE_DIR', path.join(os.tmpdir(), 'srpo-state'));
  if (kind === 'lmdb' && !path.isAbsolute(dir)) throw new ConfigError('SRPO_STATE_DIR', `must be an absolute path, got "${dir}"`);
  const kill = r.optionalStr('SRPO_FAULT_KILL_AT_LOCAL_WRITE') === undefined ? undefined : r.int('SRPO_FAULT_KILL_AT_LOCAL_WRITE', undefined, { min: 1 });
  return {
    ...(kind === 'lmdb' ? { stateDir: dir } : {}),
    stateCacheValues: r.int('SRPO_STATE_CACHE_VALUES', 4096, { min: 16, max: 10_000_000 }),
    ...(kill !== undefined ? { killAtLocalWrite: kill } : {}),
  };
}

function readRoles(r: EnvReader): ('sets' | 'groups')[] {
  const roles = r.list('SRPO_MATERIALIZER_ROLES', ['sets', 'groups']);
  for (const role of roles) {
    if (role !== 'sets' && role !== 'groups') throw new ConfigError('SRPO_MATERIALIZER_ROLES', `unknown role "${role}"; use sets, groups or both`);
  }
  if (roles.length === 0) throw new ConfigError('SRPO_MATERIALIZER_ROLES', 'names no role');
  return roles as ('sets' | 'groups')[];
}
