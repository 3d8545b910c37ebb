import * as fs from 'fs';
import * as path from 'path';
import { Command } from 'commander';
import { ErrorCode, SrpoError } from '@srpo/core';
import { AuditStore, type StoreConfig, type UpdateRecord } from '@srpo/store';
import { CliConfig } from '../cli-config';

/** The metrics `runs compare` puts side by side, per update. */
const METRICS = ['loss', 'gradNorm', 'losses/clip_frac_low', 'losses/clip_frac_high', 'ratio/mean', 'kl/approx_k3'] as const;
/** Column labels of the text table (the JSON keeps the diagnostic names). */
const LABELS: Record<(typeof METRICS)[number], string> = {
  loss: 'loss',
  gradNorm: 'grad',
  'losses/clip_frac_low': 'clipLow',
  'losses/clip_frac_high': 'clipHigh',
  'ratio/mean': 'ratio',
  'kl/approx_k3': 'kl',
};

/** `srpo runs compare A B`: two runs' per-update metrics side by side. `source` names the learner's own store. */
export function runsCommand(config: () => CliConfig): Command {
  const runs = new Command('runs').description('replay runs ($SRPO_REPLAY_DIR/<name>); "source" is the learner store itself');
  runs
    .command('compare <a> <b>')
    .description('per-version metrics of two runs side by side')
    .option('--json', 'print JSON', false)
    .action(async (a: string, b: string, opts: { json: boolean }) => {
      const cfg = config();
      const [ua, ub] = await Promise.all([readRun(cfg, a), readRun(cfg, b)]);
      const versions = [...new Set([...ua, ...ub].map((u) => u.versionAfter))].sort((x, y) => x - y);
      const rows = versions.map((v) => ({
        version: v,
        a: metricsOf(ua.find((u) => u.versionAfter === v)),
        b: metricsOf(ub.find((u) => u.versionAfter === v)),
      }));
      if (opts.json) {
        process.stdout.write(JSON.stringify({ a, b, rows }, null, 2) + '\n');
        return;
      }
      const fmt = (x: number | undefined) => (x === undefined || !Number.isFinite(x) ? '-' : x.toPrecision(5)).padStart(11);
      const lines = [`runs ${a} (A) vs ${b} (B): ${ua.length} and ${ub.length} update(s)`];
      lines.push(['version'.padEnd(8), ...METRICS.flatMap((m) => [`${LABELS[m]} A`.padStart(11), `${LABELS[m]} B`.padStart(11)]), 'same weights'].join(' '));
      for (const r of rows) {
        lines.push(
          [
            ('v' + r.version).padEnd(8),
            ...METRICS.flatMap((m) => [fmt(r.a?.[m]), fmt(r.b?.[m])]),
            r.a && r.b ? (r.a.hash === r.b.hash ? 'yes' : 'no') : '-',
          ].join(' '),
        );
      }
      process.stdout.write(lines.join('\n') + '\n');
    });
  return runs;
}

type Metrics = Record<(typeof METRICS)[number], number> & { hash: string };

function metricsOf(u: UpdateRecord | undefined): Metrics | undefined {
  if (!u) return undefined;
  const out = { hash: u.weightsHashAfter } as Metrics;
  for (const m of METRICS) out[m] = m === 'loss' ? u.loss : m === 'gradNorm' ? u.gradNorm : (u.diagnostics[m] ?? Number.NaN);
  return out;
}

async function readRun(cfg: CliConfig, name: string): Promise<UpdateRecord[]> {
  let store: StoreConfig;
  if (name === 'source') store = cfg.store;
  else {
    const file = path.join(cfg.replayDir, name, 'store.sqlite');
    if (!/^[A-Za-z0-9._-]+$/.test(name) || !fs.existsSync(file)) throw new SrpoError(ErrorCode.NOT_FOUND, `no run ${name} in ${cfg.replayDir}`);
    store = { kind: 'sqlite', path: file };
  }
  const s = await AuditStore.open(store);
  try {
    const out: UpdateRecord[] = [];
    for (let from: number | undefined; ;) {
      const page = await s.listUpdates({ from, limit: 1000 });
      const fresh = page.filter((u) => !out.some((o) => o.updateId === u.updateId));
      out.push(...fresh);
      if (page.length < 1000 || fresh.length === 0) return out;
      from = page[page.length - 1].committedAtMs;
    }
  } finally {
    await s.close();
  }
}
