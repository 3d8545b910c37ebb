import { SrpoError } from '@srpo/core';
import { DecodeError, EventCodec, KafkaCoordinates, RawRecord, ReasonCode } from '@srpo/events';
import { InputRecord, OutputRecord, Processor, ProcessorContext, Stores } from './processor';

/** The original of a dead letter: its key and bytes as they were read, and where. */
export interface DeadLetterOriginal {
  key: Buffer | string | null;
  raw: Buffer | null;
  source: KafkaCoordinates;
}

/**
 * Where a task's effects go. The live runner buffers them into the open Kafka
 * transaction, a replay hands them to its caller, the test harness keeps them.
 */
export interface TaskSink {
  emit(output: OutputRecord): void;
  deadLetter(original: DeadLetterOriginal, reasonCode: string, reason: string, details: Record<string, string>): void;
  /** A processor's counter as the processor names it (a metrics sink prefixes the processor's name). */
  count(metric: string, labels?: Record<string, string>): void;
}

/**
 * A task's clock: what the runtime persists beside the stores (the live runner in its
 * `__meta` changelog) so that a restarted task resumes with the same time.
 */
export interface TaskClock {
  /** Largest event time the task accepted. */
  streamTimeMs: number;
  /** Per input topic: largest event time read from its partition. */
  maxEventMs: Record<string, number>;
  /** Watermark at which `punctuate` last ran; undefined before the first punctuation. */
  punctuatedAtMs?: number;
}

/** A raw record decoded for a processor, or why it could not be. */
export type DecodedRecord = { record: InputRecord } | { failed: RawRecord; reasonCode: string; reason: string };

/** Phase 2, decode: Avro single-object decoding; undecodable bytes come back as `failed`. */
export function decodeRecord(codec: EventCodec, r: RawRecord): DecodedRecord {
  try {
    const event = codec.decode(r.value) as InputRecord['event'];
    return {
      record: {
        source: { topic: r.topic, partition: r.partition, offset: r.offset },
        key: r.key === null ? null : r.key.toString('utf8'),
        event,
        raw: r.value ?? Buffer.alloc(0),
        timestampMs: r.timestampMs,
      },
    };
  } catch (e) {
    if (!(e instanceof DecodeError)) throw e;
    return { failed: r, reasonCode: e.reasonCode, reason: e.message };
  }
}

interface InputState {
  maxEventMs: number;
  /** Whether the input still has records to read: only those hold the watermark back. */
  unread: boolean;
}

/**
 * One task of a processor (one partition of its co-partitioned inputs): the per-record
 * phases and the punctuation schedule, the same for the live runner, the in-process
 * replay and the unit-test harness, which differ only in where records come from, which
 * stores they pass in and where effects go.
 *
 * Per record (`feed`):
 *   - decode failures are dead-lettered and move no clock;
 *   - `eventTime` moves stream time and the input's latest event time (NaN moves nothing);
 *   - `process` runs; a non-retriable `SrpoError` dead-letters the record and takes back
 *     the time it moved (a refused record's timestamp is as untrusted as the rest of it);
 *     any other error is rethrown with the record's time taken back, for the runtime to
 *     roll back or retry its whole unit of work.
 *
 * Punctuation (`punctuate`) is scheduled by stream time, as Kafka Streams'
 * `schedule(interval, STREAM_TIME, ...)`: the runtime calls it at each of its commit points
 * (the live runner after each transaction chunk and when an idle input's watermark moves;
 * replay and the harness after each record), and it fires when the watermark has moved at
 * least the processor's `punctuationIntervalMs` since the last firing (the first time as
 * soon as the watermark is finite). The time of the last firing is part of the task's
 * clock, persisted by the runtime, so processors keep no timers in their stores.
 *
 * The watermark is the smallest latest event time among inputs that still have unread
 * records (inputs read to their end do not hold it back), never above stream time; a task
 * that tracks no inputs has its stream time as watermark.
 */
export class StreamTask<S extends Stores> {
  private streamTime: number;
  private punctuatedAt: number | undefined;
  private readonly inputs = new Map<string, InputState>();
  private readonly ctx: ProcessorContext;

  constructor(
    readonly processor: Processor<S>,
    readonly task: number,
    readonly stores: S,
    private readonly sink: TaskSink,
    options: { inputs?: readonly string[]; clock?: TaskClock } = {},
  ) {
    const clock = options.clock;
    this.streamTime = clock?.streamTimeMs ?? 0;
    this.punctuatedAt = clock?.punctuatedAtMs;
    for (const topic of options.inputs ?? []) this.inputs.set(topic, { maxEventMs: clock?.maxEventMs[topic] ?? -Infinity, unread: true });
    // The getters read the task's clock as it moves; in a getter `this` is the context, so arrows bring the task's.
    const streamTime = () => this.streamTime;
    const punctuatedAt = () => this.punctuatedAt;
    this.ctx = {
      task,
      get streamTimeMs() {
        return streamTime();
      },
      get watermarkMs() {
        return Math.min(punctuatedAt() ?? -Infinity, streamTime());
      },
      emit: (o) => sink.emit(o),
      deadLetter: (record, reasonCode, reason, details = {}) =>
        sink.deadLetter({ key: record.key, raw: record.raw, source: record.source }, reasonCode, reason, details),
      count: (metric, labels) => sink.count(metric, labels),
    };
  }

