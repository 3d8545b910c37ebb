import { BACKEND_REQUESTS, BackendRequest, EnvReader, Logger, LogLevel } from '@srpo/core';
import { KafkaConnectionOptions, readKafkaConnection, TopicCatalogOptions } from '@srpo/events';

/**
 * The CLI's configuration, validated once at start. The only place in the CLI
 * that reads the environment.
 */
export interface CliConfig {
  kafka: KafkaConnectionOptions;
  /** True when KAFKA_BROKERS points at an external cluster: nothing local is started. */
  externalKafka: boolean;
  /** The local broker (infra/kafka): client port and data directory. */
  localKafka: { port: number; dir?: string };
  /** Environment handed to child processes (infra scripts) unchanged. */
  childEnv: Readonly<Record<string, string | undefined>>;
  topics: TopicCatalogOptions;
  backend: BackendRequest;
  logLevel: LogLevel;
  maxPayloadBytes: number;
}

export function loadCliConfig(env: Readonly<Record<string, string | undefined>> = process.env): CliConfig {
  const reader = new EnvReader(env);
  const localKafka = { port: reader.int('SRPO_KAFKA_PORT', 9092, { min: 1, max: 65534 }), dir: reader.optionalStr('SRPO_KAFKA_DIR') };
  const kafka = readKafkaConnection(reader, reader.str('SRPO_CLIENT_ID', 'srpo-cli'));
  if (!reader.has('KAFKA_BROKERS')) kafka.brokers = [`127.0.0.1:${localKafka.port}`];
  const config: CliConfig = {
    kafka,
    externalKafka: reader.has('KAFKA_BROKERS'),
    localKafka,
    childEnv: env,
    topics: {
      prefix: reader.str('SRPO_TOPIC_PREFIX', 'srpo.'),
      rawPartitions: reader.int('SRPO_RAW_PARTITIONS', 6, { min: 1, max: 1024 }),
      derivedPartitions: reader.int('SRPO_DERIVED_PARTITIONS', 3, { min: 1, max: 1024 }),
    },
    backend: reader.oneOf('SRPO_BACKEND', BACKEND_REQUESTS, 'auto'),
    logLevel: reader.oneOf('SRPO_LOG_LEVEL', ['debug', 'info', 'warn', 'error'] as const, 'warn'),
    maxPayloadBytes: reader.int('SRPO_MAX_PAYLOAD_BYTES', 1024 * 1024, { min: 1024 }),
  };
  Logger.configure({ level: config.logLevel });
  return config;
}
