import { ValidationError } from '@srpo/core';
import { SEAL_SCHEME } from './content-seal';
import { ActionCredit, AgentOutput, EpisodeOutcome, Erasure, InferredTask, KafkaCoordinates, TOKEN_ID_ORIGINS, Transition } from './event-types';

/**
 * Domain rules beyond the Avro schema. The SDK applies them before sending (so a
 * bad event never reaches a topic) and the materializer applies them after
 * decoding (events from other producers). Every error names the field.
 */
export interface EventLimits {
  /** Longest id accepted (ids are Kafka keys and database keys). */
  maxIdLength: number;
  /** Largest step in an episode. */
  maxStep: number;
  /** Most response tokens in one output. */
  maxResponseTokens: number;
  /** Most context tokens in one output. */
  maxContextTokens: number;
  /** Most outputs one transition may consume. */
  maxCardinality: number;
}

export const DEFAULT_EVENT_LIMITS: EventLimits = {
  maxIdLength: 256,
  maxStep: 100_000,
  maxResponseTokens: 8192,
  maxContextTokens: 32_768,
  maxCardinality: 64,
};

function id(field: string, value: string, limits: EventLimits): void {
  if (typeof value !== 'string' || value.length === 0) throw new ValidationError(field, 'must be a non-empty string');
  if (value.length > limits.maxIdLength) throw new ValidationError(field, `is ${value.length} characters long; the limit is ${limits.maxIdLength}`);
}

function nonNegativeInt(field: string, value: number, max: number): void {
  if (!Number.isInteger(value) || value < 0) throw new ValidationError(field, `must be a non-negative integer, got ${value}`);
  if (value > max) throw new ValidationError(field, `is ${value}; the limit is ${max}`);
}

function finite(field: string, value: number): void {
  if (typeof value !== 'number' || !Number.isFinite(value)) throw new ValidationError(field, `must be a finite number, got ${value}`);
}

function time(field: string, value: number): void {
  if (!Number.isSafeInteger(value) || value < 0) throw new ValidationError(field, `must be epoch milliseconds, got ${value}`);
}

/**
 * Behaviour log-probs at or below this (−100 nats, a probability under 3.8e−44) are floor
 * values, not measurements: no float32 or bfloat16 sampler draws a token that unlikely
 * (their smallest normal probability is 1.2e−38 = e^−87.3), so such a value is what an
 * inference server reports for "less likely than I represent" (the OpenAI API and vLLM's
 * OpenAI server clamp to −9999.0).
 *
 * They are accepted as data (finite and <= 0, so valid): refusing them would drop the whole
 * active set, since a set missing a member is never trained on. The objective stays finite
 * on them and counts the set as `ratio/out_of_range`; its clip (high for A > 0, dual for
 * A < 0) removes the set's gradient. The SDK and the materializer count them
 * (docs/objective.md, docs/bad-input.md).
 */
export const BEHAVIOUR_LOGPROB_FLOOR = -100;

/**
 * Number of trained tokens (loss mask on) whose behaviour log-prob is at or below
 * {@link BEHAVIOUR_LOGPROB_FLOOR}. Masked tokens are not counted: they never enter a ratio.
 */
export function floorLogProbCount(o: Pick<AgentOutput, 'behaviourLogProbs' | 'lossMask'>, floor = BEHAVIOUR_LOGPROB_FLOOR): number {
  let n = 0;
  const lp = o.behaviourLogProbs;
  for (let i = 0; i < lp.length; i++) if (o.lossMask[i] && lp[i] <= floor) n++;
  return n;
}

function tokenIds(field: string, ids: readonly number[]): void {
  for (let i = 0; i < ids.length; i++) {
    const t = ids[i];
    if (!Number.isInteger(t) || t < 0) throw new ValidationError(`${field}[${i}]`, `must be a non-negative token id, got ${t}`);
  }
}

