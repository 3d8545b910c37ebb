import { BACKEND_REQUESTS, BackendRequest, EnvReader, Logger, LogLevel, tfBackendSettings, type TfBackendSettings } from '@srpo/core';
import * as path from 'path';
import { KafkaConnectionOptions, readKafkaConnection, readSchemaRegistry, SchemaRegistryClient, TopicCatalogOptions } from '@srpo/events';
import { readMaterializerSettings, type MaterializerSettings } from '@srpo/materializer';
import { readStore, type StoreConfig } from '@srpo/store';

/**
 * The CLI's configuration, validated once at start. The only place in the CLI
 * that reads the environment.
 */
export interface CliConfig {
  kafka: KafkaConnectionOptions;
  /** SRPO_SCHEMA_REGISTRY_URL (+ _USER, _PASSWORD): audits and replays read Confluent-framed events with it. */
  schemaRegistry?: SchemaRegistryClient;
  /** True when KAFKA_BROKERS points at an external cluster: nothing local is started. */
  externalKafka: boolean;
  /** The local broker (infra/kafka): client port and data directory. */
  localKafka: { port: number; dir?: string };
  /** Environment handed to child processes (infra scripts) unchanged. */
  childEnv: Readonly<Record<string, string | undefined>>;
  topics: TopicCatalogOptions;
  backend: BackendRequest;
  /** How the backend loads: `SRPO_WEBGPU_FLAGS`, `SRPO_DAWN_NODE`, `SRPO_TF_CUDA`, `LD_LIBRARY_PATH` (tfBackendSettings). */
  backendSettings: TfBackendSettings;
  logLevel: LogLevel;
  maxPayloadBytes: number;
  /** The learner's audit store (same variables as the learner: SRPO_DATABASE_URL, SRPO_DATABASE_SCHEMA, SRPO_SQLITE_PATH). */
  store: StoreConfig;
  /** SRPO_CHECKPOINT_DIR when set: audits load checkpoints from `<dir>/<policy>/v<N>` instead of the recorded URIs. */
  checkpointDir?: string;
  /** SRPO_REPLAY_DIR (default `.srpo/replays`): each replay run's store and checkpoints live in `<dir>/<run>/`. */
  replayDir: string;
  /**
   * The live materializer's settings (SRPO_SET_TTL_MS, SRPO_GROUP_TTL_MS, advantage settings, ...),
   * read with the materializer's own parser so `replay --rematerialize` uses the same variables
   * and defaults as the recorded run. Parsed on first call: a bad value fails only the command
   * that needs it, naming the variable.
   */
  materializerSettings: () => MaterializerSettings;
}

export function loadCliConfig(env: Readonly<Record<string, string | undefined>> = process.env): CliConfig {
  const reader = new EnvReader(env);
  let materializer: MaterializerSettings | undefined;
  const localKafka = { port: reader.int('SRPO_KAFKA_PORT', 9092, { min: 1, max: 65534 }), dir: reader.optionalStr('SRPO_KAFKA_DIR') };
  const kafka = readKafkaConnection(reader, reader.str('SRPO_CLIENT_ID', 'srpo-cli'));
  if (!reader.has('KAFKA_BROKERS')) kafka.brokers = [`127.0.0.1:${localKafka.port}`];
  const config: CliConfig = {
    kafka,
    schemaRegistry: readSchemaRegistry(reader),
    externalKafka: reader.has('KAFKA_BROKERS'),
    localKafka,
    childEnv: env,
    topics: {
      prefix: reader.str('SRPO_TOPIC_PREFIX', 'srpo.'),
      rawPartitions: reader.int('SRPO_RAW_PARTITIONS', 6, { min: 1, max: 1024 }),
      derivedPartitions: reader.int('SRPO_DERIVED_PARTITIONS', 3, { min: 1, max: 1024 }),
    },
    backend: reader.oneOf('SRPO_BACKEND', BACKEND_REQUESTS, 'auto'),
    backendSettings: tfBackendSettings(reader),
    logLevel: reader.oneOf('SRPO_LOG_LEVEL', ['debug', 'info', 'warn', 'error'] as const, 'warn'),
    maxPayloadBytes: reader.int('SRPO_MAX_PAYLOAD_BYTES', 1024 * 1024, { min: 1024 }),
    store: readStore(reader, process.cwd()),
    checkpointDir: reader.has('SRPO_CHECKPOINT_DIR') ? path.resolve(reader.str('SRPO_CHECKPOINT_DIR')) : undefined,
    replayDir: path.resolve(reader.str('SRPO_REPLAY_DIR', '.srpo/replays')),
    materializerSettings: () => (materializer ??= readMaterializerSettings(env)),
  };
  Logger.configure({ level: config.logLevel });
  return config;
}
