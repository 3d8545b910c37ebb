/**
 * The SRPO study (issue #20, part 1): SRPO with each event reduction, GSPO, token-level
 * GRPO and our member-length-normalised SRPO variant on variable-size sets, under
 * off-policy pressure, with paired seeds and a learning-rate sweep.
 *
 *   npm run build:bench && node dist-bench/bench/studies/srpo/run.js [--seeds 10] [--updates 60] [--lrs 3e-4,1e-3,3e-3]
 *     [--epochs 3] [--lag 4] [--jobs 2] [--objectives all|a,b] [--out bench/studies/srpo/results]
 *
 * Phase 1 warm-starts both policies per seed (supervised, to a base success band); phase 2
 * runs every objective × learning rate × seed from that seed's warm start, `--jobs` child
 * processes at a time with one TensorFlow thread each. Writes results/srpo-study.json
 * (every run's curves and diagnostics), results/srpo-study.md (the tables) and, when
 * Python with matplotlib is there, the charts (bench/studies/plot.py). `--report A.json,B.json`
 * re-tabulates and merges earlier results (e.g. a supplementary learning rate) without running.
 */
import { promises as fs } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { STUDY_OBJECTIVES, type RunJob, type RunResult, type StudyObjective, type WarmStartJob, type WarmStartResult } from './train';
import { DEFAULT_TEAM, checkTeamSettings, type TeamSettings } from './team.env';
import { summarise, type StudyMeta } from './report';
import { drawCharts, flags, pool, runChild } from '../../child';

export const STUDY_MODEL = { vocabSize: 32, dModel: 32, nLayers: 2, nHeads: 2, maxSeqLen: 24 };

interface Args {
  seeds: number;
  updates: number;
  lrs: number[];
  epochs: number;
  lag: number;
  groupSize: number;
  tasksPerUpdate: number;
  evalTasks: number;
  probeEvery: number;
  probeSets: number;
  routerAccuracy: number;
  workSuccess: number;
  trainRouter: boolean;
  warmMaxSteps: number;
  warmLr: number;
  objectives: StudyObjective[];
  /** Re-tabulate (and merge) earlier results instead of running: their JSON files. */
  report?: string[];
  jobs: number;
  out: string;
  env: TeamSettings;
  worker?: string;
}

const ALL = Object.keys(STUDY_OBJECTIVES) as StudyObjective[];
type WarmSummary = Omit<WarmStartResult, 'weights'>;
const pc = (x: number) => `${(100 * x).toFixed(1)}%`;

export function parseArgs(argv: string[]): Args {
  const a: Args = {
    seeds: 10,
    updates: 60,
    lrs: [3e-4, 1e-3, 3e-3],
    epochs: 3,
    lag: 4,
    groupSize: 8,
    tasksPerUpdate: 4,
    evalTasks: 32,
    probeEvery: 5,
    probeSets: 4,
    routerAccuracy: 0.6,
    workSuccess: 0.3,
    trainRouter: false,
    warmMaxSteps: 3000,
    warmLr: 2e-3,
    objectives: ALL,
    jobs: Math.max(1, Math.min(2, os.availableParallelism())),
    out: path.join('bench', 'studies', 'srpo', 'results'),
    env: { ...DEFAULT_TEAM },
  };
  for (const f of flags(argv)) {
    const k = f.name;
    if (k === '--seeds') a.seeds = f.int();
    else if (k === '--updates') a.updates = f.int();
    else if (k === '--lrs') {
      const v = f.value();
      a.lrs = v.split(',').map(Number);
      if (a.lrs.some((x) => !(x > 0 && x < 1))) throw new Error(`--lrs must be numbers in (0, 1), got ${v}`);
    } else if (k === '--epochs') a.epochs = f.int();
    else if (k === '--lag') a.lag = f.int();
    else if (k === '--group-size') a.groupSize = f.int(2);
    else if (k === '--tasks-per-update') a.tasksPerUpdate = f.int();
    else if (k === '--eval-tasks') a.evalTasks = f.int();
    else if (k === '--probe-every') a.probeEvery = f.int();
    else if (k === '--probe-sets') a.probeSets = f.int();
    else if (k === '--router-accuracy') a.routerAccuracy = f.number(0, 1);
    else if (k === '--work-success') a.workSuccess = f.number(0, 1);
    else if (k === '--train-router') a.trainRouter = true;
    else if (k === '--warm-max-steps') a.warmMaxSteps = f.int(25);
    else if (k === '--warm-lr') a.warmLr = f.number(0, 1);
    else if (k === '--length') a.env.length = f.int();
    else if (k === '--modulus') a.env.modulus = f.int(2);
    else if (k === '--request-probability') a.env.requestProbability = f.number(0, 1);
    else if (k === '--objectives') {
      const v = f.value();
      a.objectives = v === 'all' ? ALL : (v.split(',') as StudyObjective[]);
      for (const o of a.objectives) if (!ALL.includes(o)) throw new Error(`--objectives: unknown objective ${o}; one of ${ALL.join(', ')}`);
    } else if (k === '--report') a.report = f.value().split(',');
    else if (k === '--jobs') a.jobs = f.int();
    else if (k === '--out') a.out = f.value();
    else if (k === '--worker') a.worker = f.value();
    else throw new Error(`unknown argument ${k}`);
  }
  checkTeamSettings(a.env);
  if (STUDY_MODEL.maxSeqLen < a.env.length * 2 + 4)
    throw new Error(
      `--length ${a.env.length}: the study model's context (${STUDY_MODEL.maxSeqLen}) holds answers of at most ${(STUDY_MODEL.maxSeqLen - 4) / 2} tokens`,
    );
  return a;
}