/** A sealed output: no ids in the clear, a known scheme, a bounded ciphertext whose length fits the response. */
function validateSealed(o: AgentOutput, limits: EventLimits): void {
  const sealed = o.sealed;
  if (sealed === null) return;
  if (o.responseTokenIds.length > 0 || o.contextTokenIds.length > 0) {
    throw new ValidationError('AgentOutput.sealed', 'is set, so contextTokenIds and responseTokenIds must be empty (they are inside it)');
  }
  if (sealed.scheme !== SEAL_SCHEME)
    throw new ValidationError('AgentOutput.sealed.scheme', `must be ${SEAL_SCHEME}, got ${JSON.stringify(sealed.scheme.slice(0, 40))}`);
  id('AgentOutput.sealed.keyId', sealed.keyId, limits);
  if (sealed.nonce.length !== 12) throw new ValidationError('AgentOutput.sealed.nonce', `must be 12 bytes, got ${sealed.nonce.length}`);
  // count (4) + ids (4 each) + tag (16); the response's ids are as many as its log-probs.
  const ids = (sealed.ciphertext.length - 20) / 4;
  const context = ids - o.behaviourLogProbs.length;
  if (!Number.isInteger(ids) || context < 0) {
    throw new ValidationError(
      'AgentOutput.sealed.ciphertext',
      `has ${sealed.ciphertext.length} bytes, which cannot hold ${o.behaviourLogProbs.length} response tokens`,
    );
  }
  if (context > limits.maxContextTokens)
    throw new ValidationError('AgentOutput.sealed.ciphertext', `holds ${context} context tokens; the limit is ${limits.maxContextTokens}`);
}

export function validateAgentOutput(o: AgentOutput, limits: EventLimits = DEFAULT_EVENT_LIMITS): void {
  id('AgentOutput.outputId', o.outputId, limits);
  id('AgentOutput.episodeId', o.episodeId, limits);
  id('AgentOutput.agentId', o.agentId, limits);
  id('AgentOutput.role', o.role, limits);
  id('AgentOutput.policyId', o.policyId, limits);
  id('AgentOutput.contextRef', o.contextRef, { ...limits, maxIdLength: limits.maxIdLength * 4 });
  nonNegativeInt('AgentOutput.step', o.step, limits.maxStep);
  nonNegativeInt('AgentOutput.policyVersion', o.policyVersion, Number.MAX_SAFE_INTEGER);
  // A sealed output's ids are checked where it is opened (validateAgentOutput again, on the opened
  // output); here its length is the log-probs' and its ciphertext is bounded by the same limits.
  const n = o.sealed === null ? o.responseTokenIds.length : o.behaviourLogProbs.length;
  const tokens = o.sealed === null ? 'responseTokenIds' : 'behaviourLogProbs';
  if (n === 0) throw new ValidationError(`AgentOutput.${tokens}`, 'is empty; an output needs at least one token');
  if (n > limits.maxResponseTokens) throw new ValidationError(`AgentOutput.${tokens}`, `has ${n} tokens; the limit is ${limits.maxResponseTokens}`);
  if (o.contextTokenIds.length > limits.maxContextTokens) {
    throw new ValidationError('AgentOutput.contextTokenIds', `has ${o.contextTokenIds.length} tokens; the limit is ${limits.maxContextTokens}`);
  }
  if (o.sealed !== null) validateSealed(o, limits);
  if (o.behaviourLogProbs.length !== n) {
    throw new ValidationError('AgentOutput.behaviourLogProbs', `has length ${o.behaviourLogProbs.length}; responseTokenIds has ${n}`);
  }
  if (o.lossMask.length !== n) throw new ValidationError('AgentOutput.lossMask', `has length ${o.lossMask.length}; ${tokens} has ${n}`);
  for (let i = 0; i < n; i++) {
    const lp = o.behaviourLogProbs[i];
    if (!Number.isFinite(lp)) throw new ValidationError(`AgentOutput.behaviourLogProbs[${i}]`, `must be finite, got ${lp}`);
    if (lp > 0) throw new ValidationError(`AgentOutput.behaviourLogProbs[${i}]`, `must be <= 0 (a log-probability), got ${lp}`);
  }
  tokenIds('AgentOutput.responseTokenIds', o.responseTokenIds);
  tokenIds('AgentOutput.contextTokenIds', o.contextTokenIds);
  if (!o.lossMask.some(Boolean)) throw new ValidationError('AgentOutput.lossMask', 'masks out every token; at least one must be trained on');
  const s = o.sampling;
  if (!Number.isFinite(s.temperature) || s.temperature <= 0) throw new ValidationError('AgentOutput.sampling.temperature', `must be > 0, got ${s.temperature}`);
  nonNegativeInt('AgentOutput.sampling.topK', s.topK, 1 << 20);
  nonNegativeInt('AgentOutput.sampling.maxNewTokens', s.maxNewTokens, limits.maxResponseTokens);
  time('AgentOutput.startedAtMs', o.startedAtMs);
  time('AgentOutput.eventTimeMs', o.eventTimeMs);
  if (!(TOKEN_ID_ORIGINS as readonly string[]).includes(o.tokenIdOrigin)) {
    throw new ValidationError('AgentOutput.tokenIdOrigin', `must be one of ${TOKEN_ID_ORIGINS.join(', ')}, got ${JSON.stringify(o.tokenIdOrigin)}`);
  }
  nonNegativeInt('AgentOutput.turn', o.turn, limits.maxStep);
  subject('AgentOutput.subjectId', o.subjectId, limits);
  if (o.parentOutputId !== null) {
    id('AgentOutput.parentOutputId', o.parentOutputId, limits);
    if (o.parentOutputId === o.outputId) throw new ValidationError('AgentOutput.parentOutputId', 'names the output itself');
  }
  if (o.eventTimeMs < o.startedAtMs) throw new ValidationError('AgentOutput.eventTimeMs', `is before startedAtMs (${o.eventTimeMs} < ${o.startedAtMs})`);
}

