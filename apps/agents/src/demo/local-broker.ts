import { spawnSync } from 'child_process';
import * as path from 'path';
import { ErrorCode, repoRoot, SrpoError } from '@srpo/core';

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
