/**
 * The ProGPO study (issue #20, part 3): the progress fallback on and off, on search tasks
 * hard enough that most groups fail entirely at the start.
 *
 *   npm run build:bench && node dist-bench/bench/studies/progpo/run.js [--seeds 10] [--updates 1000] [--docs 6] [--turns 3] [--modulus 8] [--jobs 2]
 *
 * Each seed trains the searcher from the same random weights twice, fallback off and on,
 * in process with the agents' search workflow, the materializer's advantage rule and the
 * learner's step (bench/compare/in-process-trainer.ts, lag 3 as the agents on Kafka).
 * Reported: the share of groups that failed entirely and the share that used the fallback
 * (per block of updates), training success curves, and final success on fresh tasks with
 * the final weights, with 95 % intervals over seeds and the on − off difference paired by seed.
 */
import { promises as fs } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { drawCharts, flags, pool, runChild } from '../../child';
import { blockMeans, ci95, excludesZero, mean, normalisedAuc, pairedDiff, pct, type Interval } from '../stats';

interface Args {
  seeds: number;
  updates: number;
  docs: number;
  turns: number;
  modulus: number;
  lr: number;
  evalTasks: number;
  jobs: number;
  out: string;
  worker?: string;
}

interface Job {
  seed: number;
  fallback: boolean;
  updates: number;
  search: { docs: number; turns: number; modulus: number };
  lr: number;
  evalTasks: number;
}

interface JobResult extends Job {
  /** Per update: share of the episodes played since the previous update that succeeded. */
  curve: number[];
  /** Per update: share of the groups (tasks) played since the previous update in which every rollout failed. */
  allFailed: number[];
  /** Per update: share of those groups whose advantages came from progress (0 with the fallback off). */
  usedFallback: number[];
  finalSuccess: number;
  seconds: number;
}

const GROUP_SIZE = 16;

function parseArgs(argv: string[]): Args {
  const a: Args = {
    seeds: 10,
    updates: 1000,
    docs: 6,
    turns: 3,
    modulus: 8,
    lr: 5e-4,
    evalTasks: 64,
    jobs: Math.max(1, Math.min(2, os.availableParallelism())),
    out: path.join('bench', 'studies', 'progpo', 'results'),
  };
  for (const f of flags(argv)) {
    const k = f.name;
    if (k === '--seeds') a.seeds = f.int();
    else if (k === '--updates') a.updates = f.int();
    else if (k === '--docs') a.docs = f.int(2);
    else if (k === '--turns') a.turns = f.int(2);
    else if (k === '--modulus') a.modulus = f.int(2);
    else if (k === '--lr') a.lr = f.number(0, 1);
    else if (k === '--eval-tasks') a.evalTasks = f.int();
    else if (k === '--jobs') a.jobs = f.int();
    else if (k === '--out') a.out = f.value();
    else if (k === '--worker') a.worker = f.value();
    else throw new Error(`unknown argument ${k}`);
  }
  return a;
}

