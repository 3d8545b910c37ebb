/**
 * SRPO vs GSPO vs token-level GRPO on the agents' workflows, in process.
 *
 *   npm run build:bench && node dist-bench/bench/compare/run.js [--seeds 3] [--updates 400] [--mixed-updates 800] [--lag 3] [--jobs 2] [--eval-tasks 64] [--out bench/compare/results]
 *
 * Two kinds of jobs, each for every objective and seed:
 * - one workflow (fixed, joint or routed) trained alone for `--updates` updates
 *   per policy: success and gradient norms per workflow;
 * - the mixed workflow (the three interleaved over the same policies, as in the
 *   demo) for `--mixed-updates` updates per policy: success per workflow.
 *
 * Every job trains fresh policies with the same
 * environments, sampler, advantage rule and SRPO step the Kafka pipeline uses
 * (see in-process-trainer.ts), for the same number of updates per policy, then
 * evaluates the final weights on fresh tasks. Rollouts are sampled with weights
 * up to `--lag` updates old, as the agents' are on Kafka (fully on-policy, the
 * three objectives differ only in how they weight sets, members and tokens).
 * Jobs run in child processes, `--jobs`
 * at a time, each with one TensorFlow intra-op thread.
 *
 * Reported per workflow and macro-averaged over workflows: final success
 * (mean ± std over seeds) and the update-to-update variance of the pre-clip
 * gradient norm (variance over a run's updates, averaged over its policies and
 * the seeds), with the mean norm and the coefficient of variation beside it
 * because the three losses are normalised differently (per set, per member,
 * per token). Writes results/compare.json and results/compare.md.
 */
import { runChild } from '../child';
import type { InProcessOptions } from './in-process-trainer';
import { promises as fs } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

type WorkflowName = 'fixed' | 'joint' | 'routed';
type Mode = WorkflowName | 'mixed';
type ObjectiveName = 'srpo' | 'gspo' | 'grpo-token';
const WORKFLOWS: WorkflowName[] = ['fixed', 'joint', 'routed'];
const OBJECTIVES: ObjectiveName[] = ['srpo', 'gspo', 'grpo-token'];

interface Args {
  seeds: number;
  updates: number;
  mixedUpdates: number;
  jobs: number;
  evalTasks: number;
  lag: number;
  out: string;
  worker?: string;
}

interface Job {
  mode: Mode;
  objective: ObjectiveName;
  seed: number;
  updates: number;
  evalTasks: number;
  lag: number;
}

interface JobResult extends Job {
  /** Per workflow: success over the evaluation episodes with the final weights. */
  success: Record<string, number>;
  evalEpisodes: number;
  /** Per policy: variance, mean and count of the pre-clip gradient norms. */
  gradNorm: Record<string, { variance: number; mean: number; n: number }>;
  clipFrac: number;
  seconds: number;
}

function parseArgs(argv: string[]): Args {
  const a: Args = {
    seeds: 3,
    updates: 400,
    mixedUpdates: 800,
    jobs: Math.max(1, Math.min(2, os.availableParallelism())),
    evalTasks: 64,
    lag: 3,
    out: path.join('bench', 'compare', 'results'),
  };
  for (let i = 0; i < argv.length; i++) {
    const k = argv[i];
    const next = (): string => {
      const v = argv[++i];
      if (v === undefined) throw new Error(`${k} needs a value`);
      return v;
    };
    const int = (): number => {
      const v = Number(next());
      if (!Number.isInteger(v) || v < 1) throw new Error(`${k} must be a positive integer`);
      return v;
    };
    if (k === '--seeds') a.seeds = int();
    else if (k === '--updates') a.updates = int();
    else if (k === '--mixed-updates') a.mixedUpdates = int();
    else if (k === '--jobs') a.jobs = int();
    else if (k === '--eval-tasks') a.evalTasks = int();
    else if (k === '--out') a.out = next();
    else if (k === '--lag') {
      a.lag = Number(next());
      if (!Number.isInteger(a.lag) || a.lag < 0) throw new Error('--lag must be a non-negative integer');
    } else if (k === '--worker') a.worker = next();
    else throw new Error(`unknown argument ${k}`);
  }
  return a;
}

/** The demo's policies, restricted to a workflow's roles (DEFAULT_ROLE_POLICIES in libs/workflows/src/roles.ts). */
const ROLE_POLICIES = { solver: 'actor', worker: 'actor', checker: 'judge', router: 'judge', aggregator: 'aggregator' } as const;

