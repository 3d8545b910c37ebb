import { ValidationError } from '@srpo/core';
import { creditsForActions, creditWeights, prefixCredits, type CreditMode } from './credits';
import type { WeightedExample } from './credit-weighted-sft';
import type { NllCurveScorer } from './pmi-scorer';
import { successfulOnly, type InferredInstruction, type TaskInferrer } from './task-inferrer';
import { exclusionOf, type ExclusionReason, type Trajectory, type TrajectoryAction } from './trajectory';

export interface BrewOptions {
  creditMode: CreditMode;
  /** Trajectories whose failed share `#failed / #actions` exceeds this are not used (default 0.5). */
  maxFailedShare: number;
}

export const DEFAULT_MAX_FAILED_SHARE = 0.5;

/** One action with its PMI credit. Failed actions: prefixIndex, nllBefore and nllAfter null, credit and weight 0. */
export interface CreditedAction {
  action: TrajectoryAction;
  /** k, 1-based among the successful actions. */
  prefixIndex: number | null;
  nllBefore: number | null;
  nllAfter: number | null;
  credit: number;
  /** Clipped, max-normalised credit in [0, 1]. */
  weight: number;
}

/** What AgentBrew made of one trajectory. */
export interface BrewedTrajectory {
  trajectory: Trajectory;
  exclusion: ExclusionReason | null;
  instruction: InferredInstruction | null;
  /** `[L_{−1}, L_1, …, L_K]` (null when excluded). */
  nll: number[] | null;
  /** Every action, in order (empty when excluded). */
  actions: CreditedAction[];
}

/**
 * Retrospective task inference and PMI credit for one trajectory: drop failed
 * actions, exclude unusable trajectories, infer the instruction from the
 * successful actions, score `L_{−1}..L_K` and turn the curve into credits and
 * weights.
 */
export async function brewTrajectory(t: Trajectory, inferrer: TaskInferrer, scorer: NllCurveScorer, options: BrewOptions): Promise<BrewedTrajectory> {
  const flags = t.actions.map((a) => a.successful);
  const exclusion = exclusionOf(flags, options.maxFailedShare);
  if (exclusion) return { trajectory: t, exclusion, instruction: null, nll: null, actions: [] };
  const view = successfulOnly(t);
  const instruction = await inferrer.infer(view);
  if (!instruction || instruction.tokens.length === 0) return { trajectory: t, exclusion: 'no-instruction', instruction: null, nll: null, actions: [] };
  const nll = await scorer.nllCurve(
    instruction.tokens,
    view.actions.map((a) => a.responseTokens),
  );
  const { credit, baseline } = prefixCredits(options.creditMode, nll);
  const all = creditsForActions(flags, credit);
  const weights = creditWeights(all);
  let k = 0;
  const actions = t.actions.map((action, i): CreditedAction => {
    if (!action.successful) return { action, prefixIndex: null, nllBefore: null, nllAfter: null, credit: 0, weight: 0 };
    k++;
    return { action, prefixIndex: k, nllBefore: baseline[k - 1], nllAfter: nll[k], credit: all[i], weight: weights[i] };
  });
  return { trajectory: t, exclusion: null, instruction, nll, actions };
}

export type Weighting = 'credit' | 'uniform';

/**
 * Supervised examples `(trainingContext(instruction, action) → action tokens)`
 * of the usable trajectories. `credit` uses the PMI weights; `uniform` gives
 * every successful action weight 1 (the same inferred tasks, no credit).
 * Failed actions are never trained on; `trains` picks the actions of the
 * policy being trained (the others still count for inference and credit).
 */
export function trainingExamples(
  brewed: readonly BrewedTrajectory[],
  inferrer: TaskInferrer,
  weighting: Weighting,
  trains: (action: TrajectoryAction) => boolean = () => true,
): WeightedExample[] {
  if (weighting !== 'credit' && weighting !== 'uniform') throw new ValidationError('weighting', `must be credit or uniform, got ${String(weighting)}`);
  return brewed.flatMap((b) =>
    b.exclusion || !b.instruction
      ? []
      : b.actions
          .filter((c) => c.action.successful && trains(c.action))
          .map((c) => ({
            contextTokens: inferrer.trainingContext(b.instruction as InferredInstruction, c.action),
            responseTokens: [...c.action.responseTokens],
            weight: weighting === 'credit' ? c.weight : 1,
          })),
  );
}
