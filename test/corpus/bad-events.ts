import type * as avro from 'avsc';
import { ErrorCode } from '@srpo/core';
import {
  AgentEvent,
  AgentOutput,
  EpisodeOutcome,
  EventCodec,
  EventMap,
  EventType,
  PolicyVersion,
  ReasonCode,
  SINGLE_OBJECT_MAGIC,
  Transition,
} from '@srpo/events';
import { outcome, output, transition } from '@srpo/testing';
import { CORPUS_T, Phase, PUBLISHED_POLICY_VERSION } from './valid-stream';

/**
 * The bad-input corpus (issue #10): every kind of bad event the pipeline must
 * survive, as data. Each entry says which raw topic it is written to, how its
 * bytes are built, in which phase of the valid stream it is produced, the reason
 * code its dead letter must carry, and whether the producer SDK can refuse it
 * before sending (and under which field). docs/bad-input.md lists them by reason.
 *
 * Ids start with `x-` so that no corpus event touches an episode of the valid
 * stream unless the kind is about exactly that (relations, conflicting duplicates).
 */
export type RawTopic = 'agentOutputs' | 'transitions' | 'episodeOutcomes';

/** Largest message the materializer accepts in the corpus runs (SRPO_MAX_PAYLOAD_BYTES). */
export const CORPUS_MAX_PAYLOAD_BYTES = 64 * 1024;

/** How the SDK must refuse an entry: a ValidationError naming `field`, or an SrpoError of `code`. */
export type SdkRefusal = { field: string } | { code: ErrorCode };

export interface BadEvent {
  name: string;
  description: string;
  topic: RawTopic;
  /**
   * The phase of the valid stream it is interleaved with, always after a valid event of
   * its own topic (a fresh task's first event defines its stream time, docs/bad-input.md);
   * `late` comes after the valid sets it refers to were emitted; `clock2` after the watermark
   * passed every valid set's reward window (the `clock` phase's +20 s).
   */
  phase: Extract<Phase, 'outputs' | 'transitions' | 'late' | 'clock2'>;
  expected: ReasonCode;
  /** The Kafka key and value written. */
  build(codec: EventCodec): { key: string; value: Buffer };
  /** The typed event, where the SDK could be asked to send it; `sdk` says how it must refuse. */
  event?: AgentEvent;
  sdk?: SdkRefusal;
}

/** Bad events whose timestamps sit 20 minutes ahead: inside the skew bound, so only the fix that refused records keep stream time still protects the valid sets. */
const AHEAD = 20 * 60_000;
const at = (ms: number) => ({ eventTimeMs: CORPUS_T + ms, startedAtMs: CORPUS_T + ms });
/** 2100-01-01T00:00:00Z. */
const FAR_FUTURE_MS = 4_102_444_800_000;

function encoded<T extends EventType>(type: T, value: EventMap[T], key: string): (codec: EventCodec) => { key: string; value: Buffer } {
  return (codec) => ({ key, value: codec.encode(type, value) });
}

/**
 * A typed event written with the codec alone (no domain validation), keyed by its
 * episode id. The builders below give every field, so the SDK's init type holds
 * the complete event the codec needs.
 */
function typed(event: AgentEvent, key?: string): Pick<BadEvent, 'build' | 'event'> {
  const value = event.value as AgentOutput | Transition | EpisodeOutcome;
  return { event, build: encoded(event.type, value as never, key ?? value.episodeId) };
}

// Each entry carries one fault: everything else, the policy version included, is valid.
const badOutput = (name: string, patch: Partial<AgentOutput>): AgentEvent => ({
  type: 'AgentOutput',
  value: output(`x-${name}`, 0, { ...at(AHEAD), policyVersion: PUBLISHED_POLICY_VERSION, ...patch }),
});
const badTransition = (name: string, outputs: number[], patch: Partial<Transition>): AgentEvent => ({
  type: 'Transition',
  value: transition(`x-${name}`, outputs, { eventTimeMs: CORPUS_T + AHEAD, ...patch }),
});
const badOutcome = (name: string, patch: Partial<EpisodeOutcome>): AgentEvent => ({
  type: 'EpisodeOutcome',
  value: outcome(`x-${name}`, 1, { eventTimeMs: CORPUS_T + AHEAD, ...patch }),
});

