import { errorMessage, ValidationError } from '@srpo/core';
import { openOutput, type AgentOutput, type ContentKeySource, type EpisodeOutcome, type KafkaCoordinates, type Transition } from '@srpo/events';

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

/**
 * Why a complete episode with sealed outputs (docs/erasure.md) was left out:
 * - `erased-content`: the store no longer has the content key of one of its outputs (`srpo erase`);
 * - `unopenable-content`: a key is there but does not open an output (changed bytes, another key, an unknown scheme);
 * - `sealed-content`: no content keys were given to open it with.
 */
export type UnopenedReason = 'erased-content' | 'unopenable-content' | 'sealed-content';

/** A complete episode left out because a sealed output it consumed could not be opened. */
export interface UnopenedEpisode {
  episodeId: string;
  taskId: string;
  sources: KafkaCoordinates[];
  reason: UnopenedReason;
  /** The outputs of that reason (ids only). */
  outputIds: string[];
  /** Ids and key ids only, never content or a key. */
  why: string;
}

export interface AssembledTrajectories {
  trajectories: Trajectory[];
  /** Episodes seen in the range whose events are not all there (cut by the range's edges). */
  incomplete: { episodeId: string; taskId: string; sources: KafkaCoordinates[]; why: string }[];
  /** Complete episodes whose sealed content could not be opened: erased, changed, or no keys. Never trained on as empty tokens. */
  unopened: UnopenedEpisode[];
}

/** Content keys by key id, as fetched for a range ({@link fetchContentKeys}); a key absent from the map is erased. */
export type ContentKeys = ReadonlyMap<string, Buffer>;

/**
 * The content keys of every sealed output of a range, in one query (the store splits long id
 * lists). Undefined without a source: sealed outputs are then left out as `sealed-content`.
 */
export async function fetchContentKeys(source: ContentKeySource | undefined, outputs: readonly Located<AgentOutput>[]): Promise<ContentKeys | undefined> {
  if (source === undefined) return undefined;
  const ids = [...new Set(outputs.flatMap((o) => (o.value.sealed === null ? [] : [o.value.sealed.keyId])))];
  return ids.length === 0 ? new Map() : source.keysById(ids);
}

/**
 * Joins the raw events of a range into trajectories. An episode is complete
 * when its outcome is present and every output its transitions consumed was
 * read; duplicates (producer retries) are collapsed on their ids. Sealed
 * outputs are opened with `keys` ({@link fetchContentKeys}); a complete episode
 * with one that does not open is left out as {@link UnopenedEpisode}.
 */
export function assembleTrajectories(events: RawEpisodeEvents, rule: StepSuccessRule = DEFAULT_STEP_SUCCESS, keys?: ContentKeys): AssembledTrajectories {
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

  const out: AssembledTrajectories = { trajectories: [], incomplete: [], unopened: [] };
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
    const opened = openConsumed(
      transitions.flatMap((t) => t.value.consumedOutputIds),
      e.outputs,
      keys,
    );
    if ('reason' in opened) {
      out.unopened.push({ episodeId, taskId, sources, ...opened });
      continue;
    }
    const actions: TrajectoryAction[] = transitions.flatMap((t) => {
      const successful = stepSucceeded(t.value.reward, outcome.value.outcomeReward, rule, t.value.position);
      return t.value.consumedOutputIds.map((id): TrajectoryAction => {
        const o = opened.get(id) as Located<AgentOutput>;
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

/**
 * The consumed outputs with their sealed content opened, or why the episode cannot be read. An
 * erased output outranks a changed one: the episode is reported as erased.
 */
function openConsumed(
  ids: readonly string[],
  outputs: ReadonlyMap<string, Located<AgentOutput>>,
  keys: ContentKeys | undefined,
): Map<string, Located<AgentOutput>> | Pick<UnopenedEpisode, 'reason' | 'outputIds' | 'why'> {
  const opened = new Map<string, Located<AgentOutput>>();
  const failed: Record<UnopenedReason, string[]> = { 'erased-content': [], 'unopenable-content': [], 'sealed-content': [] };
  const problems: string[] = [];
  for (const id of ids) {
    const o = outputs.get(id) as Located<AgentOutput>;
    const sealed = o.value.sealed;
    if (sealed === null) opened.set(id, o);
    else if (keys === undefined) failed['sealed-content'].push(id);
    else if (!keys.has(sealed.keyId)) failed['erased-content'].push(id);
    else {
      try {
        opened.set(id, { value: openOutput(o.value, keys.get(sealed.keyId)), source: o.source });
      } catch (err) {
        // SealOpenError: its message names the output and key ids only.
        failed['unopenable-content'].push(id);
        problems.push(errorMessage(err));
      }
    }
  }
  const erased = failed['erased-content'];
  if (erased.length > 0) return { reason: 'erased-content', outputIds: erased, why: `content keys erased of outputs ${erased.join(', ')}` };
  const unopenable = failed['unopenable-content'];
  if (unopenable.length > 0) return { reason: 'unopenable-content', outputIds: unopenable, why: problems.join('; ') };
  const sealed = failed['sealed-content'];
  if (sealed.length > 0)
    return { reason: 'sealed-content', outputIds: sealed, why: `sealed outputs and no content keys to open them with: ${sealed.join(', ')}` };
  return opened;
}
