import { Command, InvalidArgumentError } from 'commander';
import { EnvReader, initTfBackend, Logger, MetricsSink, onShutdownSignals, serveMetrics } from '@srpo/core';
import { createKafka, topicCatalog } from '@srpo/events';
import { followPolicyVersions, Publisher, readPublisherConfig } from '@srpo/serving';
import type { CliConfig } from '../cli-config';

function positive(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError('must be a positive integer');
  return n;
}

interface PublishFlags {
  servers?: string;
  gateways?: string;
  policies?: string;
  dir?: string;
  keep?: number;
}

/**
 * `srpo publish`: follows policy-versions and hands each new LoRA version to inference servers
 * through vLLM's `/v1/load_lora_adapter` (vLLM, `srpo serve --model`), named `<policy>@v<N>`,
 * unloads versions older than the newest `--keep`, and tells `srpo gateway`s which name is
 * current. It runs beside the learner, never in its update path; a server that is down is
 * retried with backoff and reported while the others are served. Flags override the
 * `SRPO_PUBLISH_*` variables (libs/serving readPublisherConfig). Ctrl-C stops it.
 */
export function publishCommand(config: () => CliConfig, env: Readonly<Record<string, string | undefined>> = process.env): Command {
  return new Command('publish')
    .description(
      'follow policy versions and load each new LoRA version on vLLM-compatible servers (/v1/load_lora_adapter), telling the gateways which is current',
    )
    .option('--servers <urls>', 'comma-separated servers, e.g. http://a:8000,http://b:8001 (default SRPO_PUBLISH_SERVERS)')
    .option('--gateways <urls>', 'comma-separated srpo gateways to tell (default SRPO_PUBLISH_GATEWAYS)')
    .option('--policies <ids>', 'policies to publish (default SRPO_PUBLISH_POLICIES or all)')
    .option('--dir <dir>', 'where adapters are written; the servers must read the same path (default SRPO_PUBLISH_DIR or .srpo/published)')
    .option('--keep <n>', 'versions per policy left loaded on each server (default SRPO_PUBLISH_KEEP or 3)', positive)
    .action(async (flags: PublishFlags) => {
      const merged: Record<string, string | undefined> = {
        ...env,
        ...(flags.servers !== undefined ? { SRPO_PUBLISH_SERVERS: flags.servers } : {}),
        ...(flags.gateways !== undefined ? { SRPO_PUBLISH_GATEWAYS: flags.gateways } : {}),
        ...(flags.policies !== undefined ? { SRPO_PUBLISH_POLICIES: flags.policies } : {}),
        ...(flags.dir !== undefined ? { SRPO_PUBLISH_DIR: flags.dir } : {}),
        ...(flags.keep !== undefined ? { SRPO_PUBLISH_KEEP: String(flags.keep) } : {}),
      };
      const c = readPublisherConfig(new EnvReader(merged), process.cwd());
      const log = new Logger('publish');
      await initTfBackend(config().backend, config().backendSettings);
      const metrics = new MetricsSink();
      const metricsServer = c.metricsPort !== undefined ? await serveMetrics(metrics, c.metricsPort) : undefined;
      const publisher = new Publisher({
        servers: c.servers,
        gateways: c.gateways,
        exportDir: c.exportDir,
        keep: c.keep,
        serverApiKey: c.serverApiKey,
        gatewayApiKey: c.gatewayApiKey,
        requestTimeoutMs: c.requestTimeoutMs,
        reconcileMs: c.reconcileMs,
        retry: { maxDelayMs: c.retryMaxMs },
        metrics,
      });
      const follower = await followPolicyVersions({
        kafka: createKafka(c.kafka),
        catalog: topicCatalog(c.topics),
        policies: c.policies,
        onVersion: (v) => publisher.offer(v),
      });
      log.info('publishing', { servers: c.servers, gateways: c.gateways, dir: c.exportDir, keep: c.keep });
      await new Promise<void>((resolve) => {
        onShutdownSignals(async () => {
          await follower.stop();
          await publisher.stop();
          metricsServer?.close();
          resolve();
        }, log);
      });
    });
}
