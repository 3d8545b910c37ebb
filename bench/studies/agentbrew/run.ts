/**
 * The AgentBrew study (issue #20, part 2): offline training from the logs of a
 * single-agent tool-use task (kv.env.ts), with retrospective task inference from the end
 * state, a cross-fitted PMI scorer over (call, observation) prefixes, four weightings of
 * the credits, uniform SFT and rejection sampling, at equal example counts.
 *
 *   npm run build:bench && node dist-bench/bench/studies/agentbrew/run.js [--seeds 5] [--log-episodes 2000] [--steps 2000] [--scorer-steps 1000] [--lr 3e-3] [--jobs 2]
 *
 * Per seed: log episodes with the logging agent; split them in two halves by index; fit a
 * scorer on each half and score the other half's calls with it (cross-fitting, so no call
 * is scored by a model that saw it); train a fresh policy per method with the same budget
 * (steps × batch examples drawn, lr); evaluate on fresh tasks. Writes
 * results/agentbrew-study.json and .md, and the charts when matplotlib is there.
 */
import { promises as fs } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { drawCharts, flags, pool, runChild } from '../../child';
import { ci95, excludesZero, mean, pairedDiff, pct, type Interval } from '../stats';
import type { Weighting } from './brew-study';
import type { CallKind, KvSettings } from './kv.env';

export const BREW_MODEL = { vocabSize: 32, dModel: 32, nLayers: 2, nHeads: 2, maxSeqLen: 36 };
type Method = 'uniform' | 'rejection' | `credit: ${Weighting}`;

interface Args {
  seeds: number;
  logEpisodes: number;
  steps: number;
  batch: number;
  lr: number;
  scorerSteps: number;
  evalTasks: number;
  floor: number;
  jobs: number;
  out: string;
  worker?: string;
}

interface Job {
  seed: number;
  args: Omit<Args, 'worker' | 'jobs' | 'out' | 'seeds'>;
}

interface MethodResult {
  method: Method;
  /** Examples with a weight ≠ 0 in the method's dataset. */
  examples: number;
  success: number;
  kinds: Record<CallKind, number>;
}

interface JobResult {
  seed: number;
  logSuccess: number;
  logKinds: Record<CallKind, number>;
  /** Signed PMI credits of the logged calls, by kind (cross-fitted). */
  credits: Record<CallKind, number[]>;
  methods: MethodResult[];
  seconds: number;
}

const KV: KvSettings = { keys: 4, modulus: 4, turns: 6, fillProbability: 0.5 };

function parseArgs(argv: string[]): Args {
  const a: Args = {
    seeds: 5,
    logEpisodes: 2000,
    steps: 2000,
    batch: 64,
    lr: 3e-3,
    scorerSteps: 1000,
    evalTasks: 256,
    floor: 0.1,
    jobs: Math.max(1, Math.min(2, os.availableParallelism())),
    out: path.join('bench', 'studies', 'agentbrew', 'results'),
  };
  for (const f of flags(argv)) {
    const k = f.name;
    if (k === '--seeds') a.seeds = f.int();
    else if (k === '--log-episodes') a.logEpisodes = f.int();
    else if (k === '--steps') a.steps = f.int();
    else if (k === '--batch') a.batch = f.int();
    else if (k === '--scorer-steps') a.scorerSteps = f.int();
    else if (k === '--eval-tasks') a.evalTasks = f.int();
    else if (k === '--jobs') a.jobs = f.int();
    else if (k === '--lr') a.lr = f.number(0, 1);
    else if (k === '--floor') a.floor = f.number(0, 1);
    else if (k === '--out') a.out = f.value();
    else if (k === '--worker') a.worker = f.value();
    else throw new Error(`unknown argument ${k}`);
  }
  return a;
}