export function validateTransition(t: Transition, limits: EventLimits = DEFAULT_EVENT_LIMITS): void {
  id('Transition.transitionId', t.transitionId, limits);
  id('Transition.episodeId', t.episodeId, limits);
  id('Transition.preStateId', t.preStateId, limits);
  id('Transition.taskId', t.taskId, limits);
  id('Transition.position', t.position, limits);
  id('Transition.observationDigest', t.observationDigest, limits);
  nonNegativeInt('Transition.step', t.step, limits.maxStep);
  const ids = t.consumedOutputIds;
  if (ids.length === 0) throw new ValidationError('Transition.consumedOutputIds', 'is empty; a transition consumes at least one output');
  if (ids.length > limits.maxCardinality)
    throw new ValidationError('Transition.consumedOutputIds', `lists ${ids.length} outputs; the limit is ${limits.maxCardinality}`);
  const seen = new Set<string>();
  ids.forEach((o, i) => {
    id(`Transition.consumedOutputIds[${i}]`, o, limits);
    if (seen.has(o)) throw new ValidationError(`Transition.consumedOutputIds[${i}]`, `lists output ${o} twice`);
    seen.add(o);
  });
  if (t.expectedCardinality !== ids.length) {
    throw new ValidationError('Transition.expectedCardinality', `is ${t.expectedCardinality} but consumedOutputIds lists ${ids.length}`);
  }
  if (t.groupKey !== null) id('Transition.groupKey', t.groupKey, { ...limits, maxIdLength: limits.maxIdLength * 2 });
  if (t.expectedGroupSize !== null) {
    if (t.groupKey === null) throw new ValidationError('Transition.expectedGroupSize', 'is set without a groupKey');
    if (!Number.isInteger(t.expectedGroupSize) || t.expectedGroupSize < 1 || t.expectedGroupSize > 4096) {
      throw new ValidationError('Transition.expectedGroupSize', `must be an integer in 1..4096, got ${t.expectedGroupSize}`);
    }
  }
  if (t.reward !== null) finite('Transition.reward', t.reward);
  if (t.rewardSource !== null && t.rewardSource !== undefined) rewardSource('Transition.rewardSource', t.rewardSource, true);
  subject('Transition.subjectId', t.subjectId, limits);
  if (t.routing !== null) {
    t.routing.selectedAgentIds.forEach((a, i) => id(`Transition.routing.selectedAgentIds[${i}]`, a, limits));
  }
  time('Transition.eventTimeMs', t.eventTimeMs);
}

