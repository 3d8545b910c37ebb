import type { Logger } from '@srpo/core';
import type { DeadLetter, EventCodec } from '@srpo/events';
import { deadLetterOf, encodeDeadLetter } from './dead-letter';
import type { CountMetric } from './loop-mode';
import type { DeadLetterOriginal } from './stream-task';

/** A dead letter ready to write: to the dead-letter topic, keyed as the original. */
export interface DeadLetterRecord {
  topic: string;
  key: Buffer | null;
  value: Buffer;
}

/** Where the loop's dead letters go and what they say; the same for both modes. */
export interface DeadLetterSettings {
  /** Unset (sink mode only): dead letters are logged and skipped. */
  topic?: string;
  /** The `processor` field of dead letters. */
  processor: string;
  codec: EventCodec;
  maxBytes?: number;
}

/**
 * The consumer loop's dead letters: each one is counted (`deadletter_total`) and logged,
 * and becomes a record for the dead-letter topic; the mode decides how it is written (the
 * processor mode inside the chunk's transaction, the sink mode with acks=all before the
 * record's offset can be committed).
 */
export class LoopDeadLetters {
  constructor(
    private readonly settings: DeadLetterSettings,
    private readonly log: Logger,
    private readonly count: CountMetric,
    /** Wall clock for dead-letter timestamps (the runner's, never the processor's). */
    private readonly now: () => number,
  ) {}

  /** Counts and logs a dead letter; the record to write, or undefined when there is no dead-letter topic. */
  record(original: DeadLetterOriginal, reasonCode: string, reason: string, details: Record<string, string>): DeadLetterRecord | undefined {
    this.count('deadletter_total', { reason: reasonCode });
    this.log.warn('dead letter', { ...original.source, reasonCode, reason });
    const topic = this.settings.topic;
    if (!topic) return undefined;
    const key = typeof original.key === 'string' ? Buffer.from(original.key) : original.key;
    const dl = deadLetterOf({ key, value: original.raw, source: original.source }, reasonCode, reason, this.settings.processor, details, this.now());
    return { topic, key, value: this.encode(dl) };
  }

  private encode(dl: DeadLetter): Buffer {
    const { bytes, omitted } = encodeDeadLetter(this.settings.codec, dl, this.settings.maxBytes);
    if (omitted)
      this.log.warn('dead letter without its bytes: too large; they stay at the source coordinates', { ...dl.source, bytes: dl.originalValue?.length });
    return bytes;
  }
}