async function worker(job: Job): Promise<JobResult> {
  const { initTfBackend } = await import('@srpo/core');
  await initTfBackend('tensorflow');
  const b = await import('./brew-study');
  const { CreditWeightedSftTrainer, trainWeighted } = await import('@srpo/offline');
  const { Policy } = await import('@srpo/policy');
  const started = Date.now();
  const { seed, args } = job;
  const logs = b.logEpisodes(args.logEpisodes, 10_000 + seed, b.DEFAULT_MIX, KV);
  const logKinds: Record<CallKind, number> = { effective: 0, redundant: 0, erroneous: 0 };
  for (const e of logs) for (const k of e.kinds) logKinds[k]++;
  for (const k of Object.keys(logKinds) as CallKind[]) logKinds[k] /= logs.length * KV.turns;
  // Cross-fitting: each half is scored by the scorer fitted on the other.
  const half = (r: number) => logs.filter((_, i) => i % 2 === r);
  const scorers = [
    await b.fitScorer(half(1), BREW_MODEL, 50_000 + seed, { steps: args.scorerSteps, batch: args.batch, lr: args.lr }),
    await b.fitScorer(half(0), BREW_MODEL, 60_000 + seed, { steps: args.scorerSteps, batch: args.batch, lr: args.lr }),
  ];
  const credits: number[][] = [];
  for (let i = 0; i < logs.length; i++) credits.push(await b.pmiCredits(logs[i], scorers[i % 2], 'adjacent'));
  for (const s of scorers) s.dispose();
  const byKind: Record<CallKind, number[]> = { effective: [], redundant: [], erroneous: [] };
  logs.forEach((e, i) => e.kinds.forEach((k, j) => byKind[k].push(credits[i][j])));
  const datasetMax = Math.max(0, ...logs.flatMap((e, i) => credits[i].filter((_, j) => e.kinds[j] !== 'erroneous')));

  const datasets: Record<Method, import('@srpo/offline').WeightedExample[]> = {
    uniform: logs.flatMap((e) =>
      b.callExamples(
        e,
        b.inferredInstruction(e),
        e.kinds.map(() => 1),
        (j) => e.kinds[j] !== 'erroneous',
      ),
    ),
    // Rejection sampling: episodes that achieved the task they were played for, original prompts, every call.
    rejection: logs
      .filter((e) => e.success)
      .flatMap((e) =>
        b.callExamples(
          e,
          e.instruction,
          e.kinds.map(() => 1),
          () => true,
        ),
      ),
    ...(Object.fromEntries(
      b.WEIGHTINGS.map((w) => [
        `credit: ${w}`,
        logs.flatMap((e, i) =>
          b.callExamples(
            e,
            b.inferredInstruction(e),
            b.weightsOf(w, credits[i], e.kinds, datasetMax, args.floor),
            (j) => w === 'released' || e.kinds[j] !== 'erroneous',
          ),
        ),
      ]),
    ) as Record<`credit: ${Weighting}`, import('@srpo/offline').WeightedExample[]>),
  };
  const methods: MethodResult[] = [];
  for (const [method, examples] of Object.entries(datasets) as [Method, import('@srpo/offline').WeightedExample[]][]) {
    // Every method trains the same fresh weights with the same budget.
    const policy = Policy.create('agent', BREW_MODEL, seed * 1000);
    const trainer = new CreditWeightedSftTrainer(policy, { lr: args.lr, signedWeights: method === 'credit: released' });
    const used = examples.filter((e) => e.weight !== 0).length;
    if (used > 0) await trainWeighted(trainer, examples, { steps: args.steps, batchSize: args.batch, seed });
    trainer.dispose();
    const ev = await b.evaluatePolicy(policy, args.evalTasks, 900_000 + seed, KV);
    policy.dispose();
    methods.push({ method, examples: used, success: ev.success, kinds: ev.kinds });
  }
  return { seed, logSuccess: logs.filter((e) => e.success).length / logs.length, logKinds, credits: byKind, methods, seconds: (Date.now() - started) / 1000 };
}

const signed = (i: Interval) => `${i.mean >= 0 ? '+' : ''}${(100 * i.mean).toFixed(1)} ± ${(100 * i.half).toFixed(1)}`;
const read = (i: Interval) => (excludesZero(i) ? (i.mean > 0 ? 'higher' : 'lower') : 'no difference beyond noise');