async function worker(job: Job): Promise<JobResult> {
  const { initTfBackend } = await import('@srpo/core');
  await initTfBackend('tensorflow');
  const { runInProcess } = await import('../../compare/in-process-trainer');
  const { createWorkflow, checkSearchSettings, DEFAULT_ARITHMETIC } = await import('@srpo/workflows');
  const { progressCoverage, resolveObjectiveConfig, groupAdvantages } = await import('@srpo/srpo');
  const { DEMO_DEFAULTS } = await import('../../../apps/agents/src/demo/demo-config');
  const started = Date.now();
  const search = checkSearchSettings({ ...job.search });
  const objective = {
    objective: 'srpo' as const,
    eventReduction: 'sqrt' as const,
    progress: { enabled: job.fallback, rewardThreshold: 0.001, stdThreshold: 0.0001 },
  };
  const resolved = resolveObjectiveConfig(objective);
  const demo = JSON.parse(DEMO_DEFAULTS.model) as import('@srpo/policy').TransformerConfig;
  // The demo's model; longer episodes need more positions (question, 3 tokens per earlier turn, the answer).
  const model = { ...demo, maxSeqLen: Math.max(demo.maxSeqLen, 4 + 3 * (search.turns - 1) + 1) };
  // Per task: did every rollout fail, and did its groups take their advantages from progress?
  let failed = 0;
  let fellBack = 0;
  let tasks = 0;
  let wins = 0;
  let episodes = 0;
  const curve: number[] = [];
  const allFailed: number[] = [];
  const usedFallback: number[] = [];
  const res = await runInProcess({
    workflows: ['search'],
    rolePolicies: { searcher: 'searcher' },
    model,
    seed: job.seed,
    objective,
    lr: job.lr,
    maxGradNorm: 1,
    groupSize: GROUP_SIZE,
    setsPerUpdate: DEMO_DEFAULTS.setsPerUpdate,
    updates: job.updates,
    temperature: 1,
    behaviourLag: 3,
    arithmetic: DEFAULT_ARITHMETIC,
    search,
    onTask: (r) => {
      tasks++;
      const ok = r.episodes.filter((e) => e.outcome.success).length;
      wins += ok;
      episodes += r.episodes.length;
      if (ok === 0) failed++;
      // Every position of a search task shares the outcome reward and the episode's progress,
      // so the fallback decision of its first position is the task's.
      const adv = groupAdvantages(
        r.episodes.map((e) => ({
          setId: e.episodeId,
          groupKey: 'g',
          reward: e.outcome.reward,
          progress: progressCoverage(e.outcome.observationDigests, e.outcome.turns),
        })),
        resolved,
      );
      if (adv[0].fromProgress) fellBack++;
    },
    onUpdate: () => {
      curve.push(episodes > 0 ? wins / episodes : Number.NaN);
      allFailed.push(tasks > 0 ? failed / tasks : Number.NaN);
      usedFallback.push(tasks > 0 ? fellBack / tasks : Number.NaN);
      failed = fellBack = tasks = wins = episodes = 0;
    },
  });
  const evalWf = createWorkflow('search', { arithmetic: DEFAULT_ARITHMETIC, search }, job.seed + 100_000);
  let ok = 0;
  let n = 0;
  for (let t = 0; t < job.evalTasks; t++) {
    const r = await evalWf.play(`eval-${t}`, GROUP_SIZE, res.sampler);
    for (const e of r.episodes) {
      n++;
      if (e.outcome.success) ok++;
    }
  }
  if (res.behaviour !== res.registry) res.behaviour.dispose();
  res.registry.dispose();
  return { ...job, curve, allFailed, usedFallback, finalSuccess: ok / n, seconds: (Date.now() - started) / 1000 };
}

const signed = (i: Interval) => `${i.mean >= 0 ? '+' : ''}${(100 * i.mean).toFixed(1)} ± ${(100 * i.half).toFixed(1)}`;

