import * as path from 'path';
import { Command } from 'commander';
import { AuditService, type EpisodeTrace, type SetTrace, type VerifyReport } from '@srpo/audit';
import { ErrorCode, initTfBackend, SrpoError } from '@srpo/core';
import { createKafka, EventCodec, topicCatalog } from '@srpo/events';
import { AuditStore, KeyStore, type UpdateDetail } from '@srpo/store';
import { CliConfig } from '../cli-config';
import { backendLabel } from '@srpo/kernels';

interface AuditOptions {
  json: boolean;
}

/** `srpo audit show|verify|trace`: the learner's audit records, from its store and the event log. */
export function auditCommand(config: () => CliConfig): Command {
  const audit = new Command('audit').description('inspect, verify and trace recorded updates (store: SRPO_DATABASE_URL or SRPO_SQLITE_PATH)');

  audit
    .command('show <updateId>')
    .description('print an update record: inputs with their Kafka coordinates, hashes, diagnostics, hyperparameters')
    .option('--json', 'print the raw record as JSON', false)
    .action(async (updateId: string, opts: AuditOptions) => {
      await withService(config(), {}, async (svc) => {
        const detail = await svc.show(updateId);
        process.stdout.write(opts.json ? JSON.stringify(detail, null, 2) + '\n' : formatUpdate(detail));
      });
    });

  audit
    .command('verify <updateId>')
    .description('recompute an update from its recorded source events and checkpoint; exit 0 only if the weights hash matches')
    .option('--json', 'print the report as JSON', false)
    .option('--checkpoint-dir <dir>', 'load checkpoints from <dir>/<policy>/v<N> instead of the recorded URIs (default: SRPO_CHECKPOINT_DIR when set)')
    .option('--source-prefix <prefix>', 'read source events from topics with this prefix instead of SRPO_TOPIC_PREFIX (a mirrored copy of the log)')
    .action(async (updateId: string, opts: AuditOptions & { checkpointDir?: string; sourcePrefix?: string }) => {
      const cfg = config();
      const backend = await initTfBackend(cfg.backend, cfg.backendSettings);
      const report = await withService(
        cfg,
        {
          backend: backendLabel(backend),
          kafka: true,
          checkpointDir: opts.checkpointDir ? path.resolve(opts.checkpointDir) : cfg.checkpointDir,
          sourcePrefix: opts.sourcePrefix,
        },
        (svc) => svc.verify(updateId),
      );
      process.stdout.write(opts.json ? JSON.stringify(report, null, 2) + '\n' : formatVerify(report));
      if (!report.ok) throw new SrpoError(ErrorCode.INTEGRITY_FAILED, `verify ${updateId} failed: ${report.failure ?? 'unknown reason'}`);
    });

  audit
    .command('trace [setId]')
    .description(
      'which outputs, transition and outcome made a set, which group it joined, its advantage, which update consumed it; ' +
        "with --episode ID: every update that used a set of the episode, the outcome revision each used and whether it is superseded (reads the episode's partition of the transitions and episode-outcomes topics)",
    )
    .option('--episode <episodeId>', "trace an episode's outcome revisions to the updates that used them (docs/rewards.md)")
    .option('--source-prefix <prefix>', 'with --episode: read the topics with this prefix instead of SRPO_TOPIC_PREFIX (a mirrored copy of the log)')
    .option('--json', 'print the trace as JSON', false)
    .action(async (setId: string | undefined, opts: AuditOptions & { episode?: string; sourcePrefix?: string }) => {
      if ((setId === undefined) === (opts.episode === undefined)) {
        throw new SrpoError(ErrorCode.VALIDATION_FAILED, 'give a set id or --episode ID (one of them)', { field: 'setId' });
      }
      const cfg = config();
      if (opts.episode !== undefined) {
        const episodeId = opts.episode;
        const catalog = topicCatalog(cfg.topics);
        const trace = await withService(cfg, { kafka: true, sourcePrefix: opts.sourcePrefix }, (svc) =>
          svc.traceEpisode(episodeId, { topics: { transitions: catalog.transitions.name, episodeOutcomes: catalog.episodeOutcomes.name } }),
        );
        process.stdout.write(opts.json ? JSON.stringify(trace, null, 2) + '\n' : formatEpisodeTrace(trace));
        return;
      }
      await withService(cfg, {}, async (svc) => {
        const traces = await svc.trace(setId as string);
        process.stdout.write(opts.json ? JSON.stringify(traces, null, 2) + '\n' : traces.map(formatTrace).join('\n'));
      });
    });

  return audit;
}