export function validateEpisodeOutcome(o: EpisodeOutcome, limits: EventLimits = DEFAULT_EVENT_LIMITS): void {
  id('EpisodeOutcome.episodeId', o.episodeId, limits);
  id('EpisodeOutcome.taskId', o.taskId, limits);
  id('EpisodeOutcome.verifier', o.verifier, limits);
  finite('EpisodeOutcome.outcomeReward', o.outcomeReward);
  nonNegativeInt('EpisodeOutcome.turns', o.turns, limits.maxStep);
  o.observationDigests.forEach((d, i) => id(`EpisodeOutcome.observationDigests[${i}]`, d, limits));
  time('EpisodeOutcome.eventTimeMs', o.eventTimeMs);
  // Absent on values built before the fields existed (the codec fills them in on decode).
  if (o.rewardSource !== undefined) rewardSource('EpisodeOutcome.rewardSource', o.rewardSource, false);
  if (o.revision !== undefined) nonNegativeInt('EpisodeOutcome.revision', o.revision, 2 ** 31 - 1);
  subject('EpisodeOutcome.subjectId', o.subjectId, limits);
}

/** A subject id, when one is said: an id like the others (non-empty, bounded). Older events have none (undefined). */
function subject(field: string, value: string | null | undefined, limits: EventLimits): void {
  if (value !== null && value !== undefined) id(field, value, limits);
}

/** Longest reward source name (`Transition.rewardSource`, `EpisodeOutcome.rewardSource`, SRPO_REWARD_WINDOWS). */
export const MAX_REWARD_SOURCE_LENGTH = 64;

/** A reward source name: at most {@link MAX_REWARD_SOURCE_LENGTH} characters of [A-Za-z0-9._-]; empty only where `''` means "not said". */
function rewardSource(field: string, value: string, nonEmpty: boolean): void {
  if (typeof value !== 'string') throw new ValidationError(field, 'must be a string');
  if (value.length === 0) {
    if (nonEmpty) throw new ValidationError(field, 'must be null or a non-empty name');
    return;
  }
  if (value.length > MAX_REWARD_SOURCE_LENGTH) throw new ValidationError(field, `is ${value.length} characters long; the limit is ${MAX_REWARD_SOURCE_LENGTH}`);
  if (!/^[A-Za-z0-9._-]+$/.test(value)) throw new ValidationError(field, `must use only letters, digits, '.', '_' and '-', got ${JSON.stringify(value)}`);
}

function coordinates(field: string, c: KafkaCoordinates, limits: EventLimits): void {
  id(`${field}.topic`, c.topic, limits);
  if (!Number.isInteger(c.partition) || c.partition < 0) throw new ValidationError(`${field}.partition`, `must be a non-negative integer, got ${c.partition}`);
  if (!Number.isSafeInteger(c.offset) || c.offset < 0) throw new ValidationError(`${field}.offset`, `must be a non-negative integer, got ${c.offset}`);
}

export function validateInferredTask(t: InferredTask, limits: EventLimits = DEFAULT_EVENT_LIMITS): void {
  id('InferredTask.runId', t.runId, limits);
  id('InferredTask.episodeId', t.episodeId, limits);
  id('InferredTask.originalTaskId', t.originalTaskId, limits);
  id('InferredTask.inferrer', t.inferrer, limits);
  id('InferredTask.scorerPolicyId', t.scorerPolicyId, limits);
  nonNegativeInt('InferredTask.scorerVersion', t.scorerVersion, Number.MAX_SAFE_INTEGER);
  nonNegativeInt('InferredTask.successfulSteps', t.successfulSteps, limits.maxStep);
  nonNegativeInt('InferredTask.failedSteps', t.failedSteps, limits.maxStep);
  if (t.usable && t.excludedReason !== null)
    throw new ValidationError('InferredTask.excludedReason', `must be null for a usable trajectory, got ${t.excludedReason}`);
  if (!t.usable && (t.excludedReason === null || t.excludedReason.length === 0))
    throw new ValidationError('InferredTask.excludedReason', 'must say why an unusable trajectory was excluded');
  if (t.usable && t.instructionTokenIds.length === 0)
    throw new ValidationError('InferredTask.instructionTokenIds', 'is empty; a usable trajectory has an instruction');
  if (t.usable && t.successfulSteps === 0)
    throw new ValidationError('InferredTask.successfulSteps', 'is 0; a usable trajectory has at least one successful step');
  t.instructionTokenIds.forEach((tok, i) => {
    if (!Number.isInteger(tok) || tok < 0) throw new ValidationError(`InferredTask.instructionTokenIds[${i}]`, `must be a non-negative token id, got ${tok}`);
  });
  t.sources.forEach((c, i) => coordinates(`InferredTask.sources[${i}]`, c, limits));
  time('InferredTask.eventTimeMs', t.eventTimeMs);
}

