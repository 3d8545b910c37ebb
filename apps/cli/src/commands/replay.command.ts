import * as fs from 'fs';
import { Command } from 'commander';
import { ErrorCode, initTfBackend, SrpoError } from '@srpo/core';
import { createKafka, EventCodec } from '@srpo/events';
import { EVENT_REDUCTIONS, OBJECTIVES, type ObjectiveConfig } from '@srpo/srpo';
import { AuditStore, KeyStore } from '@srpo/store';
import type { RematerializeProgress } from '@srpo/materializer';
import { ReplayService, type ReplayOverrides, type ReplayReport } from '@srpo/audit';
import { CliConfig } from '../cli-config';
import { backendLabel } from '@srpo/kernels';

interface ReplayCliOptions {
  run: string;
  policy?: string;
  from?: string;
  fromOffsets?: string;
  to?: string;
  objective?: string;
  eventReduction?: string;
  clipLow?: string;
  clipHigh?: string;
  lr?: string;
  epochs?: string;
  rematerialize: boolean;
  json: boolean;
}

/** `srpo replay --run NAME`: re-runs recorded updates into an isolated run and compares weights hashes. */
export function replayCommand(config: () => CliConfig): Command {
  return new Command('replay')
    .description('re-run recorded updates into an isolated run (own store, checkpoints and srpo.replay.<run>. topics); prints a per-update hash match table')
    .requiredOption('--run <name>', 'run name ([A-Za-z0-9._-]+); the run lives in $SRPO_REPLAY_DIR/<name>')
    .option('--policy <id>', 'policy to replay (required when the store holds several)')
    .option('--from <time>', 'first update committed at or after this time (ISO 8601 or epoch ms)')
    .option(
      '--from-offsets <file>',
      'JSON {"<advantage-groups topic>": {"<partition>": offset}}: start at the first update read entirely at or after these offsets',
    )
    .option('--to <time>', 'updates committed before this time (ISO 8601 or epoch ms)')
    .option('--objective <name>', `counterfactual: objective (${OBJECTIVES.join(', ')})`)
    .option('--event-reduction <c>', `counterfactual: c(K) (${EVENT_REDUCTIONS.join(', ')})`)
    .option('--clip-low <x>', 'counterfactual: epsilon_low')
    .option('--clip-high <x>', 'counterfactual: epsilon_high')
    .option('--lr <x>', 'counterfactual: learning rate')
    .option('--epochs <n>', 'counterfactual: optimizer epochs per update')
    .option('--rematerialize', "re-derive active sets and advantage groups from the raw events into the run's own topics first, and train on those", false)
    .option('--json', 'print the report as JSON', false)
    .action(async (opts: ReplayCliOptions) => {
      const cfg = config();
      const overrides = parseOverrides(opts);
      const from = parseTime('--from', opts.from);
      const to = parseTime('--to', opts.to);
      if (opts.from !== undefined && opts.fromOffsets !== undefined)
        throw new SrpoError(ErrorCode.VALIDATION_FAILED, '--from and --from-offsets exclude each other');
      const fromOffsets = opts.fromOffsets === undefined ? undefined : readOffsets(opts.fromOffsets);
      const backend = await initTfBackend(cfg.backend, cfg.backendSettings);
      const store = await AuditStore.open(cfg.store);
      let report: ReplayReport;
      try {
        const svc = new ReplayService({
          store,
          kafka: createKafka(cfg.kafka),
          backend: backendLabel(backend),
          checkpointDir: cfg.checkpointDir,
          codec: new EventCodec(undefined, { registry: cfg.schemaRegistry }),
          keys: new KeyStore(store.dataSource),
        });
        report = await svc.replay({
          run: opts.run,
          runDir: cfg.replayDir,
          policyId: opts.policy,
          from,
          to,
          fromOffsets,
          overrides,
          // Under the configured prefix, so a replay of a test or staging run stays beside it: srpo.replay.<run>. by default.
          topicPrefix: `${cfg.topics.prefix ?? 'srpo.'}replay.${opts.run}.`,
          rematerialize: opts.rematerialize
            ? { settings: cfg.materializerSettings(), sourcePrefix: cfg.topics.prefix ?? 'srpo.', onProgress: progressBar(opts.run) }
            : undefined,
          onProgress: (p) =>
            process.stderr.write(
              `replay ${opts.run}: ${p.done}/${p.total} updates, ${p.events} events, ${p.eventsPerSecond.toFixed(1)} events/s, ETA ${(p.etaMs / 1000).toFixed(1)} s\n`,
            ),
        });
      } finally {
        await store.close();
      }
      process.stdout.write(opts.json ? JSON.stringify(report, null, 2) + '\n' : formatReport(report));
      // Groups complete by declared size depend on no timing: any difference is a defect, whatever the hashes say.
      const sizeDiffs = report.rematerialized?.differences.filter((d) => d.closeReason === 'SIZE') ?? [];
      if (sizeDiffs.length > 0) {
        throw new SrpoError(
          ErrorCode.INTEGRITY_FAILED,
          `replay ${opts.run}: ${sizeDiffs.length} size-closed group(s) re-derived differently, first ${sizeDiffs[0].groupId}: ${sizeDiffs[0].detail}`,
        );
      }
      if (!report.complete)
        throw new SrpoError(ErrorCode.INTEGRITY_FAILED, `replay ${opts.run} stopped at ${report.firstDivergence?.updateId}: ${report.firstDivergence?.detail}`);
      // An unchanged replay that does not reproduce every hash is a failure; a counterfactual is expected to differ,
      // and so is a run that differs only from where erased content was left out (docs/erasure.md).
      const onlyErased =
        report.firstDivergence?.cause === 'erased content' && report.rows.every((r) => r.match || r.cause === 'erased content' || r.cause === 'inherited');
      if (!report.counterfactual && report.firstDivergence && !onlyErased) {
        const d = report.firstDivergence;
        throw new SrpoError(ErrorCode.INTEGRITY_FAILED, `replay ${opts.run} diverged first at ${d.updateId} (${d.cause}): ${d.detail}`);
      }
    });
}

