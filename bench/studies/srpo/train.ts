/**
 * One run of the SRPO study, in process: warm start, then RL on the team environment
 * (team.env.ts) with the learner's step (`SrpoTrainer` from @srpo/policy) and the
 * materializer's advantage rule (`groupAdvantages` from @srpo/srpo). No Kafka: the
 * pipeline's off-policyness is reproduced with a sampling copy of the weights re-synced
 * every `lag` updates, and 2–4 epochs per batch as PPO-style learners take.
 *
 * Two policies. The `router` is learned in the warm start and then frozen: it samples at
 * temperature 1 and is right on only part of the rollouts, so the work set's size K
 * varies within a group, and the objectives are compared on the worker policy alone
 * (an RL-trained router would be a second, confounding difference between them; with
 * `trainRouter` it is trained too). Every run of one seed starts from the same
 * warm-start weights, tasks and sampling seed, so runs of one seed are paired.
 */
import * as tf from '@tensorflow/tfjs';
import { CreditWeightedSftTrainer, type WeightedExample } from '@srpo/offline';
import { Policy, PolicyRegistry, SeededRng, SrpoTrainer, TransformerModel, tokenLogProbs, type ActiveSet, type TransformerConfig } from '@srpo/policy';
import { groupAdvantages, resolveObjectiveConfig, type ObjectiveConfig } from '@srpo/srpo';
import { PolicySampler } from '@srpo/workflows';
import { demonstrations, playTeamTask, sampleTeamTask, type TeamEpisode, type TeamSettings } from './team.env';

/** The objectives compared; `srpo-length-norm` is this project's variant, not the paper's. */
export const STUDY_OBJECTIVES = {
  'srpo-sum': { objective: 'srpo', eventReduction: 'sum' },
  'srpo-mean': { objective: 'srpo', eventReduction: 'mean' },
  'srpo-sqrt': { objective: 'srpo', eventReduction: 'sqrt' },
  gspo: { objective: 'gspo' },
  'grpo-token': { objective: 'grpo-token' },
  'srpo-length-norm (ours)': { objective: 'srpo-length-norm', eventReduction: 'sqrt' },
} as const satisfies Record<string, Partial<ObjectiveConfig>>;
export type StudyObjective = keyof typeof STUDY_OBJECTIVES;

export const POLICIES = ['router', 'worker'] as const;
export type WeightSet = Record<(typeof POLICIES)[number], Record<string, number[]>>;

export interface WarmStartJob {
  seed: number;
  model: TransformerConfig;
  env: TeamSettings;
  /** Stop fitting the router once its sampled routing is right this often (0..1). */
  routerAccuracy: number;
  /** Stop fitting the worker once the sampled work set is right this often (0..1). */
  workSuccess: number;
  maxSteps: number;
  lr: number;
}

export interface WarmStartResult {
  seed: number;
  steps: number;
  /** Sampled at the end of the warm start: routing right, work set right, both. */
  routerAccuracy: number;
  workSuccess: number;
  success: number;
  weights: WeightSet;
}

export interface RunJob {
  seed: number;
  objective: StudyObjective;
  lr: number;
  updates: number;
  epochs: number;
  lag: number;
  groupSize: number;
  tasksPerUpdate: number;
  evalTasks: number;
  /** Every this many updates, probe per-K gradient norms and set-ratio spreads. */
  probeEvery: number;
  /** Sets of one K per gradient-norm probe (fewer available: that K is skipped). */
  probeSets: number;
  /** Train the router with the same objective too (default: frozen after the warm start). */
  trainRouter: boolean;
  env: TeamSettings;
  model: TransformerConfig;
}

/** Per set size K: what the paper's optimisation diagnostics read. */
export interface PerK {
  /** Units (sets, members or tokens) of sets of size K that were clipped, over all epochs. */
  clipFrac: number;
  /** Pre-clip gradient norms of the loss on `probeSets` sets of size K. */
  gradNorms: number[];
  /** Std of the joint log-ratio Σ_j ℓ_j of sets of size K after each probed update. */
  logRatioStd: number[];
  /** Work sets of size K seen in training. */
  sets: number;
}