type WorkerTask = { kind: 'warm'; job: WarmStartJob; file: string } | { kind: 'run'; job: RunJob; warmFile: string };

async function worker(task: WorkerTask): Promise<unknown> {
  const { initTfBackend } = await import('@srpo/core');
  await initTfBackend('tensorflow');
  const train = await import('./train');
  if (task.kind === 'warm') {
    const r = await train.warmStart(task.job);
    await fs.writeFile(task.file, JSON.stringify(r));
    const { weights: _w, ...summary } = r;
    return summary;
  }
  const warm = JSON.parse(await fs.readFile(task.warmFile, 'utf8')) as WarmStartResult;
  return train.runStudy(task.job, warm.weights);
}

export function commandOf(a: Args): string {
  return (
    `node dist-bench/bench/studies/srpo/run.js --seeds ${a.seeds} --updates ${a.updates} --lrs ${a.lrs.join(',')} --epochs ${a.epochs} --lag ${a.lag} ` +
    `--group-size ${a.groupSize} --tasks-per-update ${a.tasksPerUpdate} --eval-tasks ${a.evalTasks} ` +
    `--router-accuracy ${a.routerAccuracy} --work-success ${a.workSuccess}${a.trainRouter ? ' --train-router' : ''} --jobs ${a.jobs}` +
    (a.objectives.length === ALL.length ? '' : ` --objectives ${a.objectives.join(',')}`)
  );
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  if (args.worker) {
    process.stdout.write(JSON.stringify(await worker(JSON.parse(args.worker) as WorkerTask)) + '\n');
    return;
  }
  if (args.report) {
    await report(args.report, args.out);
    return;
  }
  const started = Date.now();
  const warmDir = path.join(args.out, 'warm');
  await fs.mkdir(warmDir, { recursive: true });
  const seeds = Array.from({ length: args.seeds }, (_, i) => i + 1);
  const warm = await pool(seeds, args.jobs, async (seed) => {
    const file = path.join(warmDir, `seed-${seed}.json`);
    const job: WarmStartJob = {
      seed,
      model: STUDY_MODEL,
      env: args.env,
      routerAccuracy: args.routerAccuracy,
      workSuccess: args.workSuccess,
      maxSteps: args.warmMaxSteps,
      lr: args.warmLr,
    };
    const r = await runChild<WarmSummary>(__filename, { kind: 'warm', job, file } satisfies WorkerTask, `warm start of seed ${seed}`);
    process.stderr.write(
      `warm start seed ${seed}: ${r.steps} steps, routing ${pc(r.routerAccuracy)}, work sets ${pc(r.workSuccess)}, episodes ${pc(r.success)}\n`,
    );
    return r;
  });
  const jobs: RunJob[] = [];
  for (const seed of seeds) {
    for (const objective of args.objectives) {
      for (const lr of args.lrs) {
        jobs.push({
          seed,
          objective,
          lr,
          updates: args.updates,
          epochs: args.epochs,
          lag: args.lag,
          groupSize: args.groupSize,
          tasksPerUpdate: args.tasksPerUpdate,
          evalTasks: args.evalTasks,
          probeEvery: args.probeEvery,
          probeSets: args.probeSets,
          trainRouter: args.trainRouter,
          env: args.env,
          model: STUDY_MODEL,
        });
      }
    }
  }
  let done = 0;
  const results = await pool(jobs, args.jobs, async (job) => {
    const r = await runChild<RunResult>(
      __filename,
      { kind: 'run', job, warmFile: path.join(warmDir, `seed-${job.seed}.json`) } satisfies WorkerTask,
      `${job.objective} lr ${job.lr} seed ${job.seed}`,
    );
    done++;
    process.stderr.write(
      `[${done}/${jobs.length}] ${job.objective} lr ${job.lr} seed ${job.seed}: work sets ${pc(r.finalSuccess)} (episodes ${pc(r.final.success)}), clip ${pc(r.clipFrac)} in ${r.seconds.toFixed(0)} s\n`,
    );
    return r;
  });
  const minutes = (Date.now() - started) / 60_000;
  const command = commandOf(args);
  const cpu = os.cpus()[0]?.model ?? 'unknown CPU';
  const meta = { command, date: new Date().toISOString().slice(0, 10), minutes, cpu, cores: os.cpus().length, args: { ...args, worker: undefined }, warm };
  const markdown = await write(results, meta, args.out);
  process.stdout.write(`${markdown}\n${command}: ${jobs.length} runs in ${minutes.toFixed(1)} min\n`);
}

