import { Command, InvalidArgumentError } from 'commander';
import { EnvReader, initTfBackend, Logger, MetricsSink, onShutdownSignals, serveMetrics } from '@srpo/core';
import { createKafka, topicCatalog } from '@srpo/events';
import {
  findPolicyVersion,
  followPolicyVersions,
  JsonlHeldOutEvaluator,
  parseVersionedName,
  Publisher,
  readPublishDir,
  readPublisherConfig,
  rollbackTo,
  unpinPolicy,
  type PublisherConfig,
} from '@srpo/serving';
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
  gate?: string;
  gateMargin?: string;
}

type Env = Readonly<Record<string, string | undefined>>;

/** The flags shared by `srpo publish` and its rollback/unpin commands. */
function targets(c: Command): Command {
  return c
    .option('--servers <urls>', 'comma-separated servers, e.g. http://a:8000,http://b:8001 (default SRPO_PUBLISH_SERVERS)')
    .option('--gateways <urls>', 'comma-separated srpo gateways to tell (default SRPO_PUBLISH_GATEWAYS)')
    .option('--dir <dir>', 'where adapters, pins and decisions.jsonl live; the servers must read the same path (default SRPO_PUBLISH_DIR or .srpo/published)');
}

/** The publisher's configuration: the environment with the flags over it. */
function configOf(env: Env, flags: PublishFlags): PublisherConfig {
  const merged: Record<string, string | undefined> = {
    ...env,
    ...(flags.servers !== undefined ? { SRPO_PUBLISH_SERVERS: flags.servers } : {}),
    ...(flags.gateways !== undefined ? { SRPO_PUBLISH_GATEWAYS: flags.gateways } : {}),
    ...(flags.policies !== undefined ? { SRPO_PUBLISH_POLICIES: flags.policies } : {}),
    ...(flags.dir !== undefined ? { SRPO_PUBLISH_DIR: flags.dir } : {}),
    ...(flags.keep !== undefined ? { SRPO_PUBLISH_KEEP: String(flags.keep) } : {}),
    ...(flags.gate !== undefined ? { SRPO_PUBLISH_GATE_FILE: flags.gate } : {}),
    ...(flags.gateMargin !== undefined ? { SRPO_PUBLISH_GATE_MARGIN: flags.gateMargin } : {}),
  };
  return readPublisherConfig(new EnvReader(merged), process.cwd());
}

/**
 * `srpo publish`: follows policy-versions and hands each new LoRA version to inference servers
 * through vLLM's `/v1/load_lora_adapter` (vLLM, `srpo serve --model`), named `<policy>@v<N>`,
 * optionally gates it on a held-out set against the serving version (`--gate`), unloads versions
 * older than the newest `--keep`, and tells `srpo gateway`s which name is current. It runs beside
 * the learner, never in its update path; a server that is down is retried with backoff and
 * reported while the others are served. Flags override the `SRPO_PUBLISH_*` variables
 * (libs/serving readPublisherConfig). Ctrl-C stops it.
 *
 * `srpo publish rollback --to actor@v12` switches the gateways to a named version and pins it;
 * `srpo publish unpin --policy actor` removes the pin.
 */