function table(results: JobResult[], block: number): string {
  const arm = (on: boolean) => results.filter((r) => r.fallback === on).sort((a, b) => a.seed - b.seed);
  const off = arm(false);
  const on = arm(true);
  const lines = [
    `| fallback | all-fail groups, first ${block} updates | groups that used the fallback (whole run) | final success | AUC of training success |`,
    '|---|---|---|---|---|',
  ];
  for (const [name, rs] of [
    ['off', off],
    ['on', on],
  ] as const) {
    lines.push(
      `| ${name} | ${pct(ci95(rs.map((r) => mean(r.allFailed.slice(0, block)))))} % | ${pct(ci95(rs.map((r) => mean(r.usedFallback))))} % | ${pct(ci95(rs.map((r) => r.finalSuccess)))} % | ${pct(ci95(rs.map((r) => normalisedAuc(r.curve))))} % |`,
    );
  }
  const paired = off.length === on.length && off.every((r, i) => r.seed === on[i].seed);
  if (paired) {
    const df = pairedDiff(
      on.map((r) => r.finalSuccess),
      off.map((r) => r.finalSuccess),
    );
    const da = pairedDiff(
      on.map((r) => normalisedAuc(r.curve)),
      off.map((r) => normalisedAuc(r.curve)),
    );
    const read = (i: Interval) => (excludesZero(i) ? (i.mean > 0 ? 'higher with the fallback' : 'lower with the fallback') : 'no difference beyond noise');
    lines.push('', `On − off, paired by seed (${on.length} seeds): final success ${signed(df)} points (${read(df)}); AUC ${signed(da)} points (${read(da)}).`);
  }
  const curve = (rs: JobResult[], f: (r: JobResult) => number[]) => {
    const bs = rs.map((r) => blockMeans(f(r), block));
    return bs[0].map((_, j) => ci95(bs.map((b) => b[j])));
  };
  lines.push('', `Per block of ${block} updates (mean ± 95 % over seeds): training success off / on, and share of groups using the fallback (on):`, '');
  const cOff = curve(off, (r) => r.curve);
  const cOn = curve(on, (r) => r.curve);
  const cFb = curve(on, (r) => r.usedFallback);
  lines.push('| updates | success off | success on | fallback share (on) |', '|---|---|---|---|');
  cOff.forEach((c, j) =>
    lines.push(`| ${j * block + 1}–${Math.min((j + 1) * block, off[0].curve.length)} | ${pct(c)} % | ${pct(cOn[j])} % | ${pct(cFb[j])} % |`),
  );
  return lines.join('\n');
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  if (args.worker) {
    process.stdout.write(JSON.stringify(await worker(JSON.parse(args.worker) as Job)) + '\n');
    return;
  }
  const jobs: Job[] = [];
  for (let seed = 1; seed <= args.seeds; seed++) {
    for (const fallback of [false, true]) {
      jobs.push({
        seed,
        fallback,
        updates: args.updates,
        search: { docs: args.docs, turns: args.turns, modulus: args.modulus },
        lr: args.lr,
        evalTasks: args.evalTasks,
      });
    }
  }
  const started = Date.now();
  let done = 0;
  const results = await pool(jobs, args.jobs, async (job) => {
    const r = await runChild<JobResult>(__filename, job, `seed ${job.seed} fallback ${job.fallback ? 'on' : 'off'}`);
    process.stderr.write(
      `[${++done}/${jobs.length}] seed ${r.seed} fallback ${r.fallback ? 'on' : 'off'}: final ${(100 * r.finalSuccess).toFixed(1)}% in ${r.seconds.toFixed(0)} s\n`,
    );
    return r;
  });
  results.sort((a, b) => a.seed - b.seed || Number(a.fallback) - Number(b.fallback));
  const minutes = (Date.now() - started) / 60_000;
  const command = `node dist-bench/bench/studies/progpo/run.js --seeds ${args.seeds} --updates ${args.updates} --docs ${args.docs} --turns ${args.turns} --modulus ${args.modulus} --lr ${args.lr} --eval-tasks ${args.evalTasks} --jobs ${args.jobs}`;
  const cpu = os.cpus()[0]?.model ?? 'unknown CPU';
  const block = Math.max(1, Math.round(args.updates / 10));
  const md = `${table(results, block)}\n\n_${command}: ${jobs.length} runs in ${minutes.toFixed(1)} min on ${cpu} (${os.cpus().length} cores), ${new Date().toISOString().slice(0, 10)}._\n`;
  await fs.mkdir(args.out, { recursive: true });
  const file = path.join(args.out, 'progpo-study.json');
  await fs.writeFile(
    file,
    JSON.stringify({ command, date: new Date().toISOString().slice(0, 10), minutes, cpu, args: { ...args, worker: undefined }, block, results }),
  );
  await fs.writeFile(path.join(args.out, 'progpo-study.md'), md);
  drawCharts('progpo', file);
  process.stdout.write(`${md}\n`);
}

void main().catch((e: unknown) => {
  process.stderr.write(`${e instanceof Error ? e.message : String(e)}\n`);
  process.exit(1);
});
