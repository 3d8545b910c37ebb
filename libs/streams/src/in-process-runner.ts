import * as avro from 'avsc';
import { SrpoError } from '@srpo/core';
import { DecodeError, EventCodec, RawRecord, ReasonCode } from '@srpo/events';
import { DerivingStore, KeyValueStore, StoreDerivations } from './key-value-store';
import { InputRecord, OutputRecord, Processor, ProcessorContext, storeDerivationsOf, Stores } from './processor';

/**
 * A store without transactions or changelog: an in-process replay keeps no
 * state beyond its own run, so there is nothing to fold in or roll back.
 */
export class MapStore<V> extends DerivingStore<V> implements KeyValueStore<V> {
  private readonly map = new Map<string, V>();

  constructor(
    readonly name: string,
    derivations: StoreDerivations<V> = {},
  ) {
    super(derivations);
  }

  get(key: string): V | undefined {
    return this.map.get(key);
  }

  has(key: string): boolean {
    return this.map.has(key);
  }

  put(key: string, value: V): void {
    this.map.set(key, value);
    this.derived.update(key, value);
  }

  delete(key: string): void {
    this.map.delete(key);
    this.derived.update(key, undefined);
  }

  entries(): IterableIterator<[string, V]> {
    return this.map.entries();
  }

  get size(): number {
    return this.map.size;
  }
}

/** Where an in-process task's effects go; the caller decides whether and when they reach Kafka. */
export interface InProcessSink {
  emit(task: number, output: OutputRecord): void;
  deadLetter(task: number, record: { key: string | null; raw: Buffer | null; source: InputRecord['source'] }, reasonCode: string, reason: string, details: Record<string, string>): void;
  count?(metric: string, labels?: Record<string, string>): void;
}

/**
 * One task of a processor run in-process, for replays: the same calls the
 * ConsumerRunner makes (decode, eventTime, process, dead-letter on a
 * non-retriable SrpoError, punctuate when the watermark moves), without Kafka
 * transactions or changelogs.
 *
 * The watermark follows the live runner's rule: the smallest latest event time
 * of the task's inputs that still have unread records in the replayed range
 * (an input not read yet holds it at -Infinity), never above stream time. The
 * live runner punctuates after each transaction chunk; this one after every
 * record whose watermark moved, so a deadline fires at the first record that
 * passes it, which is the live behaviour at chunk size 1.
 */
export class InProcessTask<S extends Stores> {
  readonly stores: S;
  streamTimeMs = 0;
  private lastPunctuatedWatermark = -Infinity;
  /** Per input: latest event time read and records of the range still unread. */
  private readonly inputs = new Map<string, { maxEventMs: number; remaining: number }>();
  private readonly ctx: ProcessorContext;

  constructor(
    readonly processor: Processor<S>,
    readonly task: number,
    private readonly sink: InProcessSink,
    /** Records of the replayed range per input topic of this task; an input not listed never holds the watermark back. */
    pending: ReadonlyMap<string, number> = new Map(),
  ) {
    const stores: Record<string, KeyValueStore<unknown>> = {};
    for (const name of processor.storeNames) stores[name] = new MapStore<unknown>(name, storeDerivationsOf(processor, name));
    this.stores = stores as unknown as S;
    for (const [topic, remaining] of pending) if (remaining > 0) this.inputs.set(topic, { maxEventMs: -Infinity, remaining });
    const self = this;
    this.ctx = {
      task,
      get streamTimeMs() {
        return self.streamTimeMs;
      },
      get watermarkMs() {
        return Math.min(self.lastPunctuatedWatermark, self.streamTimeMs);
      },
      emit: (o) => sink.emit(task, o),
      deadLetter: (record, reasonCode, reason, details = {}) => sink.deadLetter(task, { key: record.key, raw: record.raw, source: record.source }, reasonCode, reason, details),
      count: (metric, labels) => sink.count?.(`${processor.name}_${metric}`, labels),
    };
  }

  /** Processes a decoded record, or dead-letters undecodable bytes as the live runner does. */
  feedDecoded(d: DecodedRecord): void {
    if ('record' in d) return this.feed(d.record);
    const r = d.failed;
    this.consumed(r.topic, NaN);
    this.sink.deadLetter(this.task, { key: r.key === null ? null : r.key.toString('utf8'), raw: r.value, source: { topic: r.topic, partition: r.partition, offset: r.offset } }, d.reasonCode, d.reason, {});
    this.maybePunctuate();
  }

