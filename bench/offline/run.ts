/**
 * AgentBrew offline training compared on raw logs of the demo's fixed workflow
 * (solver -> checker), in process.
 *
 *   npm run build:bench && node dist-bench/bench/offline/run.js [--seeds 3] [--weak-updates 30] [--log-tasks 128] [--steps 200] [--batch 64] [--eval-tasks 256] [--out bench/offline/results]
 *
 * Per seed and log source (an untrained policy, and the same after
 * `--weak-updates` SRPO updates of the demo's in-process loop):
 * 1. collect raw logs: `--log-tasks` tasks x 8 rollouts, sampled at temperature 1,
 *    unfiltered, turned into events (eventsOf from @srpo/workflows, as the agents emit them) and trajectories
 *    (assembleTrajectories, as the offline job does after reading Kafka);
 * 2. infer tasks (DemoEnvTaskInferrer: hindsight relabelling) and score PMI credits
 *    with a scorer fitted on the logs' own (action prefix -> inferred instruction) pairs;
 * 3. train a copy of the log policy five ways with the same budget (steps x batch, lr):
 *    credit-weighted (adjacent, best_prefix; and adjacent with the log policy itself as
 *    the scorer, as `srpo offline` does by default), uniform on the same inferred tasks,
 *    and rejection sampling (episodes that succeeded at their original task, original prompts, unweighted);
 * 4. evaluate on fresh tasks (another task seed): success rate of the episode.
 * Writes results/offline.json and results/offline.md.
 */
import { promises as fs } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { initTfBackend } from '@srpo/core';
import type { AgentOutput, EpisodeOutcome, Transition } from '@srpo/events';
import {
  assembleTrajectories,
  brewTrajectory,
  CreditWeightedSftTrainer,
  InstructionScorer,
  trainingExamples,
  trainWeighted,
  type BrewedTrajectory,
  type Trajectory,
  type WeightedExample,
} from '@srpo/offline';
import { isTransformerModel, Policy, PolicyRegistry, SeededRng, TransformerModel, type TransformerConfig } from '@srpo/policy';
import { DEFAULT_ARITHMETIC, DEFAULT_SEARCH, DemoEnvTaskInferrer, eventsOf, FixedWorkflow, PolicySampler, Tok } from '@srpo/workflows';
import { runInProcess } from '../compare/in-process-trainer';

const MODEL: TransformerConfig = { vocabSize: 32, dModel: 32, nLayers: 2, nHeads: 2, maxSeqLen: 16 };
const GROUP = 8;
const SETTINGS = DEFAULT_ARITHMETIC;
/** The checker's format bonus marks a wrong verdict: relabelling the task cannot make it right. */
const STEP_RULE = { failedRewardAtMost: 0, byPosition: { check: SETTINGS.formatBonus } };
type Source = 'untrained' | 'weak';
type Method = 'credit-adjacent' | 'credit-best_prefix' | 'credit-adjacent, log policy as scorer' | 'uniform' | 'rejection';
const METHODS: Method[] = ['credit-adjacent', 'credit-best_prefix', 'credit-adjacent, log policy as scorer', 'uniform', 'rejection'];

interface Args {
  seeds: number;
  weakUpdates: number;
  logTasks: number;
  steps: number;
  batch: number;
  lr: number;
  scorerSteps: number;
  evalTasks: number;
  out: string;
}

interface Row {
  source: Source;
  seed: number;
  method: Method | 'log policy';
  /** Trajectories (or actions) the method trained on. */
  trajectories: number;
  examples: number;
  success: number;
  solver: number;
  checker: number;
  seconds: number;
}

function parseArgs(argv: string[]): Args {
  const a: Args = { seeds: 3, weakUpdates: 30, logTasks: 128, steps: 200, batch: 64, lr: 1e-3, scorerSteps: 200, evalTasks: 256, out: 'bench/offline/results' };
  for (let i = 0; i < argv.length; i += 2) {
    const key = argv[i].replace(/^--/, '').replace(/-([a-z])/g, (_, c: string) => c.toUpperCase()) as keyof Args;
    if (!(key in a)) throw new Error(`unknown option ${argv[i]}`);
    (a as unknown as Record<string, number | string>)[key] = key === 'out' ? argv[i + 1] : Number(argv[i + 1]);
  }
  return a;
}

