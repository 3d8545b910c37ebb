import { ConfigError, EnvReader, Logger, LogLevel } from '@srpo/core';
import { DEFAULT_EVENT_LIMITS, EventLimits, KafkaConnectionOptions, readKafkaConnection, readSchemaRegistry, SchemaRegistryClient, TopicCatalogOptions } from '@srpo/events';
import { ObjectiveConfig, resolveObjectiveConfig } from '@srpo/srpo';

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
 * | SRPO_SET_TTL_MS | 60000 | event time for a set's members and reward to arrive |
 * | SRPO_GROUP_TTL_MS | 120000 | event time for an undeclared group to fill |
 * | SRPO_DEDUPE_RETENTION_MS | 600000 | how long ids of closed episodes are remembered |
 * | SRPO_MAX_FUTURE_SKEW_MS / SRPO_MAX_LATENESS_MS | 3600000 / 86400000 | clock-skew limits |
 * | SRPO_MAX_PAYLOAD_BYTES | 1048576 | larger messages are dead-lettered |
 * | SRPO_ADVANTAGE_STD, SRPO_ADVANTAGE_EPS, SRPO_PROGRESS_FALLBACK | sample, 1e-6, false | advantage settings |
 * | SRPO_RECORDS_PER_TRANSACTION | 500 | chunk size of one Kafka transaction |
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
  dedupeRetentionMs: number;
  maxFutureSkewMs: number;
  maxLatenessMs: number;
  maxPayloadBytes: number;
  objective: ObjectiveConfig;
  recordsPerTransaction: number;
  sessionTimeoutMs: number;
  roles: ('sets' | 'groups')[];
  schemaRegistry?: SchemaRegistryClient;
  metricsPort: number;
  limits: EventLimits;
  logLevel: LogLevel;
}

export function loadMaterializerConfig(env: Readonly<Record<string, string | undefined>> = process.env): MaterializerConfig {
  const r = new EnvReader(env);
  const prefix = r.str('SRPO_TOPIC_PREFIX', 'srpo.');
  const config: MaterializerConfig = {
    kafka: readKafkaConnection(r, r.str('SRPO_CLIENT_ID', 'srpo-materializer')),
    topics: {
      prefix,
      rawPartitions: r.int('SRPO_RAW_PARTITIONS', 6, { min: 1, max: 1024 }),
      derivedPartitions: r.int('SRPO_DERIVED_PARTITIONS', 3, { min: 1, max: 1024 }),
    },
    appId: r.str('SRPO_APP_ID', `${prefix}materializer`),
    setTtlMs: r.int('SRPO_SET_TTL_MS', 60_000, { min: 1 }),
    groupTtlMs: r.int('SRPO_GROUP_TTL_MS', 120_000, { min: 1 }),
    dedupeRetentionMs: r.int('SRPO_DEDUPE_RETENTION_MS', 600_000, { min: 0 }),
    maxFutureSkewMs: r.int('SRPO_MAX_FUTURE_SKEW_MS', 3_600_000, { min: 0 }),
    maxLatenessMs: r.int('SRPO_MAX_LATENESS_MS', 86_400_000, { min: 0 }),
    maxPayloadBytes: r.int('SRPO_MAX_PAYLOAD_BYTES', 1024 * 1024, { min: 1024 }),
    objective: resolveObjectiveConfig({
      advantageStd: r.oneOf('SRPO_ADVANTAGE_STD', ['sample', 'population'] as const, 'sample'),
      advantageEps: r.num('SRPO_ADVANTAGE_EPS', 1e-6, { min: 0 }),
      progress: { enabled: r.bool('SRPO_PROGRESS_FALLBACK', false) },
    }),
    recordsPerTransaction: r.int('SRPO_RECORDS_PER_TRANSACTION', 500, { min: 1, max: 100_000 }),
    sessionTimeoutMs: r.int('SRPO_SESSION_TIMEOUT_MS', 30_000, { min: 6_000, max: 300_000 }),
    roles: readRoles(r),
    schemaRegistry: readSchemaRegistry(r),
    metricsPort: r.int('SRPO_METRICS_PORT', 0, { min: 0, max: 65535 }),
    limits: DEFAULT_EVENT_LIMITS,
    logLevel: r.oneOf('SRPO_LOG_LEVEL', ['debug', 'info', 'warn', 'error'] as const, 'info'),
  };
  Logger.configure({ level: config.logLevel });
  return config;
}

function readRoles(r: EnvReader): ('sets' | 'groups')[] {
  const roles = r.list('SRPO_MATERIALIZER_ROLES', ['sets', 'groups']);
  for (const role of roles) {
    if (role !== 'sets' && role !== 'groups') throw new ConfigError('SRPO_MATERIALIZER_ROLES', `unknown role "${role}"; use sets, groups or both`);
  }
  if (roles.length === 0) throw new ConfigError('SRPO_MATERIALIZER_ROLES', 'names no role');
  return roles as ('sets' | 'groups')[];
}
