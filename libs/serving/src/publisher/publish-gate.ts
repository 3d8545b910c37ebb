import type { HeldOutEvaluator, HeldOutResult } from './held-out-evaluator';
import { gateVerdict, type GateRule } from './gate-rule';
import type { PublishDecision } from './publish-records';

/** The publisher's optional gate: a candidate reaches the gateways only if it is not worse than the serving version by more than `margin`. */
export interface PublishGateOptions {
  evaluator: HeldOutEvaluator;
  /** Largest drop in held-out success rate accepted, in [0, 1]. */
  margin: number;
  /** `point`: p̂_candidate − p̂_serving ≥ −margin; `lower`: the 95 % interval's lower bound ≥ −margin ({@link gateVerdict}). */
  rule: GateRule;
  /** The server the held-out items are sent to (it holds both versions); default the first server. */
  server?: string;
}

/** A served version, as the gate sees it. */
export interface GateSide {
  version: number;
  name: string;
}

/**
 * Scores the candidate and the serving version with the same evaluator on the same server and
 * returns the decision record (accepted or refused, with the figures). The serving version's
 * score comes from `cache` when it was scored before with this evaluator on this server (greedy
 * decoding on the same items gives the same replies).
 */
export async function judgeCandidate(
  gate: PublishGateOptions,
  server: string,
  policyId: string,
  candidate: GateSide,
  serving: GateSide,
  cache: Map<string, HeldOutResult>,
  signal?: AbortSignal,
): Promise<PublishDecision> {
  const key = `${server}\n${serving.name}\n${gate.evaluator.description}`;
  const servingResult = cache.get(key) ?? (await gate.evaluator.evaluate(server, serving.name, { signal }));
  cache.set(key, servingResult);
  const candidateResult = await gate.evaluator.evaluate(server, candidate.name, { signal });
  const v = gateVerdict(candidateResult, servingResult, gate.margin, gate.rule);
  const pct = (x: number) => `${(100 * x).toFixed(1)} %`;
  return {
    at: new Date().toISOString(),
    policyId,
    version: candidate.version,
    model: candidate.name,
    decision: v.accepted ? 'accepted' : 'refused',
    reason:
      `held-out success ${candidateResult.successes}/${candidateResult.trials} (${pct(v.candidateRate)}) vs ${servingResult.successes}/${servingResult.trials} ` +
      `(${pct(v.servingRate)}) for ${serving.name}: difference ${pct(v.difference)}, 95 % interval [${pct(v.interval[0])}, ${pct(v.interval[1])}], ` +
      `${v.accepted ? 'within' : 'beyond'} the margin ${pct(gate.margin)} (rule ${gate.rule})`,
    serving: { version: serving.version, model: serving.name },
    candidateResult: { successes: candidateResult.successes, trials: candidateResult.trials },
    servingResult: { successes: servingResult.successes, trials: servingResult.trials },
    difference: v.difference,
    interval: v.interval,
    margin: gate.margin,
    rule: gate.rule,
    evaluator: gate.evaluator.description,
    server,
  };
}
