/**
 * In-process training loop for the benchmark (and for tuning the tasks): the
 * agents' environments, workflows and sampler, the materializer's advantage
 * rule (`groupAdvantages` from @srpo/srpo over groups of declared size) and the
 * learner's SRPO step (`SrpoTrainer` from @srpo/policy), without Kafka.
 *
 * Mini-batches are formed as the learner forms them: the shortest run of
 * consecutive ready groups of one policy holding at least `setsPerUpdate` sets.
 */
import { isTransformerModel, Policy, PolicyRegistry, SrpoTrainer, TransformerModel, type ActiveSet, type TransformerConfig } from '@srpo/policy';
import { groupAdvantages, progressCoverage, resolveObjectiveConfig, type ObjectiveConfig } from '@srpo/srpo';
import {
  createWorkflow,
  groupKeyOf,
  PolicySampler,
  WORKFLOW_ROLES,
  type ArithmeticSettings,
  type Role,
  type SearchSettings,
  type TaskRollouts,
  type WorkflowName,
} from '@srpo/workflows';

export interface InProcessOptions {
  workflows: WorkflowName[];
  /** role → policy id; every role the workflows use must be mapped. */
  rolePolicies: Partial<Record<Role, string>>;
  model: TransformerConfig;
  seed: number;
  objective: Partial<ObjectiveConfig>;
  lr: number;
  maxGradNorm: number;
  groupSize: number;
  setsPerUpdate: number;
  /** Stop when every policy has taken this many updates. */
  updates: number;
  temperature: number;
  /**
   * Versions the sampling weights may lag behind the trained ones (0: sample with
   * the trained weights, fully on-policy). The agents on Kafka run ahead of the
   * learners by a few updates (SRPO_AGENTS_MAX_AHEAD), so their behaviour
   * log-probs come from slightly older weights; a lag of L re-syncs the sampling
   * copy every L updates, which is when ratios leave 1 and the clips matter.
   */
  behaviourLag?: number;
  arithmetic: ArithmeticSettings;
  search: SearchSettings;
  /** Called after each task's rollouts and after each update. */
  onTask?: (rollouts: TaskRollouts, versions: Record<string, number>) => void;
  onUpdate?: (policyId: string, record: UpdateRecord) => void;
}

export interface UpdateRecord {
  version: number;
  loss: number;
  gradNorm: number;
  clipFrac: number;
  sets: number;
}

export interface InProcessResult {
  updates: Record<string, UpdateRecord[]>;
  /** Per workflow: success (0/1) of every episode in play order. */
  successes: Record<string, number[]>;
  registry: PolicyRegistry;
  /** The sampling copies (the same registry when `behaviourLag` is 0). */
  behaviour: PolicyRegistry;
  sampler: PolicySampler;
  seconds: number;
}

interface QueuedSet extends ActiveSet {
  groupKey: string;
}

/** Builds the sets of a task's rollouts, grouped by (policy, position) exactly as the materializer groups them. */
export function advantageGroupsOf(r: TaskRollouts, objective: ObjectiveConfig): Map<string, QueuedSet[]> {
  const byGroup = new Map<
    string,
    { policyId: string; sets: { setId: string; groupKey: string; reward: number; progress: number; members: ActiveSet['members'] }[] }
  >();
  for (const ep of r.episodes) {
    const progress = progressCoverage(ep.outcome.observationDigests, ep.outcome.turns);
    for (const st of ep.steps) {
      const policyId = st.consumed[0].policyId;
      const groupKey = `${policyId}|${groupKeyOf(r.taskInstanceId, st.position)}`;
      const entry = byGroup.get(groupKey) ?? { policyId, sets: [] };
      entry.sets.push({
        setId: `${ep.episodeId}.t${st.step}`,
        groupKey,
        reward: st.reward ?? ep.outcome.reward,
        progress,
        members: st.consumed.map((o) => ({ outputId: o.outputId, contextTokens: o.contextTokens, responseTokens: o.tokens, logpOld: o.logProbs })),
      });
      byGroup.set(groupKey, entry);
    }
  }
  const out = new Map<string, QueuedSet[]>();
  for (const [, { policyId, sets }] of byGroup) {
    const adv = groupAdvantages(
      sets.map((s) => ({ setId: s.setId, groupKey: s.groupKey, reward: s.reward, progress: s.progress })),
      objective,
    );
    const list = out.get(policyId) ?? [];
    sets.forEach((s, i) => list.push({ setId: s.setId, groupKey: s.groupKey, advantage: adv[i].advantage, members: s.members }));
    out.set(policyId, list);
  }
  return out;
}

