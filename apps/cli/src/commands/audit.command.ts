import * as path from 'path';
import { Command } from 'commander';
import { AuditService, type SetTrace, type VerifyReport } from '@srpo/audit';
import { ErrorCode, initTfBackend, SrpoError } from '@srpo/core';
import { createKafka, EventCodec } from '@srpo/events';
import { AuditStore, type UpdateDetail } from '@srpo/store';
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
    .command('trace <setId>')
    .description('which outputs, transition and outcome made a set, which group it joined, its advantage, which update consumed it')
    .option('--json', 'print the trace as JSON', false)
    .action(async (setId: string, opts: AuditOptions) => {
      await withService(config(), {}, async (svc) => {
        const traces = await svc.trace(setId);
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
