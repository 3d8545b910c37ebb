import { ErrorCode, SrpoError } from '@srpo/core';
import { ActiveSet, SetMember, Transition } from '@srpo/events';
import { progressCoverage } from '@srpo/srpo';
import { StoredEpisode, StoredOutput, StoredTransition } from './active-set-state';

/**
 * The ActiveSet event of a settled transition: its members in `consumedOutputIds` order,
 * its reward (the transition's own, or else the episode outcome's) and progress. A set
 * that is not COMPLETE carries no reward.
 */
export function activeSetOf(
  st: StoredTransition,
  ep: StoredEpisode,
  present: StoredOutput[],
  status: ActiveSet['status'],
  reason: string | null,
  missing: string[],
): ActiveSet {
  const t = st.transition;
  const members = present.map(memberOf);
  const policyId = members[0]?.policyId ?? 'unknown';
  const immediate = t.reward !== null;
  const reward = immediate ? (t.reward as number) : (ep.outcome?.outcomeReward ?? 0);
  const digests = ep.outcome && ep.outcome.observationDigests.length > 0 ? ep.outcome.observationDigests : ep.digests;
  const turns = ep.outcome ? ep.outcome.turns : ep.transitionIds.length;
  // The set exists from the moment its last input arrived.
  const eventTimes = [t.eventTimeMs, ...present.map((o) => o.eventTimeMs), ...(immediate || !ep.outcome ? [] : [ep.outcome.eventTimeMs])];
  return {
    setId: t.transitionId,
    episodeId: t.episodeId,
    taskId: t.taskId,
    step: t.step,
    position: t.position,
    workflowKind: t.workflowKind,
    groupKey: groupKeyOf(t, policyId),
    expectedGroupSize: t.expectedGroupSize,
    policyId,
    status,
    invalidReason: reason,
    missingOutputIds: missing,
    members,
    reward: status === 'COMPLETE' ? reward : 0,
    rewardSource: status !== 'COMPLETE' ? 'NONE' : immediate ? 'IMMEDIATE' : 'OUTCOME',
    success: ep.outcome ? ep.outcome.success : null,
    progress: turns > 0 ? progressCoverage(digests, turns) : null,
    transitionSource: st.source,
    outcomeSource: !immediate && ep.outcomeSource ? ep.outcomeSource : null,
    eventTimeMs: Math.max(...eventTimes),
    correction: false,
    subjectIds: subjectsOf([...present.map((o) => o.subjectId), t.subjectId, immediate ? null : ep.outcome?.subjectId]),
  };
}

/**
 * The distinct data subjects among a set's inputs, sorted (so a replay emits the same set): what
 * an erasure request follows from an event to the sets and groups it reached.
 */
export function subjectsOf(ids: readonly (string | null | undefined)[]): string[] {
  return [...new Set(ids.filter((s): s is string => typeof s === 'string' && s !== ''))].sort();
}

/** The key sets are grouped by for advantages: the policy, then the transition's group (by default its task and position). */
export function groupKeyOf(t: Transition, policyId: string): string {
  return `${policyId}|${t.groupKey ?? `${t.taskId}/${t.position}`}`;
}

/** The member as it travels: a summary plus the output's original bytes (no decode, no copy of its arrays). */
export function memberOf(s: StoredOutput): SetMember {
  if (!s.raw)
    throw new SrpoError(
      ErrorCode.INTEGRITY_FAILED,
      `output at ${s.source.topic}[${s.source.partition}]@${s.source.offset} has no bytes: its store was not hydrated`,
    );
  return {
    outputId: s.outputId,
    agentId: s.agentId,
    role: s.role,
    policyId: s.policyId,
    policyVersion: s.policyVersion,
    temperature: s.temperature,
    output: s.raw,
    source: s.source,
  };
}
