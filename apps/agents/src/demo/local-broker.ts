import { spawnSync } from 'child_process';
import * as path from 'path';
import type { Admin } from 'kafkajs';
import { ErrorCode, errorMessage, repoRoot, SrpoError } from '@srpo/core';

export interface BrokerPlan {
  /** True when KAFKA_BROKERS is set: nothing local is started. */
  external: boolean;
  brokers: readonly string[];
  /** The local broker (infra/kafka/kafka.sh): client port and data directory. */
  local: { port: number; dir?: string };
}

/**
 * Makes sure a broker answers before a demo starts anything on it: an external cluster is used
 * as it is; otherwise the local one is started with `infra/kafka/kafka.sh start` unless it
 * already runs. `env` is the environment kafka.sh runs in (the caller's).
 */
export function ensureBroker(plan: BrokerPlan, env: Readonly<Record<string, string | undefined>>, say: (text: string) => void): void {
  if (plan.external) {
    say(`using the cluster at ${plan.brokers.join(',')}`);
    return;
  }
  const script = path.join(repoRoot(), 'infra', 'kafka', 'kafka.sh');
  const scriptEnv = { ...env, SRPO_KAFKA_PORT: String(plan.local.port), ...(plan.local.dir ? { SRPO_KAFKA_DIR: plan.local.dir } : {}) };
  const status = spawnSync('bash', [script, 'status'], { env: scriptEnv, stdio: 'ignore' });
  if (status.status === 0) {
    say(`local broker already running on 127.0.0.1:${plan.local.port}`);
    return;
  }
  say('starting the local Kafka broker (infra/kafka/kafka.sh start)');
  const started = spawnSync('bash', [script, 'start'], { env: scriptEnv, stdio: ['ignore', 'inherit', 'inherit'] });
  if (started.status !== 0) throw new SrpoError(ErrorCode.ENVIRONMENT, `the local broker did not start (infra/kafka/kafka.sh start exited ${started.status})`);
}

/** A group no one joins: describing it makes the cluster find (and, on a new broker, create) its coordinator. */
const PROBE_GROUP = 'srpo-coordinator-probe';

/**
 * Waits until the cluster can coordinate consumer groups. A broker that has just started accepts
 * clients before it can: the offsets topic is created on the first FindCoordinator and then
 * loaded, and a consumer that joins meanwhile crashes on COORDINATOR_NOT_AVAILABLE and restarts,
 * a warning line each time (seven on a new user's first demo). Describing a group waits for the
 * coordinator through kafkajs's own retries, whose lines are debug.
 */
export async function awaitGroupCoordinator(admin: Admin, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      await admin.describeGroups([PROBE_GROUP]);
      return;
    } catch (e) {
      if (Date.now() >= deadline)
        throw new SrpoError(ErrorCode.ENVIRONMENT, `the cluster has no group coordinator after ${timeoutMs / 1000} s: ${errorMessage(e)}`);
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
  }
}