export interface RunResult extends Omit<RunJob, 'env' | 'model'> {
  /** The learning curve: share of each update's work sets that were right (every chosen worker right). */
  curve: number[];
  /** Share of each update's episodes whose routing was right, and that succeeded (routing and work right). */
  routeCurve: number[];
  episodeCurve: number[];
  /** With the final weights on fresh tasks: routing, work-set and episode success. */
  final: Rates;
  /** The primary measure: the work set right (every chosen worker right), with the final weights. */
  finalSuccess: number;
  /** Worker sets' clip fraction over every epoch of every update (all units). */
  clipFrac: number;
  routerClipFrac: number;
  perK: Record<string, PerK>;
  /** Pre-clip gradient norm of every worker update's first epoch. */
  gradNorm: number[];
  seconds: number;
}

const mkRegistry = (model: TransformerConfig, seed: number): PolicyRegistry => {
  const r = new PolicyRegistry();
  POLICIES.forEach((id, i) => {
    r.create(id, model, seed * 1000 + i);
    r.assignRole(id, id);
  });
  return r;
};

async function valuesOf(p: Policy): Promise<Record<string, number[]>> {
  const names = p.model.weightNames();
  const vals = await Promise.all(names.map((n) => p.model.weight(n).data() as Promise<Float32Array>));
  return Object.fromEntries(names.map((n, i) => [n, Array.from(vals[i])]));
}

function policyFrom(id: string, model: TransformerConfig, values: Record<string, number[]>, version: number): Policy {
  return new Policy(id, TransformerModel.fromValues(model, new Map(Object.entries(values).map(([n, v]) => [n, Float32Array.from(v)]))), version);
}

async function copyOf(p: Policy, model: TransformerConfig): Promise<Policy> {
  return policyFrom(p.id, model, await valuesOf(p), p.version);
}

export interface Rates {
  route: number;
  work: number;
  success: number;
}

/** Routing, work-set and episode success of G rollouts × `tasks` fresh tasks. */
async function ratesOn(sampler: PolicySampler, rng: SeededRng, tasks: number, g: number, env: TeamSettings, prefix: string): Promise<Rates> {
  let route = 0;
  let work = 0;
  let wins = 0;
  for (let t = 0; t < tasks; t++) {
    const eps = await playTeamTask(`${prefix}-${t}`, sampleTeamTask(rng, env), g, sampler, env);
    route += eps.filter((e) => e.routeReward === 1).length;
    work += eps.filter((e) => e.workReward === 1).length;
    wins += eps.filter((e) => e.success).length;
  }
  const n = tasks * g;
  return { route: route / n, work: work / n, success: wins / n };
}

/**
 * Supervised warm start: a pretrained model's starting point instead of a random one.
 * Fits each policy on right demonstrations until its sampled rate (temperature 1)
 * reaches its target, checked every 5 steps on 64 sampled episodes, so every seed starts
 * RL in the same band of base success whatever its initial weights.
 */
export async function warmStart(job: WarmStartJob): Promise<WarmStartResult> {
  const registry = mkRegistry(job.model, job.seed);
  const sft = Object.fromEntries(POLICIES.map((id) => [id, new CreditWeightedSftTrainer(registry.get(id), { lr: job.lr })])) as Record<
    (typeof POLICIES)[number],
    CreditWeightedSftTrainer
  >;
  const rng = new SeededRng(job.seed * 7919 + 1);
  const probeRng = new SeededRng(job.seed * 7919 + 2);
  const sampler = new PolicySampler(registry, { seed: job.seed * 7919 + 3, temperature: 1, clock: () => 0 });
  let steps = 0;
  let rates: Rates = { route: 0, work: 0, success: 0 };
  let routerDone = false;
  let workerDone = false;
  try {
    while (steps < job.maxSteps && !(routerDone && workerDone)) {
      const router: WeightedExample[] = [];
      const workers: WeightedExample[] = [];
      for (let i = 0; i < 16; i++) {
        const d = demonstrations(sampleTeamTask(rng, job.env), job.env);
        router.push({ contextTokens: d.router.context, responseTokens: d.router.answer, weight: 1 });
        for (const w of d.workers) workers.push({ contextTokens: w.context, responseTokens: w.answer, weight: 1 });
      }
      if (!routerDone) await sft.router.step(router);
      if (!workerDone) await sft.worker.step(workers);
      steps++;
      if (steps % 5 === 0) {
        rates = await ratesOn(sampler, probeRng, 8, 8, job.env, 'warm');
        routerDone ||= rates.route >= job.routerAccuracy;
        workerDone ||= rates.work >= job.workSuccess;
      }
    }
    return {
      seed: job.seed,
      steps,
      routerAccuracy: rates.route,
      workSuccess: rates.work,
      success: rates.success,
      weights: { router: await valuesOf(registry.get('router')), worker: await valuesOf(registry.get('worker')) },
    };
  } finally {
    for (const t of Object.values(sft)) t.optimizer.dispose();
    for (const id of POLICIES) registry.get(id).model.dispose();
  }
}