async function worker(job: Job): Promise<JobResult> {
  const { initTfBackend } = await import('@srpo/core');
  await initTfBackend('tensorflow');
  const { runInProcess } = await import('./in-process-trainer');
  const { createWorkflow, DEFAULT_ARITHMETIC, DEFAULT_SEARCH, WORKFLOW_ROLES } = await import('@srpo/workflows');
  const { DEMO_DEFAULTS } = await import('../../apps/agents/src/demo/demo-config');
  const started = Date.now();
  const workflows: WorkflowName[] = job.mode === 'mixed' ? WORKFLOWS : [job.mode];
  const roles = [...new Set(workflows.flatMap((w) => WORKFLOW_ROLES[w]))];
  const rolePolicies = Object.fromEntries(roles.map((r) => [r, ROLE_POLICIES[r as keyof typeof ROLE_POLICIES]]));
  const clip: number[] = [];
  const res = await runInProcess({
    workflows,
    rolePolicies,
    model: JSON.parse(DEMO_DEFAULTS.model) as InProcessOptions['model'],
    seed: job.seed,
    objective: { objective: job.objective, eventReduction: 'sqrt' },
    lr: Number(DEMO_DEFAULTS.lr),
    maxGradNorm: 1,
    groupSize: DEMO_DEFAULTS.groupSize,
    setsPerUpdate: DEMO_DEFAULTS.setsPerUpdate,
    updates: job.updates,
    temperature: 1,
    behaviourLag: job.lag,
    arithmetic: DEFAULT_ARITHMETIC,
    search: DEFAULT_SEARCH,
    onUpdate: (_id, rec) => clip.push(rec.clipFrac),
  });
  // Fresh tasks (another task seed) with the final weights.
  const success: Record<string, number> = {};
  let episodes = 0;
  for (const w of workflows) {
    const evalWf = createWorkflow(w, { arithmetic: DEFAULT_ARITHMETIC, search: DEFAULT_SEARCH }, job.seed + 100_000);
    let wins = 0;
    let n = 0;
    for (let t = 0; t < job.evalTasks; t++) {
      const r = await evalWf.play(`eval-${t}`, DEMO_DEFAULTS.groupSize, res.sampler);
      for (const e of r.episodes) {
        n++;
        if (e.outcome.success) wins++;
      }
    }
    success[w] = wins / n;
    episodes += n;
  }
  const gradNorm: JobResult['gradNorm'] = {};
  for (const [id, recs] of Object.entries(res.updates)) {
    const xs = recs.map((r) => r.gradNorm);
    const mean = xs.reduce((a, b) => a + b, 0) / xs.length;
    gradNorm[id] = { variance: xs.reduce((a, x) => a + (x - mean) ** 2, 0) / (xs.length - 1), mean, n: xs.length };
  }
  if (res.behaviour !== res.registry) res.behaviour.dispose();
  res.registry.dispose();
  return {
    ...job,
    success,
    evalEpisodes: episodes,
    gradNorm,
    clipFrac: clip.reduce((a, b) => a + b, 0) / clip.length,
    seconds: (Date.now() - started) / 1000,
  };
}

function runJob(job: Job): Promise<JobResult> {
  return runChild<JobResult>(__filename, job, `job ${JSON.stringify(job)}`);
}

const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
const std = (xs: number[]) => (xs.length < 2 ? 0 : Math.sqrt(xs.reduce((a, x) => a + (x - mean(xs)) ** 2, 0) / (xs.length - 1)));

interface Cell {
  success: number[];
  gradVar: number[];
  gradMean: number[];
  clip: number[];
}

const gradVar = (r: JobResult, policy?: string) =>
  mean(
    Object.entries(r.gradNorm)
      .filter(([id]) => !policy || id === policy)
      .map(([, g]) => g.variance),
  );
const gradMean = (r: JobResult, policy?: string) =>
  mean(
    Object.entries(r.gradNorm)
      .filter(([id]) => !policy || id === policy)
      .map(([, g]) => g.mean),
  );
const pm = (xs: number[], scale = 100, digits = 1) => `${(scale * mean(xs)).toFixed(digits)}${scale === 100 ? '%' : ''} ± ${(scale * std(xs)).toFixed(digits)}`;
const objectiveName = (o: ObjectiveName) => (o === 'srpo' ? 'srpo (sqrt)' : o);

/** Table 1: each workflow trained alone; macro average = mean over workflows, per seed, then mean ± std over seeds. */
function singleTable(results: JobResult[], args: Args): string {
  const cell = (w: WorkflowName | 'macro', o: ObjectiveName): Cell => {
    const rs = results.filter((r) => r.mode !== 'mixed' && r.objective === o && (w === 'macro' || r.mode === w));
    const seeds = [...new Set(rs.map((r) => r.seed))].sort();
    const perSeed = (f: (r: JobResult) => number) => seeds.map((s) => mean(rs.filter((r) => r.seed === s).map(f)));
    return {
      success: perSeed((r) => mean(Object.values(r.success))),
      gradVar: perSeed((r) => gradVar(r)),
      gradMean: perSeed((r) => gradMean(r)),
      clip: perSeed((r) => r.clipFrac),
    };
  };
  const lines = [
    `| workflow | objective | final success (mean ± std over ${args.seeds} seeds) | grad-norm variance | mean grad norm | CV = √variance / mean | clip fraction |`,
    '|---|---|---|---|---|---|---|',
  ];
  for (const w of [...WORKFLOWS, 'macro'] as const) {
    for (const o of OBJECTIVES) {
      const c = cell(w, o);
      lines.push(
        `| ${w === 'macro' ? '**macro avg**' : w} | ${objectiveName(o)} | ${pm(c.success)} | ${pm(c.gradVar, 1, 3)} | ${mean(c.gradMean).toFixed(3)} | ${(Math.sqrt(mean(c.gradVar)) / mean(c.gradMean)).toFixed(2)} | ${(100 * mean(c.clip)).toFixed(2)}% |`,
      );
    }
  }
  return lines.join('\n');
}