function raw(key: string, bytes: (codec: EventCodec) => Buffer): (codec: EventCodec) => { key: string; value: Buffer } {
  return (codec) => ({ key, value: bytes(codec) });
}

const validOutputBytes = (codec: EventCodec) => codec.encode('AgentOutput', output('x-raw', 0, at(60)));
const validTransitionBytes = (codec: EventCodec) => codec.encode('Transition', transition('x-raw', [0], { eventTimeMs: CORPUS_T + 60 }));
const validOutcomeBytes = (codec: EventCodec) => codec.encode('EpisodeOutcome', outcome('x-raw', 1, { eventTimeMs: CORPUS_T + 60 }));
/**
 * `bytes` of an event with the first block count of its top-level array or map `field` replaced by
 * 2^31 (zigzag varint 80 80 80 80 10): the offset is the encoded length of the fields before it.
 */
function withHugeCount<T extends EventType>(codec: EventCodec, type: T, value: EventMap[T], bytes: Buffer, field: string): Buffer {
  let offset = 10;
  for (const f of (codec.schemas.reader(type).avroType as avro.types.RecordType).fields) {
    if (f.name === field) break;
    offset += f.type.toBuffer((value as unknown as Record<string, unknown>)[f.name]).length;
  }
  if (bytes[offset] >= 0x80) throw new Error(`${type}.${field}: expected a one-byte count at ${offset}`);
  return Buffer.concat([bytes.subarray(0, offset), Buffer.from([0x80, 0x80, 0x80, 0x80, 0x10]), bytes.subarray(offset + 1)]);
}
const hugeCountOutput = output('x-raw', 0, at(60));
const hugeCountOutcome = outcome('x-raw', 1, { eventTimeMs: CORPUS_T + 60 });

const header = (bytes: Buffer) => bytes.subarray(0, 10);
const body = (bytes: Buffer) => bytes.subarray(10);

const policyVersion: PolicyVersion = {
  policyId: 'worker',
  version: 1,
  weightsHash: 'a'.repeat(64),
  checkpointUri: 'file:///tmp/x',
  updateId: null,
  eventTimeMs: CORPUS_T,
};