/** A stderr progress bar for the re-materialization: a line per phase at most every 250 ms, and its last. */
function progressBar(run: string): (p: RematerializeProgress) => void {
  let last = 0;
  let lastPhase = '';
  return (p) => {
    const now = Date.now();
    const final = p.done >= p.total;
    if (!final && p.phase === lastPhase && now - last < 250) return;
    last = now;
    lastPhase = p.phase;
    const width = 30;
    const filled = p.total > 0 ? Math.min(width, Math.round((p.done / p.total) * width)) : width;
    const eta = p.phase === 'process' ? `, ETA ${(p.etaMs / 1000).toFixed(1)} s` : '';
    process.stderr.write(
      `rematerialize ${run}: ${p.phase.padEnd(7)} [${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${p.done}/${p.total}${p.phase === 'write' ? ' records' : ''}, ${Math.round(p.eventsPerSecond)} events/s${eta}\n`,
    );
  };
}

function parseOverrides(o: ReplayCliOptions): ReplayOverrides | undefined {
  const objective: NonNullable<ReplayOverrides['objective']> = {};
  if (o.objective !== undefined) {
    if (!(OBJECTIVES as readonly string[]).includes(o.objective))
      throw new SrpoError(ErrorCode.VALIDATION_FAILED, `--objective must be one of ${OBJECTIVES.join(', ')}, got ${o.objective}`);
    objective.objective = o.objective as ObjectiveConfig['objective'];
  }
  if (o.eventReduction !== undefined) {
    if (!(EVENT_REDUCTIONS as readonly string[]).includes(o.eventReduction)) {
      throw new SrpoError(ErrorCode.VALIDATION_FAILED, `--event-reduction must be one of ${EVENT_REDUCTIONS.join(', ')}, got ${o.eventReduction}`);
    }
    objective.eventReduction = o.eventReduction as ObjectiveConfig['eventReduction'];
  }
  if (o.clipLow !== undefined) objective.clipLow = num('--clip-low', o.clipLow);
  if (o.clipHigh !== undefined) objective.clipHigh = num('--clip-high', o.clipHigh);
  const out: ReplayOverrides = {};
  if (Object.keys(objective).length > 0) out.objective = objective;
  if (o.lr !== undefined) out.lr = num('--lr', o.lr);
  if (o.epochs !== undefined) {
    const e = num('--epochs', o.epochs);
    if (!Number.isInteger(e) || e < 1) throw new SrpoError(ErrorCode.VALIDATION_FAILED, `--epochs must be an integer >= 1, got ${o.epochs}`);
    out.epochs = e;
  }
  return Object.keys(out).length > 0 ? out : undefined;
}

