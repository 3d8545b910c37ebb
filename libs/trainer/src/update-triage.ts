import { SrpoError, ValidationError } from '@srpo/core';
import type { AdvantageGroup, EventCodec } from '@srpo/events';
import type { PolicyTrainer, TrainingSet } from './policy-trainer';
import { trainingSetsFromGroup, type ContentKeys } from './training-sets';
import type { ReadyGroup } from './update-cycle-ports';

/*
 * The update cycle's triage of a mini-batch (step 1 of {@link UpdateCycle}): which groups
 * are trained on and why the others are skipped. Pure apart from the trainer's
 * validation; the cycle records the verdicts.
 */

/** Why a consumed group was not trained on. */
export type SkipReason =
  /** A member was sampled more than SRPO_MAX_POLICY_LAG versions ago. */
  | 'stale'
  /** A member claims a version this learner has not committed. */
  | 'future-version'
  /** A set is not COMPLETE or has no members. */
  | 'invalid-set'
  /** A member belongs to another policy, whose log-probs this learner cannot compute. */
  | 'foreign-member'
  /** The group's members were sampled at different temperatures (one update scores at one temperature). */
  | 'mixed-temperature'
  /** The group was sampled at another temperature than the rest of the mini-batch. */
  | 'temperature-mismatch'
  /** A set or output id already appears in another group of the mini-batch. */
  | 'duplicate-set'
  /** Tokens, log-probs or masks the trainer refuses (message in `detail`). */
  | 'invalid-input'
  /**
   * The update produced a non-finite loss or gradient norm, and no set of this group on
   * its own did (or isolating the sets that did was not enough); its weights were discarded.
   */
  | 'non-finite-loss'
  /**
   * A set of this group makes the step non-finite on its own (its loss or gradient norm,
   * evaluated alone, is not finite; `detail` names it). The group is skipped whole; the
   * rest of the mini-batch is trained on without it.
   */
  | 'non-finite-set'
  /** Every set of the group holds erased content (its content keys were deleted, docs/erasure.md). */
  | 'erased';

export interface SkippedGroupInfo {
  groupId: string;
  reason: SkipReason;
  detail: string | null;
  lag: number | null;
}

/** A group triage let through: its training sets, the temperature they were sampled at, its lag. */
export interface Candidate {
  ready: ReadyGroup;
  sets: TrainingSet[];
  temperature: number;
  lag: number;
}

/** A group to record as skipped. */
export interface SkippedGroup {
  ready: ReadyGroup;
  info: SkippedGroupInfo;
}

/** Triage's verdict on one group: why it is skipped, or what it trains on. */
export type GroupVerdict = { reason: SkipReason; detail: string | null; lag: number | null } | { sets: TrainingSet[]; temperature: number; lag: number };

/**
 * Judges one group of `policyId` against the committed version `current`: set validity,
 * member policies, future versions, staleness (`maxLag`), one temperature per group, the
 * trainer's input validation, and ids already used in the mini-batch (`usedIds`, which a
 * group let through adds its ids to).
 */
export function triageGroup(
  codec: EventCodec,
  trainer: PolicyTrainer,
  policyId: string,
  group: AdvantageGroup,
  current: number,
  maxLag: number,
  usedIds: Set<string>,
  keys?: ContentKeys,
): GroupVerdict {
  if (group.sets.length === 0) return { reason: 'invalid-set', detail: 'the group has no sets', lag: null };
  let oldest = Number.POSITIVE_INFINITY;
  let newest = Number.NEGATIVE_INFINITY;
  const temperatures = new Set<number>();
  for (const gs of group.sets) {
    const s = gs.set;
    if (s.status !== 'COMPLETE' || s.members.length === 0) {
      return { reason: 'invalid-set', detail: `set ${s.setId} is ${s.status} with ${s.members.length} member(s)`, lag: null };
    }
    for (const m of s.members) {
      if (m.policyId !== policyId) {
        return { reason: 'foreign-member', detail: `member ${m.outputId} of set ${s.setId} belongs to policy ${m.policyId}`, lag: null };
      }
      oldest = Math.min(oldest, m.policyVersion);
      newest = Math.max(newest, m.policyVersion);
      temperatures.add(m.temperature);
    }
  }
  const lag = current - oldest;
  if (newest > current) {
    return { reason: 'future-version', detail: `a member was sampled at version ${newest}, the learner is at ${current}`, lag };
  }
  if (lag > maxLag) {
    return { reason: 'stale', detail: `oldest member at version ${oldest}, learner at ${current}, SRPO_MAX_POLICY_LAG=${maxLag}`, lag };
  }
  if (temperatures.size > 1) {
    return { reason: 'mixed-temperature', detail: `members sampled at temperatures ${[...temperatures].join(', ')}`, lag };
  }
  let sets: TrainingSet[];
  try {
    sets = trainingSetsFromGroup(codec, group, keys);
  } catch (e) {
    if (e instanceof SrpoError && !e.retriable) return { reason: 'invalid-input', detail: e.message, lag };
    throw e;
  }
  try {
    trainer.validate(sets);
  } catch (e) {
    if (e instanceof ValidationError) return { reason: 'invalid-input', detail: e.message, lag };
    throw e;
  }
  const ids = sets.flatMap((s) => [`set:${s.setId}`, ...s.members.map((m) => `output:${m.outputId}`)]);
  const dup = ids.find((id) => usedIds.has(id));
  if (dup) return { reason: 'duplicate-set', detail: `${dup.replace(':', ' ')} is already in another group of this mini-batch`, lag };
  for (const id of ids) usedIds.add(id);
  return { sets, temperature: [...temperatures][0], lag };
}

/**
 * One temperature per update: keeps the one most sets were sampled at (ties: the lower);
 * the other candidates are appended to `skips` as `temperature-mismatch`.
 */
export function pickTemperature(candidates: Candidate[], skips: SkippedGroup[]): Candidate[] {
  if (candidates.length === 0) return [];
  const weight = new Map<number, number>();
  for (const c of candidates) weight.set(c.temperature, (weight.get(c.temperature) ?? 0) + c.sets.length);
  const chosen = [...weight.entries()].sort((a, b) => b[1] - a[1] || a[0] - b[0])[0][0];
  for (const c of candidates) {
    if (c.temperature !== chosen) {
      skips.push({
        ready: c.ready,
        info: { groupId: c.ready.group.groupId, reason: 'temperature-mismatch', detail: `sampled at ${c.temperature}, this update at ${chosen}`, lag: c.lag },
      });
    }
  }
  return candidates.filter((c) => c.temperature === chosen);
}

export function isFiniteStep(r: { loss: number; gradNorm: number }): boolean {
  return Number.isFinite(r.loss) && Number.isFinite(r.gradNorm);
}

export function nonFiniteLoss(c: Candidate, detail: string): SkippedGroup {
  return { ready: c.ready, info: { groupId: c.ready.group.groupId, reason: 'non-finite-loss', detail, lag: c.lag } };
}