export function validateActionCredit(c: ActionCredit, limits: EventLimits = DEFAULT_EVENT_LIMITS): void {
  id('ActionCredit.runId', c.runId, limits);
  id('ActionCredit.episodeId', c.episodeId, limits);
  id('ActionCredit.outputId', c.outputId, limits);
  id('ActionCredit.role', c.role, limits);
  nonNegativeInt('ActionCredit.step', c.step, limits.maxStep);
  if (c.creditMode !== 'adjacent' && c.creditMode !== 'best_prefix')
    throw new ValidationError('ActionCredit.creditMode', `must be adjacent or best_prefix, got ${c.creditMode}`);
  finite('ActionCredit.credit', c.credit);
  if (!(c.weight >= 0 && c.weight <= 1)) throw new ValidationError('ActionCredit.weight', `must be in [0, 1], got ${c.weight}`);
  if (c.successful) {
    if (c.prefixIndex === null || !Number.isInteger(c.prefixIndex) || c.prefixIndex < 1)
      throw new ValidationError('ActionCredit.prefixIndex', `must be an integer >= 1 for a successful action, got ${c.prefixIndex}`);
    if (c.nllBefore === null) throw new ValidationError('ActionCredit.nllBefore', 'must be set for a successful action');
    if (c.nllAfter === null) throw new ValidationError('ActionCredit.nllAfter', 'must be set for a successful action');
    finite('ActionCredit.nllBefore', c.nllBefore);
    finite('ActionCredit.nllAfter', c.nllAfter);
  } else {
    if (c.credit !== 0) throw new ValidationError('ActionCredit.credit', `must be 0 for a failed action, got ${c.credit}`);
    if (c.weight !== 0) throw new ValidationError('ActionCredit.weight', `must be 0 for a failed action, got ${c.weight}`);
    if (c.prefixIndex !== null) throw new ValidationError('ActionCredit.prefixIndex', 'must be null for a failed action');
  }
  coordinates('ActionCredit.source', c.source, limits);
  time('ActionCredit.eventTimeMs', c.eventTimeMs);
}

/**
 * Most key ids one Erasure event carries: 10,000 ids of up to 64 characters stay well under the
 * topic's 4 MiB messages. `srpo erase` splits a larger erasure into several events of one id.
 */
export const MAX_ERASURE_KEY_IDS = 10_000;

/** An erasure read from the erasures topic: checked before any reader trusts its key ids. */
export function validateErasure(e: Erasure, limits: EventLimits = DEFAULT_EVENT_LIMITS): void {
  id('Erasure.erasureId', e.erasureId, limits);
  if (e.scope !== 'subject' && e.scope !== 'episode') throw new ValidationError('Erasure.scope', `must be subject or episode, got ${String(e.scope)}`);
  id('Erasure.target', e.target, limits);
  if (!Array.isArray(e.keyIds) || e.keyIds.length > MAX_ERASURE_KEY_IDS)
    throw new ValidationError(
      'Erasure.keyIds',
      `must list at most ${MAX_ERASURE_KEY_IDS} key ids, got ${Array.isArray(e.keyIds) ? e.keyIds.length : typeof e.keyIds}`,
    );
  e.keyIds.forEach((k, i) => id(`Erasure.keyIds[${i}]`, k, limits));
  time('Erasure.eventTimeMs', e.eventTimeMs);
}
