import * as fs from 'fs';
import { Kafka, KafkaConfig, logLevel, LogEntry, SASLOptions } from 'kafkajs';
import { ConfigError, EnvReader, Logger, readKafkaBrokers } from '@srpo/core';
import { guardedSocketFactory } from './kafka-socket';
import { SchemaRegistryClient } from './schema-registry';

/**
 * How to reach the cluster. Read from configuration by each app's config module
 * (`readKafkaConnection`); secrets stay out of logs (the logger redacts them and
 * kafkajs's own log lines are routed through it).
 */
export interface KafkaConnectionOptions {
  brokers: string[];
  clientId: string;
  ssl?: { caFile?: string; certFile?: string; keyFile?: string; rejectUnauthorized: boolean };
  sasl?: { mechanism: 'plain' | 'scram-sha-256' | 'scram-sha-512'; username: string; password: string };
  connectionTimeoutMs?: number;
  requestTimeoutMs?: number;
  /** Retries of kafkajs's own retrier (per request). */
  retries?: number;
}

export const LOCAL_BROKER = '127.0.0.1:9092';

/**
 * Variables: KAFKA_BROKERS (comma-separated host:port, checked; default the local broker),
 * KAFKA_SSL (true/false), KAFKA_SSL_CA_FILE, KAFKA_SSL_CERT_FILE, KAFKA_SSL_KEY_FILE,
 * KAFKA_SSL_REJECT_UNAUTHORIZED (default true), KAFKA_SASL_MECHANISM
 * (plain|scram-sha-256|scram-sha-512), KAFKA_SASL_USERNAME, KAFKA_SASL_PASSWORD,
 * KAFKA_ALLOW_SASL_PLAINTEXT (default false).
 *
 * SASL without TLS is refused (a ConfigError naming KAFKA_SASL_MECHANISM) unless
 * KAFKA_ALLOW_SASL_PLAINTEXT=true: with `plain` the password crosses the network in clear, and
 * with SCRAM the exchange (open to offline guessing) and every record do.
 */
export function readKafkaConnection(env: EnvReader, clientId: string): KafkaConnectionOptions {
  const brokers = readKafkaBrokers(env, [LOCAL_BROKER]);
  const options: KafkaConnectionOptions = { brokers, clientId };
  const caFile = env.optionalStr('KAFKA_SSL_CA_FILE');
  if (env.bool('KAFKA_SSL', caFile !== undefined)) {
    options.ssl = {
      caFile,
      certFile: env.optionalStr('KAFKA_SSL_CERT_FILE'),
      keyFile: env.optionalStr('KAFKA_SSL_KEY_FILE'),
      rejectUnauthorized: env.bool('KAFKA_SSL_REJECT_UNAUTHORIZED', true),
    };
  }
  if (env.has('KAFKA_SASL_MECHANISM')) {
    options.sasl = {
      mechanism: env.oneOf('KAFKA_SASL_MECHANISM', ['plain', 'scram-sha-256', 'scram-sha-512'] as const),
      username: env.str('KAFKA_SASL_USERNAME'),
      password: env.str('KAFKA_SASL_PASSWORD'),
    };
    // Checked after the credentials, so a missing one is still named first.
    if (!options.ssl && !env.bool('KAFKA_ALLOW_SASL_PLAINTEXT', false)) {
      const exposed =
        options.sasl.mechanism === 'plain'
          ? 'the password would cross the network in clear'
          : 'the SCRAM exchange and every record would cross the network unencrypted';
      throw new ConfigError(
        'KAFKA_SASL_MECHANISM',
        `${options.sasl.mechanism} without TLS: ${exposed}; set KAFKA_SSL=true (or KAFKA_SSL_CA_FILE), or KAFKA_ALLOW_SASL_PLAINTEXT=true for a network you trust`,
      );
    }
  }
  return options;
}

export function createKafka(options: KafkaConnectionOptions, logger = new Logger('kafkajs')): Kafka {
  return new Kafka(kafkaConfig(options, logger));
}

/** The kafkajs configuration {@link createKafka} uses: our retry bounds, log routing and socket factory. */
export function kafkaConfig(options: KafkaConnectionOptions, logger = new Logger('kafkajs')): KafkaConfig {
  const config: KafkaConfig = {
    clientId: options.clientId,
    brokers: options.brokers,
    connectionTimeout: options.connectionTimeoutMs ?? 5000,
    requestTimeout: options.requestTimeoutMs ?? 30000,
    retry: { retries: options.retries ?? 8, initialRetryTime: 200, maxRetryTime: 5000 },
    logLevel: logLevel.WARN,
    logCreator: () => (entry: LogEntry) => forwardKafkaLog(logger, entry),
    // kafkajs's connect-timeout race left ended sockets marked connected (`write after end`).
    socketFactory: guardedSocketFactory(),
  };
  if (options.ssl) {
    config.ssl = {
      rejectUnauthorized: options.ssl.rejectUnauthorized,
      ca: options.ssl.caFile ? [fs.readFileSync(options.ssl.caFile, 'utf8')] : undefined,
      cert: options.ssl.certFile ? fs.readFileSync(options.ssl.certFile, 'utf8') : undefined,
      key: options.ssl.keyFile ? fs.readFileSync(options.ssl.keyFile, 'utf8') : undefined,
    };
  }
  if (options.sasl) {
    config.sasl = { ...options.sasl } as SASLOptions;
  }
  return config;
}

