/**
 * The tuning harness behind the demo's defaults: trains in process (no Kafka)
 * and prints, per workflow position, the mean set reward of the first and last
 * `window` sets, and the success of the first and last `window` episodes.
 *
 *   npm run build:bench && node dist-bench/bench/compare/tune.js '{"updates":800,"seed":2}'
 *
 * The JSON overrides any field of InProcessOptions (plus `window`); the
 * defaults are the demo's (three policies, lr 5e-4, G = 16, 64 sets per update,
 * sampling weights up to 3 updates old). See docs/demo.md for what was tried.
 */
import { initTfBackend } from '@srpo/core';
import { DEFAULT_ARITHMETIC, DEFAULT_ROLE_POLICIES, DEFAULT_SEARCH } from '@srpo/workflows';
import { DEMO_DEFAULTS } from '../../apps/agents/src/demo/demo-config';
import { runInProcess, type InProcessOptions } from './in-process-trainer';

async function main(): Promise<void> {
  await initTfBackend('tensorflow');
  const extra = JSON.parse(process.argv[2] ?? '{}') as Partial<InProcessOptions> & { window?: number };
  const window = extra.window ?? 200;
  const opts: InProcessOptions = {
    workflows: ['fixed', 'joint', 'routed'],
    rolePolicies: { ...DEFAULT_ROLE_POLICIES },
    model: JSON.parse(DEMO_DEFAULTS.model) as InProcessOptions['model'],
    seed: 1,
    objective: {},
    lr: Number(DEMO_DEFAULTS.lr),
    maxGradNorm: 1,
    groupSize: DEMO_DEFAULTS.groupSize,
    setsPerUpdate: DEMO_DEFAULTS.setsPerUpdate,
    updates: 800,
    temperature: 1,
    behaviourLag: 3,
    arithmetic: DEFAULT_ARITHMETIC,
    search: DEFAULT_SEARCH,
    ...extra,
  };
  const t0 = Date.now();
  let lastPrint = 0;
  const seen: Record<string, number[]> = {};
  const res = await runInProcess({
    ...opts,
    onUpdate: (id, rec) => {
      if (Date.now() - lastPrint < 5000) return;
      lastPrint = Date.now();
      const rates = Object.entries(seen)
        .filter(([k]) => !k.includes('.'))
        .map(([w, s]) => `${w}=${mean(s.slice(-window)).toFixed(2)}`)
        .join(' ');
      process.stdout.write(
        `${((Date.now() - t0) / 1000).toFixed(0)}s ${id} v${rec.version} gn=${rec.gradNorm.toFixed(3)} clip=${rec.clipFrac.toFixed(2)} ${rates}\n`,
      );
    },
    onTask: (r) => {
      const list = (seen[r.workflow] ??= []);
      for (const e of r.episodes) {
        list.push(e.outcome.success ? 1 : 0);
        for (const st of e.steps) (seen[`${r.workflow}.${st.position}`] ??= []).push(st.reward ?? e.outcome.reward);
      }
    },
  });
  for (const [w, s] of Object.entries(seen).filter(([k]) => k.includes('.'))) {
    process.stdout.write(`  ${w}: first=${mean(s.slice(0, window)).toFixed(3)} last=${mean(s.slice(-window)).toFixed(3)}\n`);
  }
  for (const [w, s] of Object.entries(res.successes)) {
    process.stdout.write(`${w}: episodes=${s.length} first=${mean(s.slice(0, window)).toFixed(3)} last=${mean(s.slice(-window)).toFixed(3)}\n`);
  }
  process.stdout.write(
    `seconds=${res.seconds.toFixed(1)} updates=${JSON.stringify(Object.fromEntries(Object.entries(res.updates).map(([k, v]) => [k, v.length])))}\n`,
  );
}

function mean(xs: number[]): number {
  return xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : NaN;
}

void main().catch((e: unknown) => {
  process.stderr.write(`${e instanceof Error ? e.message : String(e)}\n`);
  process.exit(1);
});
