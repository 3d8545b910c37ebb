import { spawnSync } from 'child_process';
import * as path from 'path';
import { Command } from 'commander';
import { repoRoot } from '@srpo/core';
import { createKafka } from '@srpo/events';
import { CliConfig } from '../cli-config';

/** `srpo kafka start|stop|status`: the local broker from infra/kafka, or a check of KAFKA_BROKERS. */
export function kafkaCommand(config: () => CliConfig): Command {
  const cmd = new Command('kafka').description('run the local single-node Kafka broker (KRaft) from the Maven Central jars');
  const script = () => path.join(repoRoot(), 'infra', 'kafka', 'kafka.sh');
  const run = (verb: string): number => {
    const { localKafka, childEnv } = config();
    const { port, dir } = localKafka;
    const env = { ...childEnv, SRPO_KAFKA_PORT: String(port), ...(dir ? { SRPO_KAFKA_DIR: dir } : {}) };
    return spawnSync('bash', [script(), verb], { stdio: 'inherit', env }).status ?? 1;
  };

  cmd
    .command('start')
    .description('start the local broker and wait until it accepts clients (no-op when KAFKA_BROKERS is set)')
    .action(async () => {
      const c = config();
      if (c.externalKafka) {
        process.stderr.write(`KAFKA_BROKERS is set (${c.kafka.brokers.join(',')}): using that cluster, nothing started\n`);
        process.exitCode = (await reachable(c)) ? 0 : 1;
        return;
      }
      const rc = run('start');
      if (rc !== 0) {
        process.exitCode = rc;
        return;
      }
      process.exitCode = (await reachable(c)) ? 0 : 1;
    });
  cmd
    .command('stop')
    .description('stop the local broker cleanly')
    .action(() => {
      process.exitCode = run('stop');
    });
  cmd
    .command('status')
    .description('report whether the broker accepts clients (exit 1 when not)')
    .action(async () => {
      const c = config();
      if (!c.externalKafka) run('status');
      process.exitCode = (await reachable(c)) ? 0 : 1;
    });
  return cmd;
}

async function reachable(config: CliConfig): Promise<boolean> {
  const admin = createKafka({ ...config.kafka, retries: 2 }).admin();
  try {
    await admin.connect();
    const cluster = await admin.describeCluster();
    process.stdout.write(
      `cluster ${cluster.clusterId}: ${cluster.brokers.length} broker(s) at ${cluster.brokers.map((b) => `${b.host}:${b.port}`).join(',')}\n`,
    );
    return true;
  } catch (e) {
    process.stderr.write(`broker not reachable at ${config.kafka.brokers.join(',')}: ${(e as Error).message}\n`);
    return false;
  } finally {
    await admin.disconnect().catch(() => undefined);
  }
}