async function copyOf(p: Policy): Promise<Policy> {
  const names = p.model.weightNames();
  const values = await Promise.all(names.map((n) => p.model.weight(n).data() as Promise<Float32Array>));
  const { model } = p;
  if (!isTransformerModel(model)) throw new Error(`policy ${p.id}: this bench copies the project's transformer only`);
  return new Policy(p.id, TransformerModel.fromValues(model.config, new Map(names.map((n, i) => [n, values[i]]))), p.version);
}

function registryFor(policy: Policy): PolicyRegistry {
  const r = new PolicyRegistry();
  r.add(policy);
  r.share(policy.id, ['solver', 'checker']);
  return r;
}

/** Plays `tasks` fresh tasks x G rollouts; returns the trajectories exactly as the offline job would assemble them from Kafka. */
async function collect(policy: Policy, tasks: number, taskSeed: number, sampleSeed: number): Promise<Trajectory[]> {
  const wf = new FixedWorkflow(SETTINGS, new SeededRng(taskSeed));
  const sampler = new PolicySampler(registryFor(policy), { seed: sampleSeed, temperature: 1 });
  const outputs: { value: AgentOutput; source: { topic: string; partition: number; offset: number } }[] = [];
  const transitions: { value: Transition; source: { topic: string; partition: number; offset: number } }[] = [];
  const outcomes: { value: EpisodeOutcome; source: { topic: string; partition: number; offset: number } }[] = [];
  for (let t = 0; t < tasks; t++) {
    const { body, outcomes: outs } = eventsOf(await wf.play(`log-${t}`, GROUP, sampler), 1_700_000_000_000);
    for (const e of [...body, ...outs]) {
      if (e.type === 'AgentOutput')
        outputs.push({
          value: { ...e.value, sampling: { ...e.value.sampling, seed: null, stopTokenIds: [] } } as AgentOutput,
          source: { topic: 'agent-outputs', partition: 0, offset: outputs.length },
        });
      else if (e.type === 'Transition')
        transitions.push({ value: e.value as Transition, source: { topic: 'transitions', partition: 0, offset: transitions.length } });
      else outcomes.push({ value: e.value as EpisodeOutcome, source: { topic: 'episode-outcomes', partition: 0, offset: outcomes.length } });
    }
  }
  const { trajectories, incomplete } = assembleTrajectories({ outputs, transitions, outcomes }, STEP_RULE);
  if (incomplete.length > 0) throw new Error(`${incomplete.length} episodes incomplete`);
  return trajectories;
}

interface Evaluation {
  /** Episode success: a right answer, accepted. */
  success: number;
  /** The solver's answer is right. */
  solver: number;
  /** The checker's verdict is right (accepts exactly the well-formed answers). */
  checker: number;
}

async function evaluate(policy: Policy, tasks: number, seed: number): Promise<Evaluation> {
  const wf = new FixedWorkflow(SETTINGS, new SeededRng(900_000 + seed));
  const sampler = new PolicySampler(registryFor(policy), { seed: 700_000 + seed, temperature: 1 });
  const sum = { success: 0, solver: 0, checker: 0 };
  let n = 0;
  for (let t = 0; t < tasks; t++) {
    for (const ep of (await wf.play(`eval-${t}`, 4, sampler)).episodes) {
      sum.success += ep.outcome.success ? 1 : 0;
      sum.solver += ep.outcome.details.solverCorrect === 'true' ? 1 : 0;
      sum.checker += ep.outcome.details.checkerCorrect === 'true' ? 1 : 0;
      n++;
    }
  }
  return { success: sum.success / n, solver: sum.solver / n, checker: sum.checker / n };
}