interface StudySet extends ActiveSet {
  k: number;
}

/** The router's and the work sets of one task's G episodes, with advantages from their group. */
export function setsOf(episodes: readonly TeamEpisode[], objective: ObjectiveConfig): { router: StudySet[]; worker: StudySet[] } {
  const member = (o: TeamEpisode['router']) => ({ outputId: o.outputId, contextTokens: o.contextTokens, responseTokens: o.tokens, logpOld: o.logProbs });
  const group = (key: string, rewards: number[]) =>
    groupAdvantages(
      rewards.map((reward, i) => ({ setId: `${key}.${i}`, groupKey: key, reward, progress: 0 })),
      objective,
    );
  const ra = group(
    'route',
    episodes.map((e) => e.routeReward),
  );
  const wa = group(
    'work',
    episodes.map((e) => e.workReward),
  );
  return {
    router: episodes.map((e, i) => ({ setId: `${e.episodeId}.t0`, advantage: ra[i].advantage, members: [member(e.router)], k: 1 })),
    worker: episodes.map((e, i) => ({ setId: `${e.episodeId}.t1`, advantage: wa[i].advantage, members: e.workers.map(member), k: e.workers.length })),
  };
}

/** Std over sets of the joint log-ratio Σ_j ℓ_j at the current weights (population). */
function jointLogRatioStd(policy: Policy, sets: readonly StudySet[]): number {
  const pairs = sets.flatMap((s) => s.members.map((m) => ({ contextTokens: m.contextTokens, responseTokens: m.responseTokens })));
  const { logProbs, mask } = tokenLogProbs(policy.model, pairs);
  const lp = logProbs.arraySync();
  const mk = mask.arraySync();
  tf.dispose([logProbs, mask]);
  let row = 0;
  const l = sets.map((s) => {
    let sum = 0;
    for (const m of s.members) {
      m.logpOld.forEach((old, u) => (sum += mk[row][u] * (lp[row][u] - old)));
      row++;
    }
    return sum;
  });
  const mean = l.reduce((a, b) => a + b, 0) / l.length;
  return Math.sqrt(l.reduce((a, x) => a + (x - mean) ** 2, 0) / l.length);
}

