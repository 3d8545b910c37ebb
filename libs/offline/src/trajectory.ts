import { ValidationError } from '@srpo/core';
import type { AgentOutput, EpisodeOutcome, KafkaCoordinates, Transition } from '@srpo/events';

/** One action of a trajectory: an agent output with the step it was consumed at. */
export interface TrajectoryAction {
  outputId: string;
  step: number;
  role: string;
  agentId: string;
  policyId: string;
  contextTokens: number[];
  responseTokens: number[];
  /** Whether the step that consumed the output succeeded ({@link stepSucceeded}). */
  successful: boolean;
  /** The AgentOutput's coordinates. */
  source: KafkaCoordinates;
  /** The consuming Transition's coordinates. */
  transitionSource: KafkaCoordinates;
}

/** An episode as the raw log holds it: outputs, transitions and its outcome. */
export interface Trajectory {
  episodeId: string;
  /** The task the episode was played for (never used to infer the instruction). */
  taskId: string;
  /** Transition positions in step order (`solve`, `check`, ...). */
  positions: string[];
  /** Every action, ordered by step, then by the transition's `consumedOutputIds` order. */
  actions: TrajectoryAction[];
  outcome: { success: boolean; reward: number; source: KafkaCoordinates };
  /** Every raw event of the episode. */
  sources: KafkaCoordinates[];
}

export interface Located<T> {
  value: T;
  source: KafkaCoordinates;
}

export interface RawEpisodeEvents {
  outputs: Located<AgentOutput>[];
  transitions: Located<Transition>[];
  outcomes: Located<EpisodeOutcome>[];
}

export interface StepSuccessRule {
  /** A step whose reward is at most this failed (default 0: it achieved nothing, e.g. a malformed action). */
  failedRewardAtMost: number;
  /**
   * Per workflow position, a threshold that replaces the default: where a
   * well-formed but wrong action still earns a format bonus (the demo's checker),
   * the bonus marks a failure, since relabelling the task cannot make it right.
   */
  byPosition?: Readonly<Record<string, number>>;
}

export const DEFAULT_STEP_SUCCESS: StepSuccessRule = { failedRewardAtMost: 0 };

/**
 * Whether a step succeeded: its immediate reward, or the episode's outcome
 * reward when the step has none, is above `failedRewardAtMost`.
 */
export function stepSucceeded(stepReward: number | null, outcomeReward: number, rule: StepSuccessRule = DEFAULT_STEP_SUCCESS, position?: string): boolean {
  const limit = position !== undefined && rule.byPosition?.[position] !== undefined ? rule.byPosition[position] : rule.failedRewardAtMost;
  return (stepReward ?? outcomeReward) > limit;
}

export type ExclusionReason = 'incomplete-episode' | 'no-successful-step' | 'too-many-failed-steps' | 'no-instruction';

/**
 * Whether a trajectory may be used: it needs at least one successful action,
 * and its failed share `#failed / #actions` must not exceed `maxFailedShare`
 * (a share equal to the limit is still used).
 */
export function exclusionOf(successful: readonly boolean[], maxFailedShare: number): ExclusionReason | null {
  if (!(maxFailedShare >= 0 && maxFailedShare <= 1)) throw new ValidationError('maxFailedShare', `must be in [0, 1], got ${maxFailedShare}`);
  const ok = successful.filter(Boolean).length;
  if (ok === 0) return 'no-successful-step';
  if ((successful.length - ok) / successful.length > maxFailedShare) return 'too-many-failed-steps';
  return null;
}

export interface AssembledTrajectories {
  trajectories: Trajectory[];
  /** Episodes seen in the range whose events are not all there (cut by the range's edges). */
  incomplete: { episodeId: string; taskId: string; sources: KafkaCoordinates[]; why: string }[];
}

/**
 * Joins the raw events of a range into trajectories. An episode is complete
 * when its outcome is present and every output its transitions consumed was
 * read; duplicates (producer retries) are collapsed on their ids.
 */
export function assembleTrajectories(events: RawEpisodeEvents, rule: StepSuccessRule = DEFAULT_STEP_SUCCESS): AssembledTrajectories {
  const byEpisode = new Map<
    string,
    { outputs: Map<string, Located<AgentOutput>>; transitions: Map<string, Located<Transition>>; outcome?: Located<EpisodeOutcome> }
  >();
  const entry = (id: string) => {
    let e = byEpisode.get(id);
    if (!e) byEpisode.set(id, (e = { outputs: new Map(), transitions: new Map() }));
    return e;
  };
  for (const o of events.outputs) if (!entry(o.value.episodeId).outputs.has(o.value.outputId)) entry(o.value.episodeId).outputs.set(o.value.outputId, o);
  for (const t of events.transitions)
    if (!entry(t.value.episodeId).transitions.has(t.value.transitionId)) entry(t.value.episodeId).transitions.set(t.value.transitionId, t);
  for (const o of events.outcomes) entry(o.value.episodeId).outcome ??= o;

  const out: AssembledTrajectories = { trajectories: [], incomplete: [] };
  for (const [episodeId, e] of [...byEpisode.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
    const sources = [
      ...[...e.outputs.values()].map((o) => o.source),
      ...[...e.transitions.values()].map((t) => t.source),
      ...(e.outcome ? [e.outcome.source] : []),
    ];
    const taskId = e.outcome?.value.taskId ?? [...e.transitions.values()][0]?.value.taskId ?? 'unknown';
    if (!e.outcome) {
      out.incomplete.push({ episodeId, taskId, sources, why: 'no EpisodeOutcome in range' });
      continue;
    }
    const outcome = e.outcome;
    const transitions = [...e.transitions.values()].sort((a, b) => a.value.step - b.value.step);
    if (transitions.length === 0 || transitions.length < outcome.value.turns) {
      out.incomplete.push({ episodeId, taskId, sources, why: `${transitions.length} of ${outcome.value.turns} transitions in range` });
      continue;
    }
    const missing = transitions.flatMap((t) => t.value.consumedOutputIds.filter((id) => !e.outputs.has(id)));
    if (missing.length > 0) {
      out.incomplete.push({ episodeId, taskId, sources, why: `outputs not in range: ${missing.join(', ')}` });
      continue;
    }
    // Sealed content (docs/erasure.md) needs the store's keys, which offline training does not open: not trained on as empty tokens.
    const sealed = transitions.flatMap((t) => t.value.consumedOutputIds.filter((id) => e.outputs.get(id)?.value.sealed));
    if (sealed.length > 0) {
      out.incomplete.push({ episodeId, taskId, sources, why: `sealed outputs (offline training reads content in the clear only): ${sealed.join(', ')}` });
      continue;
    }
    const actions: TrajectoryAction[] = transitions.flatMap((t) => {
      const successful = stepSucceeded(t.value.reward, outcome.value.outcomeReward, rule, t.value.position);
      return t.value.consumedOutputIds.map((id): TrajectoryAction => {
        const o = e.outputs.get(id) as Located<AgentOutput>;
        return {
          outputId: id,
          step: t.value.step,
          role: o.value.role,
          agentId: o.value.agentId,
          policyId: o.value.policyId,
          contextTokens: [...o.value.contextTokenIds],
          responseTokens: [...o.value.responseTokenIds],
          successful,
          source: o.source,
          transitionSource: t.source,
        };
      });
    });
    out.trajectories.push({
      episodeId,
      taskId: outcome.value.taskId,
      positions: transitions.map((t) => t.value.position),
      actions,
      outcome: { success: outcome.value.success, reward: outcome.value.outcomeReward, source: outcome.source },
      sources,
    });
  }
  return out;
}
