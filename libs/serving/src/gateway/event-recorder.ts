import { errorMessage, ErrorCode, type Logger, SrpoError } from '@srpo/core';
import type { AgentEvent, AgentEventsProducer, EmitResult } from '@srpo/events';
import { OpenAiError } from '../openai-protocol';
import type { EventSpool } from './event-spool';

/**
 * How the gateway writes what it records: through the SDK (validated, idempotent producer,
 * acknowledged by Kafka), or to the spool when Kafka cannot take the events, every failure as
 * the agent's OpenAI error. Nothing is answered unrecorded.
 */
export class EventRecorder {
  constructor(
    private readonly sdk: AgentEventsProducer,
    /** Longest wait for Kafka's acknowledgement before the events count as not written. */
    private readonly recordTimeoutMs: number,
    private readonly spool: EventSpool | undefined,
    private readonly log: Logger,
  ) {}

  /**
   * Writes through the SDK and waits for Kafka's acknowledgement (at most `recordTimeoutMs`).
   * A refused event is the caller's 400 or the upstream's 502. Kafka failing is 503, unless a
   * spool takes the events; while the spool holds anything, new events queue behind it.
   */
  async emit(events: AgentEvent[]): Promise<EmitResult | 'spooled'> {
    const spool = this.spool;
    try {
      if (spool && spool.pending > 0) {
        this.sdk.validate(events);
        return this.toSpool(spool, events);
      }
      return await withTimeout(this.sdk.emitBatch(events), this.recordTimeoutMs);
    } catch (e) {
      if (e instanceof OpenAiError) throw e;
      if (e instanceof SrpoError && (e.code === ErrorCode.VALIDATION_FAILED || e.code === ErrorCode.PAYLOAD_TOO_LARGE)) {
        throw new OpenAiError(
          events[0].type === 'AgentOutput' ? 502 : 400,
          e.message,
          e.field ?? null,
          'invalid_event',
          events[0].type === 'AgentOutput' ? 'upstream_error' : 'invalid_request_error',
        );
      }
      if (spool) {
        this.log.warn('Kafka did not take the events; spooling them locally', { events: events.length, error: errorMessage(e) });
        return this.toSpool(spool, events);
      }
      this.log.warn('events could not be written to Kafka', { events: events.length, error: errorMessage(e) });
      throw new OpenAiError(
        503,
        `the events could not be recorded (${errorMessage(e)}); nothing was returned unrecorded, retry later`,
        null,
        'kafka_unavailable',
        'server_error',
      );
    }
  }

  /** Appends to the spool; a full spool is the client's 503, as Kafka down without one is. */
  private toSpool(spool: EventSpool, events: AgentEvent[]): 'spooled' {
    try {
      spool.append(events);
    } catch (e) {
      this.log.warn('the spool is full: the request is refused', { events: events.length, error: errorMessage(e) });
      throw new OpenAiError(
        503,
        `the events could not be recorded: ${errorMessage(e)}; nothing was returned unrecorded, retry later`,
        null,
        'spool_full',
        'server_error',
      );
    }
    return 'spooled';
  }
}

function withTimeout<T>(p: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new SrpoError(ErrorCode.UNAVAILABLE, `Kafka did not acknowledge within ${ms} ms`, { retriable: true })), ms);
  });
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}