function readOffsets(file: string): Record<string, Record<string, number>> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(fs.readFileSync(file, 'utf8'));
  } catch (e) {
    throw new SrpoError(ErrorCode.VALIDATION_FAILED, `--from-offsets ${file}: ${(e as Error).message}`);
  }
  const bad = (why: string) => new SrpoError(ErrorCode.VALIDATION_FAILED, `--from-offsets ${file}: ${why}`);
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw bad('expected {"<topic>": {"<partition>": offset}}');
  const out: Record<string, Record<string, number>> = {};
  for (const [topic, parts] of Object.entries(parsed)) {
    if (typeof parts !== 'object' || parts === null || Array.isArray(parts)) throw bad(`${topic}: expected {"<partition>": offset}`);
    out[topic] = {};
    for (const [p, o] of Object.entries(parts as Record<string, unknown>)) {
      if (!/^\d+$/.test(p) || typeof o !== 'number' || !Number.isSafeInteger(o) || o < 0)
        throw bad(`${topic}.${p}: partition must be an integer and offset an integer >= 0`);
      out[topic][p] = o;
    }
  }
  return out;
}

function num(flag: string, raw: string): number {
  const v = Number(raw);
  if (raw.trim() === '' || !Number.isFinite(v) || v < 0) throw new SrpoError(ErrorCode.VALIDATION_FAILED, `${flag} must be a finite number >= 0, got ${raw}`);
  return v;
}

function parseTime(flag: string, raw: string | undefined): number | undefined {
  if (raw === undefined) return undefined;
  const ms = /^\d+$/.test(raw) ? Number(raw) : Date.parse(raw);
  if (!Number.isFinite(ms)) throw new SrpoError(ErrorCode.VALIDATION_FAILED, `${flag} must be ISO 8601 or epoch ms, got ${raw}`);
  return ms;
}

function formatReport(r: ReplayReport): string {
  const lines = [`run ${r.run} (${r.counterfactual ? 'counterfactual' : 'faithful'}) on ${r.backend}; topics ${r.topicPrefix}*; store ${r.runDir}`];
  lines.push(`${'version'.padEnd(8)} ${'update'.padEnd(40)} ${'original'.padEnd(16)} ${'replay'.padEnd(16)} match`);
  for (const row of r.rows) {
    lines.push(
      `${('v' + row.versionAfter).padEnd(8)} ${row.updateId.padEnd(40)} ${row.originalHash.slice(0, 16)} ${(row.replayHash ?? '-').slice(0, 16).padEnd(16)} ${row.match ? 'yes' : `NO (${row.cause})`}`,
    );
  }
  lines.push(`${r.matched}/${r.rows.length} weights hashes match`);
  const m = r.rematerialized;
  if (m) {
    lines.push(
      `re-materialized ${m.events} raw events at ${Math.round(m.eventsPerSecond)} events/s (read ${m.readMs} ms, process ${m.processMs} ms, write ${m.writeMs} ms): ${m.setsComplete} sets, ${m.setsInvalid} invalid, ${m.deadLetters} dead letters, ${m.groups} groups${m.revisedOutcomes > 0 ? `, ${m.revisedOutcomes} episode(s) with their latest outcome revision` : ''}`,
    );
    lines.push(`${m.identical}/${m.compared} recorded groups re-derived identically`);
    for (const d of m.differences) lines.push(`  different: ${d.groupId} (${d.closeReason}, update ${d.updateId}): ${d.detail}`);
  }
  const start = r.startingCheckpoint;
  if (start && start.reapplied > 0) {
    lines.push(
      `started from v${start.version}, pruned by the learner: rebuilt from checkpoint v${start.fromVersion} by re-applying ${start.reapplied} recorded update(s)`,
    );
  }
  if (r.firstDivergence) lines.push(`first divergence: ${r.firstDivergence.updateId}: ${r.firstDivergence.cause}: ${r.firstDivergence.detail}`);
  return lines.join('\n') + '\n';
}