function table(results: JobResult[]): string {
  const rs = [...results].sort((a, b) => a.seed - b.seed);
  const methods = rs[0].methods.map((m) => m.method);
  const of = (m: Method) => rs.map((r) => r.methods.find((x) => x.method === m) as MethodResult);
  const uniform = of('uniform').map((m) => m.success);
  const lines = [
    `| method | examples (weight ≠ 0), mean | success on fresh tasks | − uniform, paired | reading | calls: effective / redundant / erroneous |`,
    '|---|---|---|---|---|---|',
  ];
  const logK = (k: CallKind) => (100 * mean(rs.map((r) => r.logKinds[k]))).toFixed(0);
  lines.push(
    `| (the logging agent) | – | ${pct(ci95(rs.map((r) => r.logSuccess)))} % | | | ${logK('effective')} / ${logK('redundant')} / ${logK('erroneous')} % |`,
  );
  for (const m of methods) {
    const ms = of(m);
    const d = pairedDiff(
      ms.map((x) => x.success),
      uniform,
    );
    const k = (kind: CallKind) => (100 * mean(ms.map((x) => x.kinds[kind]))).toFixed(0);
    lines.push(
      `| ${m} | ${mean(ms.map((x) => x.examples)).toFixed(0)} | ${pct(ci95(ms.map((x) => x.success)))} % | ${m === 'uniform' ? '(reference)' : signed(d)} | ${m === 'uniform' ? '' : read(d)} | ${k('effective')} / ${k('redundant')} / ${k('erroneous')} % |`,
    );
  }
  lines.push('', 'Cross-fitted PMI credits (adjacent, nats per instruction token) of the logged calls, by kind, pooled over seeds:', '');
  lines.push('| kind | calls | mean credit | share > 0 | share < 0 |', '|---|---|---|---|---|');
  for (const kind of ['effective', 'redundant', 'erroneous'] as CallKind[]) {
    const xs = rs.flatMap((r) => r.credits[kind]);
    lines.push(
      `| ${kind} | ${xs.length} | ${mean(xs).toFixed(3)} | ${((100 * xs.filter((x) => x > 0).length) / xs.length).toFixed(0)} % | ${((100 * xs.filter((x) => x < 0).length) / xs.length).toFixed(0)} % |`,
    );
  }
  return lines.join('\n');
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  if (args.worker) {
    process.stdout.write(JSON.stringify(await worker(JSON.parse(args.worker) as Job)) + '\n');
    return;
  }
  const { worker: _w, jobs: _j, out: _o, seeds: _s, ...rest } = args;
  const started = Date.now();
  const seeds = Array.from({ length: args.seeds }, (_, i) => i + 1);
  const results = await pool(seeds, args.jobs, async (seed) => {
    const r = await runChild<JobResult>(__filename, { seed, args: rest } satisfies Job, `seed ${seed}`);
    process.stderr.write(`seed ${r.seed}: ${r.methods.map((m) => `${m.method} ${(100 * m.success).toFixed(1)}%`).join(', ')} (${r.seconds.toFixed(0)} s)\n`);
    return r;
  });
  results.sort((a, b) => a.seed - b.seed);
  const minutes = (Date.now() - started) / 60_000;
  const command = `node dist-bench/bench/studies/agentbrew/run.js --seeds ${args.seeds} --log-episodes ${args.logEpisodes} --steps ${args.steps} --batch ${args.batch} --lr ${args.lr} --scorer-steps ${args.scorerSteps} --eval-tasks ${args.evalTasks} --floor ${args.floor} --jobs ${args.jobs}`;
  const cpu = os.cpus()[0]?.model ?? 'unknown CPU';
  const md = `${table(results)}\n\n_${command}: ${args.seeds} seeds in ${minutes.toFixed(1)} min on ${cpu} (${os.cpus().length} cores), ${new Date().toISOString().slice(0, 10)}._\n`;
  await fs.mkdir(args.out, { recursive: true });
  const file = path.join(args.out, 'agentbrew-study.json');
  await fs.writeFile(
    file,
    JSON.stringify({ command, date: new Date().toISOString().slice(0, 10), minutes, cpu, args: { ...args, worker: undefined }, env: KV, results }),
  );
  await fs.writeFile(path.join(args.out, 'agentbrew-study.md'), md);
  drawCharts('agentbrew', file);
  process.stdout.write(`${md}\n`);
}

if (require.main === module) {
  void main().catch((e: unknown) => {
    process.stderr.write(`${e instanceof Error ? e.message : String(e)}\n`);
    process.exit(1);
  });
}