export const BAD_EVENTS: BadEvent[] = [
  // ---- Raw bytes: the codec refuses them before any processor sees them. ----
  {
    name: 'truncated-payload',
    description: 'A valid AgentOutput cut after 30 bytes: the Avro body ends inside a field.',
    topic: 'agentOutputs',
    phase: 'outputs',
    expected: ReasonCode.DECODE_TRUNCATED,
    build: raw('x-raw', (c) => validOutputBytes(c).subarray(0, 30)),
  },
  {
    name: 'truncated-header',
    description: 'The single-object magic and 3 of the 8 fingerprint bytes, nothing else.',
    topic: 'episodeOutcomes',
    phase: 'outputs',
    expected: ReasonCode.DECODE_TRUNCATED,
    build: raw('x-raw', (c) => validOutcomeBytes(c).subarray(0, 5)),
  },
  {
    name: 'bad-magic-text',
    description: 'Plain text where Avro is expected: neither C3 01 nor 00 at the start.',
    topic: 'transitions',
    phase: 'transitions',
    expected: ReasonCode.DECODE_BAD_MAGIC,
    build: raw('x-raw', () => Buffer.from('not avro at all')),
  },
  {
    name: 'json-instead-of-avro',
    description: 'A producer that wrote the event as JSON: starts with "{".',
    topic: 'agentOutputs',
    phase: 'outputs',
    expected: ReasonCode.DECODE_BAD_MAGIC,
    build: raw('x-raw', () => Buffer.from(JSON.stringify(output('x-raw', 0, at(60))))),
  },
  {
    name: 'unknown-fingerprint',
    description: 'C3 01, a fingerprint of no known schema, then a valid EpisodeOutcome body.',
    topic: 'episodeOutcomes',
    phase: 'outputs',
    expected: ReasonCode.UNKNOWN_SCHEMA,
    build: raw('x-raw', (c) => Buffer.concat([SINGLE_OBJECT_MAGIC, Buffer.from('0123456789abcdef', 'hex'), body(validOutcomeBytes(c))])),
  },
  {
    name: 'confluent-frame-without-registry',
    description: 'Confluent wire format (00, schema id 7) sent to a deployment without a schema registry.',
    topic: 'agentOutputs',
    phase: 'outputs',
    expected: ReasonCode.UNKNOWN_SCHEMA,
    build: raw('x-raw', (c) => Buffer.concat([Buffer.from([0, 0, 0, 0, 7]), body(validOutputBytes(c))])),
  },
  {
    name: 'header-of-another-schema-malformed',
    description:
      "A Transition header over an AgentOutput body: read as a Transition, the output's fields give the WorkflowKind enum an index it does not have.",
    topic: 'transitions',
    phase: 'transitions',
    expected: ReasonCode.DECODE_MALFORMED,
    build: raw('x-raw', (c) => Buffer.concat([header(validTransitionBytes(c)), body(validOutputBytes(c))])),
  },
  {
    name: 'header-of-another-schema-short',
    description: 'An AgentOutput header over a Transition body: the body runs out before the fields the AgentOutput schema promises.',
    topic: 'agentOutputs',
    phase: 'outputs',
    expected: ReasonCode.DECODE_TRUNCATED,
    build: raw('x-raw', (c) => Buffer.concat([header(validOutputBytes(c)), body(validTransitionBytes(c))])),
  },
  {
    name: 'trailing-bytes',
    description: 'A valid AgentOutput followed by 4 stray bytes.',
    topic: 'agentOutputs',
    phase: 'outputs',
    expected: ReasonCode.DECODE_MALFORMED,
    build: raw('x-raw', (c) => Buffer.concat([validOutputBytes(c), Buffer.from([1, 2, 3, 4])])),
  },
  {
    name: 'array-count-2-31',
    description:
      'An AgentOutput whose responseTokenIds block count is 2^31: avsc believed it and looped (and allocated) for seconds; the codec bounds every count by the bytes left.',
    topic: 'agentOutputs',
    phase: 'outputs',
    expected: ReasonCode.DECODE_TRUNCATED,
    build: raw('x-raw', (c) => withHugeCount(c, 'AgentOutput', hugeCountOutput, c.encode('AgentOutput', hugeCountOutput), 'responseTokenIds')),
  },
  {
    name: 'map-count-2-31',
    description: 'An EpisodeOutcome whose verifierDetails map block count is 2^31 (it pinned a CPU for about 27 s before the bound).',
    topic: 'episodeOutcomes',
    phase: 'outputs',
    expected: ReasonCode.DECODE_TRUNCATED,
    build: raw('x-raw', (c) => withHugeCount(c, 'EpisodeOutcome', hugeCountOutcome, c.encode('EpisodeOutcome', hugeCountOutcome), 'verifierDetails')),
  },
  {
    name: 'payload-too-large',
    description: `An EpisodeOutcome whose verifier details make it larger than the ${CORPUS_MAX_PAYLOAD_BYTES}-byte limit.`,
    topic: 'episodeOutcomes',
    phase: 'outputs',
    expected: ReasonCode.PAYLOAD_TOO_LARGE,
    ...typed(badOutcome('too-large', { verifierDetails: { log: 'x'.repeat(CORPUS_MAX_PAYLOAD_BYTES + 1000) } })),
    sdk: { code: ErrorCode.PAYLOAD_TOO_LARGE },
  },
  {
    name: 'wrong-event-type',
    description: 'A well-formed PolicyVersion (a learner event) written to agent-outputs.',
    topic: 'agentOutputs',
    phase: 'outputs',
    expected: ReasonCode.WRONG_EVENT_TYPE,
    build: encoded('PolicyVersion', policyVersion, 'x-raw'),
  },
  {
    name: 'transition-on-agent-outputs',
    description: 'A valid Transition written to agent-outputs instead of transitions.',
    topic: 'agentOutputs',
    phase: 'outputs',
    expected: ReasonCode.WRONG_EVENT_TYPE,
    build: encoded('Transition', transition('x-wrong-topic', [0], { eventTimeMs: CORPUS_T + 60 }), 'x-wrong-topic'),
  },

  // ---- Field values: decoded fine, refused by the domain rules (event-validation.ts). ----
  {
    name: 'logprob-nan',
    description: 'A behaviour log-prob of NaN.',
    topic: 'agentOutputs',
    phase: 'outputs',
    expected: ReasonCode.INVALID_FIELD,
    ...typed(badOutput('logprob-nan', { behaviourLogProbs: [NaN, -0.25] })),
    sdk: { field: 'AgentOutput.behaviourLogProbs[0]' },
  },
  {
    name: 'logprob-plus-infinity',
    description: 'A behaviour log-prob of +Infinity.',
    topic: 'agentOutputs',
    phase: 'outputs',
    expected: ReasonCode.INVALID_FIELD,
    ...typed(badOutput('logprob-pinf', { behaviourLogProbs: [-0.5, Infinity] })),
    sdk: { field: 'AgentOutput.behaviourLogProbs[1]' },
  },
  {
    name: 'logprob-minus-infinity',
    description: 'A behaviour log-prob of -Infinity (probability 0: the token could not have been sampled).',
    topic: 'agentOutputs',
    phase: 'outputs',
    expected: ReasonCode.INVALID_FIELD,
    ...typed(badOutput('logprob-ninf', { behaviourLogProbs: [-Infinity, -0.25] })),
    sdk: { field: 'AgentOutput.behaviourLogProbs[0]' },
  },
  {
    name: 'logprob-positive',
    description: 'A positive log-prob (a probability above 1).',
    topic: 'agentOutputs',
    phase: 'outputs',
    expected: ReasonCode.INVALID_FIELD,
    ...typed(badOutput('logprob-pos', { behaviourLogProbs: [-0.5, 0.5] })),
    sdk: { field: 'AgentOutput.behaviourLogProbs[1]' },
  },
  {
    name: 'logprobs-length-mismatch',
    description: 'Three log-probs for two response tokens.',
    topic: 'agentOutputs',
    phase: 'outputs',
    expected: ReasonCode.INVALID_FIELD,
    ...typed(badOutput('logprob-len', { behaviourLogProbs: [-0.5, -0.25, -0.125] })),
    sdk: { field: 'AgentOutput.behaviourLogProbs' },
  },
  {
    name: 'empty-response',
    description: 'No response tokens (and so no log-probs and no mask).',
    topic: 'agentOutputs',
    phase: 'outputs',
    expected: ReasonCode.INVALID_FIELD,
    ...typed(badOutput('empty', { responseTokenIds: [], behaviourLogProbs: [], lossMask: [] })),
    sdk: { field: 'AgentOutput.responseTokenIds' },
  },
  {
    name: 'mask-length-mismatch',
    description: 'A loss mask of one entry for two response tokens.',
    topic: 'agentOutputs',
    phase: 'outputs',
    expected: ReasonCode.INVALID_FIELD,
    ...typed(badOutput('mask-len', { lossMask: [true] })),
    sdk: { field: 'AgentOutput.lossMask' },
  },
  {
    name: 'all-tokens-masked',
    description: 'Every token masked out: the output contributes nothing to train on.',
    topic: 'agentOutputs',
    phase: 'outputs',
    expected: ReasonCode.INVALID_FIELD,
    ...typed(badOutput('mask-none', { lossMask: [false, false] })),
    sdk: { field: 'AgentOutput.lossMask' },
  },
  {
    name: 'negative-token-id',
    description: 'A response token id of -1.',
    topic: 'agentOutputs',
    phase: 'outputs',
    expected: ReasonCode.INVALID_FIELD,
    ...typed(badOutput('neg-token', { responseTokenIds: [3, -1] })),
    sdk: { field: 'AgentOutput.responseTokenIds[1]' },
  },
  {
    name: 'negative-step',
    description: 'An output at step -1.',
    topic: 'agentOutputs',
    phase: 'outputs',
    expected: ReasonCode.INVALID_FIELD,
    ...typed(badOutput('neg-step', { step: -1 })),
    sdk: { field: 'AgentOutput.step' },
  },
  {
    name: 'absurd-step',
    description: 'A transition at step 2,000,000,000 (the Avro int holds it), far beyond any episode (limit 100,000).',
    topic: 'transitions',
    phase: 'transitions',
    expected: ReasonCode.INVALID_FIELD,
    ...typed(badTransition('big-step', [0], { step: 2_000_000_000 })),
    sdk: { field: 'Transition.step' },
  },
  {
    name: 'missing-output-id',
    description: 'An output whose id is the empty string.',
    topic: 'agentOutputs',
    phase: 'outputs',
    expected: ReasonCode.INVALID_FIELD,
    ...typed(badOutput('no-id', { outputId: '' })),
    sdk: { field: 'AgentOutput.outputId' },
  },
  {
    name: 'missing-episode-id',
    description: 'A transition whose episode id (and so Kafka key) is the empty string.',
    topic: 'transitions',
    phase: 'transitions',
    expected: ReasonCode.INVALID_FIELD,
    ...typed(badTransition('no-episode', [0], { episodeId: '', transitionId: 'x-no-episode/t0' })),
    sdk: { field: 'Transition.episodeId' },
  },
  {
    name: 'output-id-10000-chars',
    description: 'An output id of 10,000 characters (limit 256).',
    topic: 'agentOutputs',
    phase: 'outputs',
    expected: ReasonCode.INVALID_FIELD,
    ...typed(badOutput('long-id', { outputId: 'o'.repeat(10_000) })),
    sdk: { field: 'AgentOutput.outputId' },
  },
  {
    name: 'episode-id-10000-chars',
    description: 'An outcome whose episode id, and Kafka key, has 10,000 characters.',
    topic: 'episodeOutcomes',
    phase: 'outputs',
    expected: ReasonCode.INVALID_FIELD,
    ...typed({ type: 'EpisodeOutcome', value: outcome('e'.repeat(10_000), 1, { eventTimeMs: CORPUS_T + AHEAD }) }),
    sdk: { field: 'EpisodeOutcome.episodeId' },
  },
  {
    name: 'transition-reward-nan',
    description: 'An immediate reward of NaN.',
    topic: 'transitions',
    phase: 'transitions',
    expected: ReasonCode.INVALID_FIELD,
    ...typed(badTransition('reward-nan', [0], { reward: NaN })),
    sdk: { field: 'Transition.reward' },
  },
  {
    name: 'transition-reward-infinity',
    description: 'An immediate reward of +Infinity.',
    topic: 'transitions',
    phase: 'transitions',
    expected: ReasonCode.INVALID_FIELD,
    ...typed(badTransition('reward-inf', [0], { reward: Infinity })),
    sdk: { field: 'Transition.reward' },
  },
  {
    name: 'outcome-reward-nan',
    description: 'An episode outcome reward of NaN.',
    topic: 'episodeOutcomes',
    phase: 'outputs',
    expected: ReasonCode.INVALID_FIELD,
    ...typed(badOutcome('outcome-nan', { outcomeReward: NaN })),
    sdk: { field: 'EpisodeOutcome.outcomeReward' },
  },
  {
    name: 'future-policy-version',
    description: `An output stamped with policy version ${PUBLISHED_POLICY_VERSION + 1} while the learner published only up to ${PUBLISHED_POLICY_VERSION}.`,
    topic: 'agentOutputs',
    phase: 'outputs',
    expected: ReasonCode.FUTURE_POLICY_VERSION,
    // The SDK cannot see it: it does not follow the learner's versions.
    ...typed(badOutput('future-version', { policyVersion: PUBLISHED_POLICY_VERSION + 1 })),
  },
  {
    name: 'key-mismatch',
    description: 'A valid output keyed by something other than its episode id, so it may sit on the wrong partition.',
    topic: 'agentOutputs',
    phase: 'outputs',
    expected: ReasonCode.KEY_MISMATCH,
    // The SDK keys every event by its episode id itself, so it cannot make this mistake.
    ...typed(badOutput('key', { ...at(60) }), 'not-the-episode'),
  },

  // ---- Time: ahead of the record's timestamp (the broker's clock), or behind the task's stream time. ----
  {
    name: 'clock-skew-future',
    description: 'An output stamped 2100-01-01, ahead of any record timestamp the broker takes (limit 10 s ahead of it).',
    topic: 'agentOutputs',
    phase: 'outputs',
    expected: ReasonCode.CLOCK_SKEW,
    // Not relative to CORPUS_T (2023): what counts is the record timestamp, stamped at send.
    ...typed(badOutput('future', { eventTimeMs: FAR_FUTURE_MS, startedAtMs: FAR_FUTURE_MS })),
  },
  {
    name: 'clock-skew-past',
    description: 'A transition 30 days behind the stream (limit 10 min).',
    topic: 'transitions',
    phase: 'transitions',
    expected: ReasonCode.CLOCK_SKEW,
    ...typed(badTransition('past', [0], { eventTimeMs: CORPUS_T - 30 * 86_400_000 })),
  },

  // ---- Relations between events. ----
  {
    name: 'duplicate-output-in-transition',
    description: 'A transition listing the same output twice.',
    topic: 'transitions',
    phase: 'transitions',
    expected: ReasonCode.DUPLICATE_OUTPUT_IN_TRANSITION,
    ...typed(badTransition('dup-list', [0, 0], {})),
    sdk: { field: 'Transition.consumedOutputIds[1]' },
  },
  {
    name: 'cardinality-mismatch',
    description: 'expectedCardinality 3 for a transition listing 2 outputs.',
    topic: 'transitions',
    phase: 'transitions',
    expected: ReasonCode.CARDINALITY_MISMATCH,
    ...typed(badTransition('cardinality', [0, 1], { expectedCardinality: 3 })),
    sdk: { field: 'Transition.expectedCardinality' },
  },
  {
    name: 'unknown-episode-outcome',
    description: 'An outcome of an episode that never has an output or transition; judged when the watermark passes its deadline.',
    topic: 'episodeOutcomes',
    phase: 'outputs',
    expected: ReasonCode.UNKNOWN_EPISODE,
    ...typed(badOutcome('unknown', { eventTimeMs: CORPUS_T + 300 })),
  },
  {
    name: 'foreign-episode-output',
    description: 'A transition of episode x-foreign listing v1/o0, an output of episode v1 whose set was already emitted.',
    topic: 'transitions',
    phase: 'late',
    expected: ReasonCode.FOREIGN_EPISODE_OUTPUT,
    ...typed({ type: 'Transition', value: transition('x-foreign', [], { consumedOutputIds: ['v1/o0'], expectedCardinality: 1, eventTimeMs: CORPUS_T + 300 }) }),
  },
  {
    name: 'output-claimed-twice',
    description: 'A second transition of episode v2 (v2/t1) claiming v2/o0, which v2/t0 already consumed.',
    topic: 'transitions',
    phase: 'late',
    expected: ReasonCode.OUTPUT_CLAIMED_TWICE,
    ...typed({ type: 'Transition', value: transition('v2', [0], { transitionId: 'v2/t1', step: 1, eventTimeMs: CORPUS_T + 300 }) }),
  },
  {
    name: 'conflicting-duplicate-transition',
    description: 'Transition v1/t0 again, with another observation digest: same id, different content.',
    topic: 'transitions',
    phase: 'late',
    expected: ReasonCode.CONFLICTING_DUPLICATE,
    ...typed({
      type: 'Transition',
      value: transition('v1', [0, 1], { groupKey: 'g1', expectedGroupSize: 3, eventTimeMs: CORPUS_T + 13, observationDigest: 'obs-tampered' }),
    }),
  },
  {
    name: 'conflicting-duplicate-output',
    description: 'Output v3/o1 again with other response tokens, after its set was emitted.',
    topic: 'agentOutputs',
    phase: 'late',
    expected: ReasonCode.CONFLICTING_DUPLICATE,
    ...typed({ type: 'AgentOutput', value: output('v3', 1, { ...at(31), policyVersion: PUBLISHED_POLICY_VERSION, responseTokenIds: [9, 9] }) }),
  },
  {
    name: 'conflicting-duplicate-outcome',
    description: 'A second outcome of episode v3 with reward 0 where the first said 1.',
    topic: 'episodeOutcomes',
    phase: 'late',
    expected: ReasonCode.CONFLICTING_DUPLICATE,
    ...typed({ type: 'EpisodeOutcome', value: outcome('v3', 0, { eventTimeMs: CORPUS_T + 32 }) }),
  },
  {
    name: 'superseded-outcome',
    description: 'Revision 0 of the outcome of episode v1, with reward 0, after its revision 1 (reward 1) was used.',
    topic: 'episodeOutcomes',
    phase: 'late',
    expected: ReasonCode.SUPERSEDED_OUTCOME,
    ...typed({ type: 'EpisodeOutcome', value: outcome('v1', 0, { eventTimeMs: CORPUS_T + 12, revision: 0 }) }),
  },
  {
    name: 'outcome-after-window',
    description: 'Revision 1 of the outcome of episode v2, after the watermark passed the end of its reward window (+23 ms + SRPO_SET_TTL_MS).',
    topic: 'episodeOutcomes',
    phase: 'clock2',
    expected: ReasonCode.OUTCOME_AFTER_WINDOW,
    ...typed({ type: 'EpisodeOutcome', value: outcome('v2', 1, { eventTimeMs: CORPUS_T + 20_000, revision: 1 }) }),
  },
];
