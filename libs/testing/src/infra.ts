import { execFileSync } from 'child_process';
import { randomBytes } from 'crypto';
import * as fs from 'fs';
import * as path from 'path';
import { EnvReader, readKafkaBrokers, repoRoot } from '@srpo/core';

/**
 * Real infrastructure for integration tests. Tests never mock the broker: they
 * use KAFKA_BROKERS when set (CI starts the broker in .ci/run), otherwise they
 * start the local one from infra/kafka and mark it so jest.global-teardown.js
 * stops it again. The same goes for PostgreSQL.
 */
const MARKER_DIR = () => path.join(repoRoot(), '.srpo', 'test-started');

function markStarted(what: string): void {
  fs.mkdirSync(MARKER_DIR(), { recursive: true });
  fs.writeFileSync(path.join(MARKER_DIR(), what), String(process.pid));
}

function script(...parts: string[]): string {
  return path.join(repoRoot(), 'infra', ...parts);
}

/** Broker list for tests; starts the local broker when nothing is configured. */
export function ensureKafka(env: Readonly<Record<string, string | undefined>> = process.env): string[] {
  const configured = readKafkaBrokers(new EnvReader(env), []);
  if (configured.length > 0) return configured;
  const sh = script('kafka', 'kafka.sh');
  try {
    execFileSync('bash', [sh, 'status'], { stdio: 'ignore' });
  } catch {
    execFileSync('bash', [sh, 'start'], { stdio: 'inherit' });
    markStarted('kafka');
  }
  return ['127.0.0.1:9092'];
}

/** PostgreSQL URL for store tests; starts the local server when none is configured. */
export function ensurePostgres(env: Readonly<Record<string, string | undefined>> = process.env): string {
  if (env.SRPO_TEST_POSTGRES_URL) return env.SRPO_TEST_POSTGRES_URL;
  const sh = script('postgres', 'postgres.sh');
  try {
    execFileSync('bash', [sh, 'status'], { stdio: 'ignore' });
  } catch {
    execFileSync('bash', [sh, 'start'], { stdio: 'inherit' });
    markStarted('postgres');
  }
  return execFileSync('bash', [sh, 'url']).toString().trim();
}

/** A topic prefix no other test (or earlier run) uses, so tests never see each other's data. */
export function uniquePrefix(label: string): string {
  return `test.${label}.${Date.now().toString(36)}${randomBytes(3).toString('hex')}.`;
}