  feed(record: InputRecord): void {
    const t = this.processor.eventTime(record, this.streamTimeMs);
    const streamTimeBefore = this.streamTimeMs;
    const input = this.inputs.get(record.source.topic);
    const inputMaxBefore = input?.maxEventMs;
    if (Number.isFinite(t) && t > this.streamTimeMs) this.streamTimeMs = t;
    this.consumed(record.source.topic, t);
    try {
      this.processor.process(record, this.stores, this.ctx);
    } catch (e) {
      if (!(e instanceof SrpoError) || e.retriable) throw e;
      // As in the live runner: a refused record's timestamp is as untrusted as the rest of it.
      this.streamTimeMs = streamTimeBefore;
      if (input && inputMaxBefore !== undefined) input.maxEventMs = inputMaxBefore;
      const reason = (e.details?.reasonCode as string | undefined) ?? ReasonCode.INVALID_FIELD;
      this.sink.deadLetter(this.task, { key: record.key, raw: record.raw, source: record.source }, reason, e.message, e.field ? { field: e.field } : {});
    }
    this.maybePunctuate();
  }

  /** The range is read to its end: no input holds the watermark back any more (the live runner when caught up). */
  finish(): void {
    for (const input of this.inputs.values()) input.remaining = 0;
    this.maybePunctuate();
  }

  watermark(): number {
    let w = Infinity;
    for (const p of this.inputs.values()) if (p.remaining > 0) w = Math.min(w, p.maxEventMs);
    return Math.min(w, this.streamTimeMs);
  }

  private consumed(topic: string, eventTimeMs: number): void {
    const input = this.inputs.get(topic);
    if (!input) return;
    input.remaining--;
    if (Number.isFinite(eventTimeMs) && eventTimeMs > input.maxEventMs) input.maxEventMs = eventTimeMs;
  }

  private maybePunctuate(): void {
    if (!this.processor.punctuate) return;
    const w = this.watermark();
    if (w <= this.lastPunctuatedWatermark) return;
    this.lastPunctuatedWatermark = w;
    this.processor.punctuate(this.stores, this.ctx);
  }
}

/** A raw record decoded for a processor, or why it could not be. */
export type DecodedRecord = { record: InputRecord } | { failed: RawRecord; reasonCode: string; reason: string };

export function decodeRecord(codec: EventCodec, r: RawRecord): DecodedRecord {
  try {
    const event = codec.decode(r.value) as InputRecord['event'];
    return { record: { source: { topic: r.topic, partition: r.partition, offset: r.offset }, key: r.key === null ? null : r.key.toString('utf8'), event, raw: r.value ?? Buffer.alloc(0) } };
  } catch (e) {
    if (!(e instanceof DecodeError)) throw e;
    return { failed: r, reasonCode: e.reasonCode, reason: e.message };
  }
}

/** Event time carried by a decoded record (NaN when it has none or did not decode): the merge order's key. */
export function recordEventTime(d: DecodedRecord): number {
  if (!('record' in d)) return NaN;
  const t = (d.record.event.value as { eventTimeMs?: unknown }).eventTimeMs;
  return typeof t === 'number' ? t : NaN;
}

/**
 * Visits the records of several input partitions (each in offset order) in one
 * order that keeps every partition's offset order and otherwise goes by event
 * time: the smallest event time among the partitions' next records comes first
 * (ties: the order of `inputs`). Live consumers interleave partitions by
 * arrival, which follows event time; this is the closest reproducible order.
 * `prepare` (decoding) runs once per record, when it becomes its partition's
 * next; a record whose time is NaN goes as soon as it is next.
 */
export function* mergeByEventTime<R, D>(inputs: readonly (readonly R[])[], prepare: (r: R) => D, timeOf: (d: D) => number): Generator<D> {
  const pos = inputs.map(() => 0);
  const heads: (D | undefined)[] = inputs.map((records) => (records.length > 0 ? prepare(records[0]) : undefined));
  const times = heads.map((d) => (d === undefined ? Infinity : keyOf(timeOf(d))));
  for (;;) {
    let best = -1;
    let bestT = Infinity;
    for (let i = 0; i < inputs.length; i++) {
      if (heads[i] === undefined) continue;
      if (best < 0 || times[i] < bestT) {
        best = i;
        bestT = times[i];
      }
    }
    if (best < 0) return;
    const out = heads[best] as D;
    const records = inputs[best];
    const next = ++pos[best];
    if (next < records.length) {
      heads[best] = prepare(records[next]);
      times[best] = keyOf(timeOf(heads[best] as D));
    } else heads[best] = undefined;
    yield out;
  }
}

function keyOf(t: number): number {
  return Number.isNaN(t) ? -Infinity : t;
}

/**
 * avsc encodes into one shared 1 KiB scratch buffer and, when a value does not
 * fit, encodes it a second time into an exact-size buffer. Active sets and
 * advantage groups carry their members' outputs (KBs each), so a bulk replay
 * would encode nearly everything twice; a larger scratch buffer makes it once.
 * Process-wide and harmless (it only sizes scratch memory); never shrinks it.
 */
let avroScratchBytes = 1024;
export function reserveAvroScratch(bytes: number): void {
  if (bytes <= avroScratchBytes) return;
  avroScratchBytes = bytes;
  (avro.Type as unknown as { __reset(size: number): void }).__reset(bytes);
}