export async function runInProcess(o: InProcessOptions): Promise<InProcessResult> {
  const started = Date.now();
  const objective = resolveObjectiveConfig(o.objective);
  const registry = new PolicyRegistry();
  // Only the roles the workflows use: a policy nobody samples with would never reach its update budget.
  const used = new Set(o.workflows.flatMap((w) => WORKFLOW_ROLES[w]));
  const rolePolicies = Object.entries(o.rolePolicies).filter(([role]) => used.has(role as Role)) as [Role, string][];
  const policyIds = [...new Set(rolePolicies.map(([, id]) => id))].sort();
  policyIds.forEach((id, i) => registry.create(id, o.model, o.seed * 1000 + i));
  for (const [role, id] of rolePolicies) registry.assignRole(role, id);
  const lag = o.behaviourLag ?? 0;
  const behaviour = lag > 0 ? new PolicyRegistry() : registry;
  if (lag > 0) {
    for (const id of policyIds) behaviour.add(await copyOf(registry.get(id)));
    for (const [role, id] of rolePolicies) behaviour.assignRole(role, id);
  }
  const sampler = new PolicySampler(behaviour, { seed: o.seed + 17, temperature: o.temperature });
  const trainers = new Map(
    policyIds.map((id) => [
      id,
      new SrpoTrainer(registry.get(id), { objective, temperature: o.temperature, maxGradNorm: o.maxGradNorm, schedule: { kind: 'constant', lr: o.lr } }),
    ]),
  );
  const workflows = o.workflows.map((w) => createWorkflow(w, { arithmetic: o.arithmetic, search: o.search }, o.seed));
  const queues = new Map<string, QueuedSet[][]>(policyIds.map((id) => [id, []]));
  const updates: Record<string, UpdateRecord[]> = Object.fromEntries(policyIds.map((id) => [id, []]));
  const successes: Record<string, number[]> = Object.fromEntries(o.workflows.map((w) => [w, []]));
  let task = 0;
  const done = () => policyIds.every((id) => updates[id].length >= o.updates);
  while (!done()) {
    const wf = workflows[task % workflows.length];
    const rollouts = await wf.play(`${wf.name}-${task}`, o.groupSize, sampler);
    task++;
    for (const ep of rollouts.episodes) successes[wf.name].push(ep.outcome.success ? 1 : 0);
    o.onTask?.(rollouts, Object.fromEntries(policyIds.map((id) => [id, registry.get(id).version])));
    for (const [policyId, sets] of advantageGroupsOf(rollouts, objective)) {
      // Each position is its own group; keep group boundaries for batching.
      const byKey = new Map<string, QueuedSet[]>();
      for (const s of sets) byKey.set(s.groupKey, [...(byKey.get(s.groupKey) ?? []), s]);
      (queues.get(policyId) as QueuedSet[][]).push(...byKey.values());
    }
    for (const id of policyIds) {
      const q = queues.get(id) as QueuedSet[][];
      if (updates[id].length >= o.updates) {
        q.length = 0;
        continue;
      }
      let count = 0;
      let take = 0;
      while (take < q.length && count < o.setsPerUpdate) count += q[take++].length;
      if (count < o.setsPerUpdate) continue;
      const batch = q.splice(0, take).flat();
      const r = await (trainers.get(id) as SrpoTrainer).update(batch);
      const rec: UpdateRecord = {
        version: r.policyVersion,
        loss: r.loss,
        gradNorm: r.gradNorm,
        clipFrac: (r.diagnostics['losses/clip_frac_low'] ?? 0) + (r.diagnostics['losses/clip_frac_high'] ?? 0),
        sets: batch.length,
      };
      updates[id].push(rec);
      o.onUpdate?.(id, rec);
      if (lag > 0 && registry.get(id).version - behaviour.get(id).version >= lag) behaviour.replace(await copyOf(registry.get(id)));
    }
  }
  for (const t of trainers.values()) t.dispose();
  if (lag > 0) {
    // Evaluation after training samples with the final weights.
    for (const id of policyIds) behaviour.replace(await copyOf(registry.get(id)));
  }
  return { updates, successes, registry, behaviour, sampler, seconds: (Date.now() - started) / 1000 };
}

/** A separate copy of a policy's current weights, at its version (what an agent loads from a checkpoint). */
async function copyOf(p: Policy): Promise<Policy> {
  const names = p.model.weightNames();
  const values = await Promise.all(names.map((n) => p.model.weight(n).data() as Promise<Float32Array>));
  const { model } = p;
  if (!isTransformerModel(model)) throw new Error(`policy ${p.id}: this bench copies the project's transformer only`);
  return new Policy(p.id, TransformerModel.fromValues(model.config, new Map(names.map((n, i) => [n, values[i]]))), p.version);
}