export function publishCommand(config: () => CliConfig, env: Env = process.env): Command {
  const cmd = targets(new Command('publish'))
    .description(
      'follow policy versions and load each new LoRA version on vLLM-compatible servers (/v1/load_lora_adapter), gate it on a held-out set, and tell the gateways which is current',
    )
    .option('--policies <ids>', 'policies to publish (default SRPO_PUBLISH_POLICIES or all)')
    .option('--keep <n>', 'versions per policy left loaded on each server (default SRPO_PUBLISH_KEEP or 3)', positive)
    .option(
      '--gate <file>',
      'held-out JSONL ({messages, answer} per line): publish a version only if it is not worse than the serving one (default SRPO_PUBLISH_GATE_FILE)',
    )
    .option('--gate-margin <p>', 'largest drop in held-out success rate published, in [0, 1] (default SRPO_PUBLISH_GATE_MARGIN or 0.02)')
    .action(async (flags: PublishFlags) => {
      const c = configOf(env, flags);
      const log = new Logger('publish');
      await initTfBackend(config().backend, config().backendSettings);
      const metrics = new MetricsSink();
      const metricsServer = c.metricsPort !== undefined ? await serveMetrics(metrics, c.metricsPort) : undefined;
      const gate = c.gate
        ? {
            evaluator: new JsonlHeldOutEvaluator(c.gate.file, { ...c.gate, timeoutMs: c.requestTimeoutMs, apiKey: c.serverApiKey }),
            margin: c.gate.margin,
            rule: c.gate.rule,
            ...(c.gate.server !== undefined ? { server: c.gate.server } : {}),
          }
        : undefined;
      const publisher = new Publisher({
        servers: c.servers,
        gateways: c.gateways,
        exportDir: c.exportDir,
        checkpointDir: c.checkpointDir,
        keep: c.keep,
        serverApiKey: c.serverApiKey,
        gatewayApiKey: c.gatewayApiKey,
        requestTimeoutMs: c.requestTimeoutMs,
        reconcileMs: c.reconcileMs,
        retry: { maxDelayMs: c.retryMaxMs },
        ...(gate ? { gate } : {}),
        metrics,
      });
      const follower = await followPolicyVersions({
        kafka: createKafka(c.kafka),
        catalog: topicCatalog(c.topics),
        policies: c.policies,
        onVersion: (v) => publisher.offer(v),
      });
      log.info('publishing', {
        servers: c.servers,
        gateways: c.gateways,
        dir: c.exportDir,
        checkpointDir: c.checkpointDir,
        keep: c.keep,
        gate: gate ? { evaluator: gate.evaluator.description, margin: gate.margin, rule: gate.rule } : 'off',
      });
      await new Promise<void>((resolve) => {
        onShutdownSignals(async () => {
          await follower.stop();
          await publisher.stop();
          metricsServer?.close();
          resolve();
        }, log);
      });
    });
  cmd.addCommand(
    new Command('rollback')
      .description(
        "serve a named version now: load it on every server (exported from its checkpoint if needed), switch the gateways, and pin it (publish's --servers, --gateways, --dir apply)",
      )
      .requiredOption('--to <policy@vN>', 'the version, e.g. actor@v12')
      .action(async (_: unknown, self: Command) => {
        // publish's own flags (--servers, …) are parsed by publish wherever they stand: read them with the subcommand's.
        const flags = self.optsWithGlobals<PublishFlags & { to: string }>();
        const c = configOf(env, flags);
        const { policyId, version } = parseVersionedName(flags.to, '--to');
        const kafka = () => createKafka(c.kafka);
        const pin = await rollbackTo(
          {
            servers: c.servers,
            gateways: c.gateways,
            exportDir: c.exportDir,
            checkpointDir: c.checkpointDir,
            serverApiKey: c.serverApiKey,
            gatewayApiKey: c.gatewayApiKey,
            requestTimeoutMs: c.requestTimeoutMs,
            findVersion: async (p, v) => {
              await initTfBackend(config().backend, config().backendSettings); // exporting loads the checkpoint
              return findPolicyVersion(kafka(), topicCatalog(c.topics), p, v);
            },
          },
          policyId,
          version,
        );
        new Logger('publish').info('rolled back and pinned; `srpo publish unpin` lets the publisher move on', { model: pin.model, gateways: c.gateways });
      }),
  );
  cmd.addCommand(
    new Command('unpin')
      .description("remove a rollback's pin: the publisher judges the next version against the pinned one (publish's --dir applies)")
      .requiredOption('--policy <id>', 'the policy, e.g. actor')
      .action((_: unknown, self: Command) => {
        const flags = self.optsWithGlobals<{ policy: string; dir?: string }>();
        const dir = readPublishDir(new EnvReader({ ...env, ...(flags.dir !== undefined ? { SRPO_PUBLISH_DIR: flags.dir } : {}) }), process.cwd());
        const pin = unpinPolicy(dir, flags.policy);
        new Logger('publish').info(pin ? 'unpinned' : 'nothing was pinned', { policyId: flags.policy, ...(pin ? { version: pin.version } : {}) });
      }),
  );
  return cmd;
}
