import { EnvReader } from './config';
import { ConfigError } from './errors';

/** The variable naming the Kafka cluster (comma-separated `host:port`). */
export const KAFKA_BROKERS = 'KAFKA_BROKERS';

export type BrokerList = { ok: true; brokers: { host: string; port: number }[] } | { ok: false; problem: string };

/**
 * Validates KAFKA_BROKERS as kafkajs takes it: comma-separated `host:port`
 * (IPv6 in brackets), no scheme. kafkajs itself only fails at connect time
 * with an unhelpful message, hence the explicit check.
 */
export function parseBrokerList(raw: string): BrokerList {
  const entries = raw
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s.length > 0);
  if (entries.length === 0) return { ok: false, problem: 'is empty' };
  const brokers: { host: string; port: number }[] = [];
  for (const entry of entries) {
    if (/^[a-z][a-z0-9+.-]*:\/\//i.test(entry)) return { ok: false, problem: `"${entry}" has a scheme; give host:port only` };
    const m = /^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?):(\d{1,5})$/.exec(entry);
    if (!m) return { ok: false, problem: `"${entry}" is not host:port` };
    const port = Number(m[2]);
    if (port < 1 || port > 65535) return { ok: false, problem: `"${entry}": port ${port} is outside 1-65535` };
    brokers.push({ host: m[1], port });
  }
  return { ok: true, brokers };
}

/**
 * KAFKA_BROKERS as the list kafkajs takes (entries trimmed), `fallback` when it is not set;
 * a value that is not a `host:port` list is a {@link ConfigError} naming the variable.
 */
export function readKafkaBrokers(env: EnvReader, fallback: string[]): string[] {
  const raw = env.optionalStr(KAFKA_BROKERS);
  if (raw === undefined) return fallback;
  const parsed = parseBrokerList(raw);
  if (!parsed.ok) throw new ConfigError(KAFKA_BROKERS, parsed.problem);
  return env.list(KAFKA_BROKERS);
}