/** Table 2: the mixed workflow (the demo's setting); success per workflow, gradient norms per policy. */
function mixedTable(results: JobResult[]): string {
  const policies = ['actor', 'judge', 'aggregator'];
  const lines = [
    `| objective | fixed | joint | routed | **macro avg** | grad-norm variance ${policies.join(' / ')} | CV ${policies.join(' / ')} | clip fraction |`,
    '|---|---|---|---|---|---|---|---|',
  ];
  for (const o of OBJECTIVES) {
    const rs = results.filter((r) => r.mode === 'mixed' && r.objective === o);
    if (rs.length === 0) continue;
    const succ = (w: string) => rs.map((r) => r.success[w]);
    const macro = rs.map((r) => mean(WORKFLOWS.map((w) => r.success[w])));
    const vars = policies.map((p) => mean(rs.map((r) => gradVar(r, p))));
    const cvs = policies.map((p, i) => Math.sqrt(vars[i]) / mean(rs.map((r) => gradMean(r, p))));
    lines.push(
      `| ${objectiveName(o)} | ${pm(succ('fixed'))} | ${pm(succ('joint'))} | ${pm(succ('routed'))} | ${pm(macro)} | ${vars.map((v) => v.toFixed(3)).join(' / ')} | ${cvs.map((v) => v.toFixed(2)).join(' / ')} | ${(100 * mean(rs.map((r) => r.clipFrac))).toFixed(2)}% |`,
    );
  }
  return lines.join('\n');
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  if (args.worker) {
    const result = await worker(JSON.parse(args.worker) as Job);
    process.stdout.write(JSON.stringify(result) + '\n');
    return;
  }
  const jobs: Job[] = [];
  for (let seed = 1; seed <= args.seeds; seed++) {
    for (const mode of [...WORKFLOWS, 'mixed'] as const) {
      for (const objective of OBJECTIVES) {
        jobs.push({ mode, objective, seed, updates: mode === 'mixed' ? args.mixedUpdates : args.updates, evalTasks: args.evalTasks, lag: args.lag });
      }
    }
  }
  const started = Date.now();
  const results: JobResult[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: args.jobs }, async () => {
      while (next < jobs.length) {
        const job = jobs[next++];
        const r = await runJob(job);
        results.push(r);
        const success = Object.entries(r.success)
          .map(([w, v]) => `${w} ${(100 * v).toFixed(1)}%`)
          .join(', ');
        process.stderr.write(`[${results.length}/${jobs.length}] ${r.mode} ${r.objective} seed ${r.seed}: ${success} in ${r.seconds.toFixed(0)} s\n`);
      }
    }),
  );
  const minutes = (Date.now() - started) / 60_000;
  results.sort((a, b) => a.seed - b.seed || a.mode.localeCompare(b.mode) || a.objective.localeCompare(b.objective));
  const table = `Each workflow trained alone (${args.updates} updates per policy):\n\n${singleTable(results, args)}\n\nThe mixed workflow, as in the demo (${args.mixedUpdates} updates per policy):\n\n${mixedTable(results)}`;
  const command = `node dist-bench/bench/compare/run.js --seeds ${args.seeds} --updates ${args.updates} --mixed-updates ${args.mixedUpdates} --lag ${args.lag} --jobs ${args.jobs} --eval-tasks ${args.evalTasks}`;
  await fs.mkdir(args.out, { recursive: true });
  await fs.writeFile(path.join(args.out, 'compare.json'), JSON.stringify({ command, minutes, args, results }, null, 2));
  await fs.writeFile(
    path.join(args.out, 'compare.md'),
    `${table}\n\n_${command}: ${jobs.length} runs in ${minutes.toFixed(1)} min on ${os.cpus().length} CPU cores._\n`,
  );
  process.stdout.write(`${table}\n\n${command}: ${jobs.length} runs in ${minutes.toFixed(1)} min\n`);
}

void main().catch((e: unknown) => {
  process.stderr.write(`${e instanceof Error ? e.message : String(e)}\n`);
  process.exit(1);
});
