import { createHash } from 'crypto';
import type { AgentEvent, AgentOutputInit, EpisodeOutcomeInit, TransitionInit } from '@srpo/events';
import { groupKeyOf, transitionIdOf, type EpisodeTrace, type SampledOutput, type StepTrace, type TaskRollouts } from './rollout';
import { IDENTITY_BINDING, type SymbolBinding } from './symbol-binding';

/** Name and version of the verifiers, recorded with every outcome. */
export const VERIFIER_VERSION = 1;

export function verifierOf(workflow: string): string {
  return `srpo-agents/${workflow}@${VERIFIER_VERSION}`;
}

/** A short digest of the context tokens: equal prompts share a `contextRef`. */
export function contextRefOf(tokens: readonly number[]): string {
  return `ctx:${createHash('sha256').update(tokens.join(',')).digest('hex').slice(0, 16)}`;
}

/** The event of one output, in model ids (`binding` maps the workflow's symbols). */
export function outputEvent(o: SampledOutput, episodeId: string, binding: SymbolBinding = IDENTITY_BINDING): AgentOutputInit {
  const contextTokenIds = binding.toModel(o.contextTokens);
  const responseTokenIds = binding.toModel(o.tokens);
  return {
    outputId: o.outputId,
    episodeId,
    step: o.step,
    agentId: o.agentId,
    role: o.role,
    policyId: o.policyId,
    policyVersion: o.policyVersion,
    contextRef: contextRefOf(contextTokenIds),
    contextTokenIds,
    responseTokenIds,
    behaviourLogProbs: [...o.logProbs],
    lossMask: o.tokens.map(() => true),
    sampling: { temperature: o.temperature, topK: 0, maxNewTokens: o.maxNewTokens },
    startedAtMs: o.startedAtMs,
    eventTimeMs: o.finishedAtMs,
  };
}

export function transitionEvent(ep: EpisodeTrace, st: StepTrace, taskInstanceId: string, groupSize: number, eventTimeMs: number): TransitionInit {
  return {
    transitionId: transitionIdOf(ep.episodeId, st.step),
    episodeId: ep.episodeId,
    step: st.step,
    preStateId: st.preStateId,
    taskId: ep.taskId,
    position: st.position,
    consumedOutputIds: st.consumed.map((o) => o.outputId),
    expectedCardinality: st.consumed.length,
    workflowKind: ep.kind,
    routing: st.routing,
    // Declared on purpose: the G rollouts of one task at one position form one group, ready by size.
    groupKey: groupKeyOf(taskInstanceId, st.position),
    expectedGroupSize: groupSize,
    observationDigest: st.observationDigest,
    reward: st.reward,
    done: st.done,
    eventTimeMs,
  };
}

export function outcomeEvent(ep: EpisodeTrace, eventTimeMs: number): EpisodeOutcomeInit {
  return {
    episodeId: ep.episodeId,
    taskId: ep.taskId,
    outcomeReward: ep.outcome.reward,
    success: ep.outcome.success,
    verifier: verifierOf(ep.workflow),
    verifierDetails: { ...ep.outcome.details },
    observationDigests: [...ep.outcome.observationDigests],
    turns: ep.outcome.turns,
    eventTimeMs,
  };
}

/**
 * The events of G rollouts, in two batches. The first holds every output and
 * transition; the second the outcomes, sent only after the first is
 * acknowledged. The materializer closes an episode once it has its outcome
 * and no pending transition, and it reads the three topics independently, so
 * an outcome that overtook a later transition would close the episode early
 * and get that transition dead-lettered.
 */
export function eventsOf(r: TaskRollouts, eventTimeMs: number, binding: SymbolBinding = IDENTITY_BINDING): { body: AgentEvent[]; outcomes: AgentEvent[] } {
  const body: AgentEvent[] = [];
  const outcomes: AgentEvent[] = [];
  for (const ep of r.episodes) {
    for (const st of ep.steps) {
      for (const o of st.consumed) body.push({ type: 'AgentOutput', value: outputEvent(o, ep.episodeId, binding) });
      body.push({
        type: 'Transition',
        value: transitionEvent(ep, st, r.taskInstanceId, r.groupSize, Math.max(eventTimeMs, ...st.consumed.map((o) => o.finishedAtMs))),
      });
    }
    outcomes.push({ type: 'EpisodeOutcome', value: outcomeEvent(ep, eventTimeMs) });
  }
  return { body, outcomes };
}

/** Sets each policy receives from these rollouts (flow control counts them). */
export function setsPerPolicy(r: TaskRollouts): Map<string, number> {
  const out = new Map<string, number>();
  for (const ep of r.episodes) for (const st of ep.steps) out.set(st.consumed[0].policyId, (out.get(st.consumed[0].policyId) ?? 0) + 1);
  return out;
}