async function withService<T>(
  cfg: CliConfig,
  opts: { backend?: string; kafka?: boolean; checkpointDir?: string; sourcePrefix?: string },
  fn: (svc: AuditService) => Promise<T>,
): Promise<T> {
  const store = await AuditStore.open(cfg.store);
  try {
    const prefix = cfg.topics.prefix ?? 'srpo.';
    const svc = new AuditService({
      store,
      kafka: opts.kafka ? createKafka(cfg.kafka) : undefined,
      backend: opts.backend ?? 'none',
      checkpointDir: opts.checkpointDir,
      sourcePrefix: opts.sourcePrefix ? { from: prefix, to: opts.sourcePrefix } : undefined,
      codec: new EventCodec(undefined, { registry: cfg.schemaRegistry }),
      keys: new KeyStore(store.dataSource),
    });
    return await fn(svc);
  } finally {
    await store.close();
  }
}

const coord = (c: { topic: string; partition: number; offset: number } | null): string => (c ? `${c.topic}:${c.partition}@${c.offset}` : '-');

function formatUpdate(d: UpdateDetail): string {
  const lines = [
    `update      ${d.updateId}`,
    `policy      ${d.policyId}  v${d.versionBefore} -> v${d.versionAfter}`,
    `weights     ${d.weightsHashBefore} -> ${d.weightsHashAfter}`,
    `committed   ${d.createdAt}  backend ${d.backend}  code ${d.codeVersion}  seed ${d.seed}  wall ${d.wallTimeMs} ms`,
    `checkpoint  ${d.checkpointUri}`,
    `loss        ${d.loss}  grad norm ${d.gradNorm}`,
    `config      ${JSON.stringify(d.hyperparameters)}`,
    'diagnostics',
    ...Object.keys(d.diagnostics)
      .sort()
      .map((k) => `  ${k.padEnd(28)} ${d.diagnostics[k]}`),
    `inputs      ${d.groups.length} group(s), ${d.groups.reduce((n, g) => n + g.setIds.length, 0)} set(s)`,
  ];
  for (const g of d.groups) {
    lines.push(`  group ${g.groupId} (${g.groupKey}) at ${coord(g.source)}`);
    g.sources.forEach((s, i) => {
      lines.push(`    set ${s.setId} advantage ${g.advantages[i]} at ${coord(s.set)}; transition ${coord(s.transition)}; outcome ${coord(s.outcome)}`);
      for (const m of s.members) lines.push(`      output ${m.outputId} at ${coord(m.source)}`);
    });
  }
  return lines.join('\n') + '\n';
}

function formatVerify(r: VerifyReport): string {
  const lines = r.checks.map((c) => `${c.ok ? 'ok  ' : 'FAIL'} ${c.name.padEnd(18)} ${c.detail}`);
  lines.push(r.ok ? `verified: ${r.updateId} recomputes to ${r.recomputedWeightsHashAfter}` : `NOT verified: ${r.updateId}`);
  return lines.join('\n') + '\n';
}

function formatTrace(t: SetTrace): string {
  return (
    [
      `set         ${t.setId} (policy ${t.policyId}) at ${coord(t.setSource)}`,
      `transition  ${coord(t.transition)}`,
      `outcome     ${coord(t.outcome)}`,
      ...t.outputs.map((o) => `output      ${o.outputId} at ${coord(o.source)}`),
      `group       ${t.groupId} (${t.groupKey}) at ${coord(t.groupSource)}, set #${t.position}`,
      `advantage   ${t.advantage}`,
      `update      ${t.update.updateId} v${t.update.versionBefore} -> v${t.update.versionAfter} (loss ${t.update.loss}, weights ${t.update.weightsHashAfter})`,
    ].join('\n') + '\n'
  );
}

function formatEpisodeTrace(t: EpisodeTrace): string {
  const lines = [`episode     ${t.episodeId}`];
  if (t.outcomes.length === 0) lines.push('outcomes    none in the log');
  for (const o of t.outcomes) {
    const latest = o.revision === t.latestRevision ? ' (latest)' : ' (superseded)';
    lines.push(`outcome     revision ${o.revision}${latest} reward ${o.outcomeReward} source ${o.rewardSource || '-'} at ${coord(o.source)}`);
  }
  if (t.uses.length === 0) lines.push('updates     none used a set of this episode');
  for (const u of t.uses) {
    const used =
      u.outcome === null
        ? 'immediate reward'
        : u.revision === null
          ? `outcome at ${coord(u.outcome)} (no longer in the log: revision unknown)`
          : `outcome revision ${u.revision} at ${coord(u.outcome)}${u.superseded ? `, SUPERSEDED by revision ${t.latestRevision}` : ''}`;
    lines.push(
      `update      ${u.updateId} v${u.versionBefore} -> v${u.versionAfter}: set ${u.setId} in group ${u.groupId} (advantage ${u.advantage}) used ${used}`,
    );
  }
  return lines.join('\n') + '\n';
}