/** The scorer: a fresh model fitted on p(instruction | BOS ++ a_1..a_k), k = 0..K, over the logs' usable trajectories. */
async function fitScorer(trajectories: Trajectory[], inferrer: DemoEnvTaskInferrer, args: Args, seed: number): Promise<Policy> {
  const scorer = Policy.create('scorer', MODEL, 50_000 + seed);
  const examples: WeightedExample[] = [];
  for (const t of trajectories) {
    const ok = t.actions.filter((a) => a.successful);
    if (ok.length === 0) continue;
    const y = await inferrer.infer({ ...t, actions: ok });
    if (!y) continue;
    for (let k = 0; k <= ok.length; k++)
      examples.push({ contextTokens: [Tok.BOS, ...ok.slice(0, k).flatMap((a) => a.responseTokens)], responseTokens: y.tokens, weight: 1 });
  }
  const trainer = new CreditWeightedSftTrainer(scorer, { lr: args.lr });
  await trainWeighted(trainer, examples, { steps: args.scorerSteps, batchSize: args.batch, seed });
  trainer.dispose();
  return scorer;
}

function rejectionExamples(trajectories: Trajectory[]): WeightedExample[] {
  return trajectories
    .filter((t) => t.outcome.success)
    .flatMap((t) => t.actions.map((a) => ({ contextTokens: a.contextTokens, responseTokens: a.responseTokens, weight: 1 })));
}

async function runSource(source: Source, seed: number, args: Args, rows: Row[]): Promise<void> {
  let logPolicy: Policy;
  if (source === 'untrained') {
    logPolicy = Policy.create('agent', MODEL, seed * 1000);
  } else {
    const res = await runInProcess({
      workflows: ['fixed'],
      rolePolicies: { solver: 'agent', checker: 'agent' },
      model: MODEL,
      seed,
      objective: { objective: 'srpo', eventReduction: 'sqrt' },
      lr: 5e-4,
      maxGradNorm: 1,
      groupSize: 16,
      setsPerUpdate: 64,
      updates: args.weakUpdates,
      temperature: 1,
      arithmetic: SETTINGS,
      search: DEFAULT_SEARCH,
    });
    logPolicy = await copyOf(res.registry.get('agent'));
    res.registry.dispose();
  }
  const t0 = Date.now();
  const trajectories = await collect(logPolicy, args.logTasks, 10_000 + seed, 20_000 + seed);
  rows.push({
    source,
    seed,
    method: 'log policy',
    trajectories: trajectories.length,
    examples: 0,
    ...(await evaluate(logPolicy, args.evalTasks, seed)),
    seconds: (Date.now() - t0) / 1000,
  });
  const inferrer = new DemoEnvTaskInferrer(SETTINGS);
  const scorerPolicy = await fitScorer(trajectories, inferrer, args, seed);
  const scorer = new InstructionScorer(scorerPolicy.model);
  const brewedBy: Record<'adjacent' | 'best_prefix', BrewedTrajectory[]> = { adjacent: [], best_prefix: [] };
  for (const mode of ['adjacent', 'best_prefix'] as const) {
    for (const t of trajectories) brewedBy[mode].push(await brewTrajectory(t, inferrer, scorer, { creditMode: mode, maxFailedShare: 0.5 }));
  }
  scorerPolicy.dispose();
  // The same credits with an unfitted scorer: the log policy itself, as `srpo offline` uses by default.
  const selfScorer = new InstructionScorer(logPolicy.model);
  const selfScored: BrewedTrajectory[] = [];
  for (const t of trajectories) selfScored.push(await brewTrajectory(t, inferrer, selfScorer, { creditMode: 'adjacent', maxFailedShare: 0.5 }));
  const usable = brewedBy.adjacent.filter((b) => b.exclusion === null).length;
  const data: Record<Method, { examples: WeightedExample[]; trajectories: number }> = {
    'credit-adjacent': { examples: trainingExamples(brewedBy.adjacent, inferrer, 'credit'), trajectories: usable },
    'credit-best_prefix': { examples: trainingExamples(brewedBy.best_prefix, inferrer, 'credit'), trajectories: usable },
    'credit-adjacent, log policy as scorer': { examples: trainingExamples(selfScored, inferrer, 'credit'), trajectories: usable },
    uniform: { examples: trainingExamples(brewedBy.adjacent, inferrer, 'uniform'), trajectories: usable },
    rejection: { examples: rejectionExamples(trajectories), trajectories: trajectories.filter((t) => t.outcome.success).length },
  };
  for (const method of METHODS) {
    const started = Date.now();
    const policy = await copyOf(logPolicy);
    const { examples, trajectories: used } = data[method];
    const positive = examples.filter((e) => e.weight > 0).length;
    if (positive > 0) {
      const trainer = new CreditWeightedSftTrainer(policy, { lr: args.lr });
      await trainWeighted(trainer, examples, { steps: args.steps, batchSize: args.batch, seed });
      trainer.dispose();
    }
    // With nothing to train on, the method returns the log policy unchanged.
    rows.push({
      source,
      seed,
      method,
      trajectories: used,
      examples: positive,
      ...(await evaluate(policy, args.evalTasks, seed)),
      seconds: (Date.now() - started) / 1000,
    });
    policy.dispose();
    const last = rows[rows.length - 1];
    process.stderr.write(
      `${source} seed ${seed} ${method}: success ${(last.success * 100).toFixed(1)}%, solver ${(last.solver * 100).toFixed(1)}%, checker ${(last.checker * 100).toFixed(1)}% (${positive} examples, ${last.seconds.toFixed(1)} s)\n`,
    );
  }
  logPolicy.dispose();
}