/** Writes the results, the tables and (with matplotlib) the charts. */
async function write(results: readonly RunResult[], meta: StudyMeta & { args?: unknown }, out: string): Promise<string> {
  const summary = summarise(results, meta);
  await fs.mkdir(out, { recursive: true });
  const file = path.join(out, 'srpo-study.json');
  await fs.writeFile(file, JSON.stringify({ ...meta, summary: summary.json, results }));
  await fs.writeFile(path.join(out, 'srpo-study.md'), summary.markdown);
  drawCharts('srpo', file);
  return summary.markdown;
}

/**
 * `--report A.json[,B.json]`: the tables and charts again from earlier results, merged when
 * several are given (e.g. a run with another learning rate). Runs to merge must share their
 * warm starts, so they are paired by seed.
 */
async function report(files: readonly string[], out: string): Promise<void> {
  type Saved = StudyMeta & { args?: unknown; results: RunResult[] };
  const saved = await Promise.all(files.map(async (f) => JSON.parse(await fs.readFile(f, 'utf8')) as Saved));
  const warm = JSON.stringify(saved[0].warm);
  saved.forEach((s, i) => {
    if (JSON.stringify(s.warm) !== warm)
      throw new Error(`--report: ${files[i]} has other warm starts than ${files[0]}; its runs are not paired with the others`);
  });
  const meta: StudyMeta & { args?: unknown } = {
    command: saved.map((s) => s.command).join(' and '),
    date: saved
      .map((s) => s.date)
      .sort()
      .pop() as string,
    minutes: saved.reduce((a, s) => a + s.minutes, 0),
    cpu: saved[0].cpu,
    cores: saved[0].cores,
    warm: saved[0].warm,
    args: saved.length === 1 ? saved[0].args : saved.map((s) => s.args),
  };
  const markdown = await write(
    saved.flatMap((s) => s.results),
    meta,
    out,
  );
  process.stdout.write(markdown);
}

if (require.main === module) {
  void main().catch((e: unknown) => {
    process.stderr.write(`${e instanceof Error ? e.message : String(e)}\n`);
    process.exit(1);
  });
}
