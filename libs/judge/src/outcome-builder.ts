import { completeEpisodeOutcome, validateEpisodeOutcome, type EpisodeOutcome } from '@srpo/events';
import type { RewardInput, Scorer, Verdict } from './judge-input';

export interface OutcomeContext {
  /** Transitions in the episode (episode mode: the done transition's step + 1; output mode: the output's step + 1). */
  turns: number;
  /** When the verdict was decided (never before the judged event's time): an outcome's event time is its decision's (docs/rewards.md). */
  eventTimeMs: number;
  /** `success` is `rawScore >= successThreshold`. */
  successThreshold: number;
  /** `EpisodeOutcome.rewardSource`: the kind of source (`judge`, `program`), which labels the materializer's late-outcome metrics and picks a reward window. */
  rewardSource: string;
}

/** Judged output ids recorded in the details; more are counted, not listed. */
const MAX_LISTED_OUTPUTS = 16;

/**
 * The EpisodeOutcome of a judged output or episode. `verifier` names the scorer
 * (`judge:<model>`); `verifierDetails` carry what an audit needs to name the judge: its model
 * and reported version, the rubric's file name and SHA-256, the endpoint's host (never a key),
 * the raw score, the mode and the judged output ids. Validated as the SDK validates.
 */
export function buildOutcome(scorer: Scorer, verdict: Verdict, input: RewardInput, ctx: OutcomeContext): EpisodeOutcome {
  const ids = input.outputs.map((o) => o.outputId);
  const listed = ids.slice(0, MAX_LISTED_OUTPUTS).join(',') + (ids.length > MAX_LISTED_OUTPUTS ? `,+${ids.length - MAX_LISTED_OUTPUTS}` : '');
  const outcome = completeEpisodeOutcome({
    episodeId: input.episodeId,
    taskId: input.taskId,
    outcomeReward: verdict.reward,
    success: verdict.rawScore >= ctx.successThreshold,
    verifier: scorer.verifier,
    verifierDetails: {
      ...scorer.details,
      ...verdict.details,
      rawScore: String(verdict.rawScore),
      mode: input.mode,
      judgedOutputs: listed,
      policyVersions: [...new Set(input.outputs.map((o) => `${o.policyId}@v${o.policyVersion}`))].join(','),
    },
    turns: ctx.turns,
    eventTimeMs: ctx.eventTimeMs,
    rewardSource: ctx.rewardSource,
  });
  validateEpisodeOutcome(outcome);
  return outcome;
}