function stats(xs: number[]): { mean: number; std: number } {
  const mean = xs.reduce((a, b) => a + b, 0) / xs.length;
  const std = xs.length > 1 ? Math.sqrt(xs.reduce((a, x) => a + (x - mean) ** 2, 0) / (xs.length - 1)) : 0;
  return { mean, std };
}

function table(rows: Row[], args: Args): string {
  const lines = [
    '| log source | method | trained on: trajectories (mean) | examples with weight > 0 (mean) | **episode success** on fresh tasks, mean ± std | per seed | solver right | checker right |',
    '|---|---|---|---|---|---|---|---|',
  ];
  for (const source of ['untrained', 'weak'] as Source[]) {
    for (const method of ['log policy', ...METHODS] as Row['method'][]) {
      const rs = rows.filter((r) => r.source === source && r.method === method).sort((a, b) => a.seed - b.seed);
      if (rs.length === 0) continue;
      const s = stats(rs.map((r) => r.success * 100));
      const sv = stats(rs.map((r) => r.solver * 100));
      const ck = stats(rs.map((r) => r.checker * 100));
      const tr = stats(rs.map((r) => r.trajectories)).mean;
      const ex = stats(rs.map((r) => r.examples)).mean;
      const label = source === 'weak' ? `weak (${args.weakUpdates} SRPO updates)` : 'untrained';
      lines.push(
        `| ${label} | ${method === 'log policy' ? '(log policy, no offline training)' : method} | ${method === 'log policy' ? `${tr.toFixed(0)} logged` : tr.toFixed(0)} | ${method === 'log policy' ? '-' : ex.toFixed(0)} | ${s.mean.toFixed(1)}% ± ${s.std.toFixed(1)} | ${rs.map((r) => (r.success * 100).toFixed(1)).join(' / ')} | ${sv.mean.toFixed(1)}% ± ${sv.std.toFixed(1)} | ${ck.mean.toFixed(1)}% ± ${ck.std.toFixed(1)} |`,
      );
    }
  }
  return lines.join('\n') + '\n';
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  await initTfBackend('tensorflow');
  const started = Date.now();
  const rows: Row[] = [];
  for (let seed = 1; seed <= args.seeds; seed++) {
    for (const source of ['untrained', 'weak'] as Source[]) await runSource(source, seed, args, rows);
  }
  const minutes = (Date.now() - started) / 60_000;
  const md = `${table(rows, args)}\n${rows.length} rows in ${minutes.toFixed(1)} min on ${os.cpus().length} CPU cores (${os.cpus()[0]?.model ?? 'unknown CPU'}), ${new Date().toISOString()}.\n`;
  await fs.mkdir(args.out, { recursive: true });
  await fs.writeFile(path.join(args.out, 'offline.json'), JSON.stringify({ args, rows }, null, 2));
  await fs.writeFile(path.join(args.out, 'offline.md'), md);
  process.stdout.write(md);
}

main().catch((e) => {
  process.stderr.write(`${(e as Error).stack ?? String(e)}\n`);
  process.exit(1);
});