/**
 * kafkajs warns that bounded retries on an idempotent producer "may invalidate
 * EoS". Our retries are bounded on purpose (a dead broker must surface as an
 * error), and every consumer is idempotent on event id, so a re-sent record
 * after an exhausted retry is harmless.
 */
const EXPECTED_WARNINGS = [/Limiting retries for the idempotent producer/, /KafkaJS v2\.0\.0 switched default partitioner/];

/**
 * Errors kafkajs logs and then retries by itself; not worth an error line. All are retriable
 * protocol errors of a cluster that is still settling: a transaction or group coordinator
 * that moved or is loading (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS,
 * COORDINATOR_NOT_AVAILABLE), and metadata of a topic created a moment ago whose partitions
 * have no leader yet (UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE). Seen at every demo
 * start; a failure that outlasts kafkajs's retries still surfaces as the caller's error.
 */
const RETRIED_ERRORS =
  /another concurrent operation on the same transaction|coordinator is loading|not the leader for that topic-partition|group coordinator is not available|not the correct coordinator|does not host this topic-partition|no leader for this topic-partition/;

/**
 * kafkajs logs this at error level after a retriable consumer crash, then restarts the
 * consumer by itself: a recovered condition (the crash's own line says why, at its level;
 * coordinator moves on a broker that just started are the usual cause), so a warning.
 */
const SELF_RESTART = /^Restarting the consumer in \d+ms/;

/**
 * The connection's error line for a CreateTopics answer with per-topic errors. Its caller
 * (`createTopicsIdempotent`) gets the same errors in the exception and decides: topics that
 * already exist (two instances starting at once) are fine, anything else is thrown and logged
 * there. So the connection's copy is debug.
 */
const CREATE_TOPICS_ANSWER = /^Response CreateTopics\b/;

/** Maps one kafkajs log entry onto the project's logger (exported for its spec). */
export function forwardKafkaLog(logger: Logger, entry: LogEntry): void {
  const { message, ...rest } = entry.log;
  if (EXPECTED_WARNINGS.some((w) => w.test(message))) return;
  if (SELF_RESTART.test(message)) {
    logger.warn(message, { namespace: entry.namespace, ...rest });
    return;
  }
  const error = typeof rest.error === 'string' ? rest.error : '';
  if (RETRIED_ERRORS.test(message) || RETRIED_ERRORS.test(error) || (CREATE_TOPICS_ANSWER.test(message) && error === 'Topic creation errors')) {
    logger.debug(message, { namespace: entry.namespace, ...rest });
    return;
  }
  const fields = { namespace: entry.namespace, ...rest };
  if (entry.level <= logLevel.ERROR) logger.error(message, fields);
  else if (entry.level === logLevel.WARN) logger.warn(message, fields);
  else logger.debug(message, fields);
}

/** kafkajs's errors for a broker that cannot be reached, whatever they are wrapped in. */
const UNREACHABLE_NAMES = new Set(['KafkaJSConnectionError', 'KafkaJSConnectionClosedError', 'KafkaJSBrokerNotFound', 'KafkaJSRequestTimeoutError']);
const UNREACHABLE_MESSAGE =
  /^Connection error: (connect |read |write )?(ECONNREFUSED|ECONNRESET|EPIPE|ETIMEDOUT|EHOSTUNREACH)|^Connection timeout|^Closed connection/;

/**
 * Whether a failure is the cluster being out of reach (stopped, restarting, a network cut):
 * transient for a loop that starts an app, even where kafkajs, its own retries spent, reports
 * it as a KafkaJSNonRetriableError ("Connection error: connect ECONNREFUSED …"). The cause
 * chain is followed a few levels.
 */
export function isKafkaUnreachable(error: unknown): boolean {
  let e: unknown = error;
  for (let depth = 0; depth < 6 && typeof e === 'object' && e !== null; depth++) {
    const x = e as { name?: unknown; message?: unknown; cause?: unknown };
    if (typeof x.name === 'string' && UNREACHABLE_NAMES.has(x.name)) return true;
    if (typeof x.message === 'string' && UNREACHABLE_MESSAGE.test(x.message)) return true;
    e = x.cause;
  }
  return false;
}

/**
 * SRPO_SCHEMA_REGISTRY_URL switches producers to the Confluent wire format with
 * ids from that registry (SRPO_SCHEMA_REGISTRY_USER / SRPO_SCHEMA_REGISTRY_PASSWORD
 * for basic auth). Unset: Avro single-object encoding, no registry needed.
 */
export function readSchemaRegistry(env: EnvReader): SchemaRegistryClient | undefined {
  const url = env.optionalStr('SRPO_SCHEMA_REGISTRY_URL');
  if (!url) return undefined;
  try {
    new URL(url);
  } catch {
    throw new ConfigError('SRPO_SCHEMA_REGISTRY_URL', `not a URL: "${url}"`);
  }
  const username = env.optionalStr('SRPO_SCHEMA_REGISTRY_USER');
  return new SchemaRegistryClient({ url, basicAuth: username ? { username, password: env.str('SRPO_SCHEMA_REGISTRY_PASSWORD') } : undefined });
}
