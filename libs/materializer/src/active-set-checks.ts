import { SrpoError, ValidationError } from '@srpo/core';
import {
  AgentOutput,
  EpisodeOutcome,
  ReasonCode,
  TopicCatalog,
  Transition,
  validateAgentOutput,
  validateEpisodeOutcome,
  validateTransition,
} from '@srpo/events';
import { InputRecord, ProcessorContext } from '@srpo/streams';
import { ActiveSetProcessorOptions } from './active-set-options';

/*
 * The checks an event of the active-set join passes on its own, before the processor looks at
 * what it already holds: its topic, its shape and limits, its key and its event time. Each
 * failure throws the error the runner dead-letters under its reason code.
 */

/** A rejected event; the runner dead-letters it under `reason`. */
export function relationError(reason: ReasonCode, field: string, message: string): SrpoError {
  return new ValidationError(field, message, { reasonCode: reason });
}

/**
 * Each raw topic carries one event type. Topics are compared by their name without the
 * catalog prefix, because re-materialization feeds records of another prefix's topics.
 */
export function checkTopic(record: InputRecord, topics: TopicCatalog): void {
  const home: Partial<Record<string, string>> = {
    AgentOutput: topics.agentOutputs.name.slice(topics.prefix.length),
    Transition: topics.transitions.name.slice(topics.prefix.length),
    EpisodeOutcome: topics.episodeOutcomes.name.slice(topics.prefix.length),
  };
  const suffix = home[record.event.type];
  if (suffix !== undefined && !record.source.topic.endsWith(suffix)) {
    throw relationError(ReasonCode.WRONG_EVENT_TYPE, 'event', `${record.event.type} events do not belong on ${record.source.topic}`);
  }
}

/**
 * Why an event's time is not to be believed, or undefined: it is more than `maxBrokerSkewMs`
 * ahead of its record's Kafka timestamp, or the record has none. Producers choose event time;
 * the broker refuses record timestamps ahead of its clock (the raw topics'
 * `message.timestamp.after.max.ms`), so no producer moves stream time further than both bounds
 * past that clock, not even with the first event of a fresh task (which has no stream time yet).
 */
export function brokerSkewOf(record: InputRecord, eventTimeMs: number, options: ActiveSetProcessorOptions): string | undefined {
  const brokerMs = record.timestampMs;
  if (!(brokerMs >= 0)) return `${eventTimeMs} cannot be checked: the record has no timestamp (${brokerMs})`;
  if (eventTimeMs > brokerMs + options.maxBrokerSkewMs) {
    return `${eventTimeMs} is ${eventTimeMs - brokerMs} ms ahead of its record timestamp ${brokerMs} (allowed: ${options.maxBrokerSkewMs} ms)`;
  }
  return undefined;
}

/**
 * The record is keyed by its episode, and its event time is within the skew bound of its record
 * timestamp and the lateness bound of stream time. Each refusal is counted as
 * `clock_skew_total{type, bound}` (bound: `broker`, `late`), beside the dead letter.
 */
function checkCommon(
  record: InputRecord,
  episodeId: string,
  eventTimeMs: number,
  ctx: ProcessorContext,
  kind: string,
  options: ActiveSetProcessorOptions,
): void {
  if (record.key !== episodeId) {
    throw relationError(
      ReasonCode.KEY_MISMATCH,
      `${kind}.episodeId`,
      `Kafka key ${JSON.stringify(record.key)} is not the episode id ${JSON.stringify(episodeId)}; co-partitioning needs episode-id keys`,
    );
  }
  const skew = (bound: 'broker' | 'late', message: string): SrpoError => {
    ctx.count('clock_skew_total', { type: kind, bound });
    return relationError(ReasonCode.CLOCK_SKEW, `${kind}.eventTimeMs`, message);
  };
  const aheadOfBroker = brokerSkewOf(record, eventTimeMs, options);
  if (aheadOfBroker !== undefined) throw skew('broker', aheadOfBroker);
  // Nothing bounds event time by stream time from above: the record timestamp is the clock, and
  // a partition idle for hours must take its next event (an allowance relative to stream time
  // refused every event after an idle hour, for good).
  const now = ctx.streamTimeMs;
  if (now > 0 && eventTimeMs < now - options.maxLatenessMs) {
    throw skew('late', `${eventTimeMs} is ${now - eventTimeMs} ms behind stream time ${now}`);
  }
}

/** An output: valid, keyed and timed as its episode, and of no policy version its learner has not published. */
export function checkOutputEvent(record: InputRecord, output: AgentOutput, ctx: ProcessorContext, options: ActiveSetProcessorOptions): void {
  validateAgentOutput(output, options.limits);
  checkCommon(record, output.episodeId, output.eventTimeMs, ctx, 'AgentOutput', options);
  const latest = options.latestPolicyVersion?.(output.policyId);
  if (latest !== undefined && output.policyVersion > latest) {
    throw relationError(
      ReasonCode.FUTURE_POLICY_VERSION,
      'AgentOutput.policyVersion',
      `is ${output.policyVersion} but the newest version of policy ${output.policyId} its learner published is ${latest}`,
    );
  }
}

/** A transition: each consumed output listed once and counted by `expectedCardinality`, valid, keyed and timed as its episode. */
export function checkTransitionEvent(record: InputRecord, t: Transition, ctx: ProcessorContext, options: ActiveSetProcessorOptions): void {
  const ids = t.consumedOutputIds ?? [];
  const dup = ids.findIndex((id, i) => ids.indexOf(id) !== i);
  if (dup >= 0) throw relationError(ReasonCode.DUPLICATE_OUTPUT_IN_TRANSITION, `Transition.consumedOutputIds[${dup}]`, `lists output ${ids[dup]} twice`);
  if (t.expectedCardinality !== ids.length) {
    throw relationError(
      ReasonCode.CARDINALITY_MISMATCH,
      'Transition.expectedCardinality',
      `is ${t.expectedCardinality} but consumedOutputIds lists ${ids.length}`,
    );
  }
  validateTransition(t, options.limits);
  checkCommon(record, t.episodeId, t.eventTimeMs, ctx, 'Transition', options);
}

/** An outcome: valid, keyed and timed as its episode. */
export function checkOutcomeEvent(record: InputRecord, o: EpisodeOutcome, ctx: ProcessorContext, options: ActiveSetProcessorOptions): void {
  validateEpisodeOutcome(o, options.limits);
  checkCommon(record, o.episodeId, o.eventTimeMs, ctx, 'EpisodeOutcome', options);
}