  get streamTimeMs(): number {
    return this.streamTime;
  }

  /** Phases 2–3 for one record: decode failures are dead-lettered; the rest is processed. */
  feed(d: DecodedRecord): void {
    if ('record' in d) return this.process(d.record);
    const r = d.failed;
    this.sink.deadLetter({ key: r.key, raw: r.value, source: { topic: r.topic, partition: r.partition, offset: r.offset } }, d.reasonCode, d.reason, {});
  }

  /** Phase 3 for a decoded record: event time, then `process`, dead-lettering a refusal. */
  process(record: InputRecord): void {
    const input = this.inputs.get(record.source.topic);
    const streamTimeBefore = this.streamTime;
    const inputMaxBefore = input?.maxEventMs;
    const t = this.processor.eventTime(record, this.streamTime);
    if (Number.isFinite(t)) {
      if (t > this.streamTime) this.streamTime = t;
      if (input && t > input.maxEventMs) input.maxEventMs = t;
    }
    try {
      this.processor.process(record, this.stores, this.ctx);
    } catch (e) {
      this.streamTime = streamTimeBefore;
      if (input && inputMaxBefore !== undefined) input.maxEventMs = inputMaxBefore;
      if (!(e instanceof SrpoError) || e.retriable) throw e;
      const reason = (e.details?.reasonCode as string | undefined) ?? ReasonCode.INVALID_FIELD;
      this.sink.deadLetter({ key: record.key, raw: record.raw, source: record.source }, reason, e.message, e.field ? { field: e.field } : {});
    }
  }

  /** Dead-letters a decoded record without processing it (the runtime's verdict: a poison record); moves no clock. */
  deadLetter(record: InputRecord, reasonCode: string, reason: string, details: Record<string, string>): void {
    this.sink.deadLetter({ key: record.key, raw: record.raw, source: record.source }, reasonCode, reason, details);
  }

  /** Moves stream time forward without a record, as a later event would (the harness's `advanceTo`). */
  advanceStreamTime(streamTimeMs: number): void {
    if (streamTimeMs > this.streamTime) this.streamTime = streamTimeMs;
  }

  /** Tells the task whether `topic` still has records to read; only unread inputs hold the watermark back. */
  setUnread(topic: string, unread: boolean): void {
    const input = this.inputs.get(topic);
    if (input) input.unread = unread;
  }

  watermark(): number {
    let w = Infinity;
    for (const input of this.inputs.values()) if (input.unread) w = Math.min(w, input.maxEventMs);
    return Math.min(w, this.streamTime);
  }

  /** Whether `punctuate` would fire now. */
  punctuationDue(): boolean {
    if (!this.processor.punctuate) return false;
    const w = this.watermark();
    if (!Number.isFinite(w)) return false;
    if (this.punctuatedAt === undefined) return true;
    return w > this.punctuatedAt && w - this.punctuatedAt >= (this.processor.punctuationIntervalMs ?? 0);
  }

  /** The schedule: fires the processor's deadlines when due (see the class comment). Returns whether it fired. */
  punctuate(): boolean {
    if (!this.punctuationDue()) return false;
    this.punctuatedAt = this.watermark();
    this.processor.punctuate?.(this.stores, this.ctx);
    return true;
  }

  /** Runs the processor's `migrate` on restored stores (before the first record). */
  migrate(): void {
    this.processor.migrate?.(this.stores);
  }

  /** The clock, to persist with a commit or to take back on abort (`restoreClock`). */
  clock(): TaskClock {
    const maxEventMs: Record<string, number> = {};
    for (const [topic, input] of this.inputs) maxEventMs[topic] = input.maxEventMs;
    return { streamTimeMs: this.streamTime, maxEventMs, ...(this.punctuatedAt !== undefined ? { punctuatedAtMs: this.punctuatedAt } : {}) };
  }

  /** Takes the clock back to a `clock()` snapshot (an aborted transaction's). */
  restoreClock(clock: TaskClock): void {
    this.streamTime = clock.streamTimeMs;
    this.punctuatedAt = clock.punctuatedAtMs;
    for (const [topic, input] of this.inputs) input.maxEventMs = clock.maxEventMs[topic] ?? -Infinity;
  }
}