export async function runStudy(job: RunJob, warm: WeightSet): Promise<RunResult> {
  const started = Date.now();
  const objective = resolveObjectiveConfig(STUDY_OBJECTIVES[job.objective]);
  const registry = new PolicyRegistry();
  const behaviour = new PolicyRegistry();
  for (const id of POLICIES) {
    registry.add(policyFrom(id, job.model, warm[id], 0));
    registry.assignRole(id, id);
    behaviour.add(policyFrom(id, job.model, warm[id], 0));
    behaviour.assignRole(id, id);
  }
  const sampler = new PolicySampler(behaviour, { seed: job.seed * 7919 + 5, temperature: 1, clock: () => 0 });
  const trainers = Object.fromEntries(
    POLICIES.map((id) => [
      id,
      new SrpoTrainer(registry.get(id), { objective, epochs: job.epochs, maxGradNorm: 1, schedule: { kind: 'constant', lr: job.lr } }),
    ]),
  ) as Record<(typeof POLICIES)[number], SrpoTrainer>;
  const rng = new SeededRng(job.seed * 7919 + 4);
  const curve: number[] = [];
  const routeCurve: number[] = [];
  const episodeCurve: number[] = [];
  const gradNorm: number[] = [];
  const perK: Record<string, PerK & { clipUnits: number; clipWeight: number }> = {};
  const kEntry = (k: number) => (perK[k] ??= { clipFrac: 0, gradNorms: [], logRatioStd: [], sets: 0, clipUnits: 0, clipWeight: 0 });
  let clip = 0;
  let routerClip = 0;
  try {
    for (let u = 0; u < job.updates; u++) {
      const router: StudySet[] = [];
      const worker: StudySet[] = [];
      let wins = 0;
      let routed = 0;
      let worked = 0;
      for (let t = 0; t < job.tasksPerUpdate; t++) {
        const eps = await playTeamTask(`u${u}t${t}`, sampleTeamTask(rng, job.env), job.groupSize, sampler, job.env);
        wins += eps.filter((e) => e.success).length;
        routed += eps.filter((e) => e.routeReward === 1).length;
        worked += eps.filter((e) => e.workReward === 1).length;
        const s = setsOf(eps, objective);
        router.push(...s.router);
        worker.push(...s.worker);
      }
      const episodes = job.tasksPerUpdate * job.groupSize;
      curve.push(worked / episodes);
      routeCurve.push(routed / episodes);
      episodeCurve.push(wins / episodes);
      const byK = new Map<number, StudySet[]>();
      for (const s of worker) byK.set(s.k, [...(byK.get(s.k) ?? []), s]);
      for (const [k, sets] of byK) kEntry(k).sets += sets.length;
      const probe = u % job.probeEvery === 0;
      if (probe) {
        for (const [k, sets] of byK) {
          if (sets.length >= job.probeSets) kEntry(k).gradNorms.push((await trainers.worker.evaluate(sets.slice(0, job.probeSets))).gradNorm);
        }
      }
      const w = await trainers.worker.update(worker);
      const r = job.trainRouter ? await trainers.router.update(router) : null;
      gradNorm.push(w.gradNorm);
      const frac = (d: Record<string, number>, suffix = '') => (d[`losses/clip_frac_low${suffix}`] ?? 0) + (d[`losses/clip_frac_high${suffix}`] ?? 0);
      clip += w.epochs.reduce((a, e) => a + frac(e.diagnostics), 0) / w.epochs.length;
      if (r) routerClip += r.epochs.reduce((a, e) => a + frac(e.diagnostics), 0) / r.epochs.length;
      for (const k of byK.keys()) {
        const e = kEntry(k);
        for (const ep of w.epochs) {
          e.clipUnits += frac(ep.diagnostics, `_k${k}`);
          e.clipWeight += 1;
        }
      }
      if (probe) {
        for (const [k, sets] of byK) if (sets.length >= 2) kEntry(k).logRatioStd.push(jointLogRatioStd(registry.get('worker'), sets));
      }
      if ((u + 1) % job.lag === 0) {
        for (const id of POLICIES) behaviour.replace(await copyOf(registry.get(id), job.model));
      }
    }
    for (const id of POLICIES) behaviour.replace(await copyOf(registry.get(id), job.model));
    const evalRng = new SeededRng(job.seed * 7919 + 100_003);
    const final = await ratesOn(sampler, evalRng, job.evalTasks, job.groupSize, job.env, 'eval');
    const { env: _env, model: _model, ...rest } = job;
    return {
      ...rest,
      curve,
      routeCurve,
      episodeCurve,
      final,
      finalSuccess: final.work,
      clipFrac: clip / job.updates,
      routerClipFrac: routerClip / job.updates,
      perK: Object.fromEntries(
        Object.entries(perK).map(([k, e]) => [
          k,
          { clipFrac: e.clipWeight > 0 ? e.clipUnits / e.clipWeight : 0, gradNorms: e.gradNorms, logRatioStd: e.logRatioStd, sets: e.sets },
        ]),
      ),
      gradNorm,
      seconds: (Date.now() - started) / 1000,
    };
  } finally {
    for (const t of Object.values(trainers)) t.dispose();
    for (const id of POLICIES) {
      registry.get(id).model.dispose();
      behaviour.get(id).model.dispose();
    }
  }
}
