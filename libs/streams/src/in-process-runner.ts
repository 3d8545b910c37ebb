import * as avro from 'avsc';
import { DerivingStore, KeyValueStore, StoreDerivations } from './key-value-store';
import { InputRecord, OutputRecord, Processor, storeDerivationsOf, Stores } from './processor';
import { DecodedRecord, StreamTask, TaskSink } from './stream-task';

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
  deadLetter(
    task: number,
    record: { key: string | null; raw: Buffer | null; source: InputRecord['source'] },
    reasonCode: string,
    reason: string,
    details: Record<string, string>,
  ): void;
  count?(metric: string, labels?: Record<string, string>): void;
}

/**
 * One task of a processor run in-process, for replays: the processor's `StreamTask` over
 * map stores, without Kafka transactions or changelogs.
 *
 * Input progress is the replayed range: an input holds the watermark back while it has
 * records of the range still unread (one not read yet holds it at -Infinity), as the live
 * runner's inputs do until they are caught up. Each record is its own commit point, so the
 * schedule is checked after every record: the live runner at a chunk size of 1.
 */
export class InProcessTask<S extends Stores> {
  readonly stores: S;
  private readonly streamTask: StreamTask<S>;
  /** Records of the range still unread, per input. */
  private readonly remaining = new Map<string, number>();

  constructor(
    readonly processor: Processor<S>,
    readonly task: number,
    sink: InProcessSink,
    /** Records of the replayed range per input topic of this task; an input not listed never holds the watermark back. */
    pending: ReadonlyMap<string, number> = new Map(),
  ) {
    const stores: Record<string, KeyValueStore<unknown>> = {};
    for (const name of processor.storeNames) stores[name] = new MapStore<unknown>(name, storeDerivationsOf(processor, name));
    this.stores = stores as unknown as S;
    const inputs = [...pending].filter(([, n]) => n > 0).map(([topic]) => topic);
    for (const topic of inputs) this.remaining.set(topic, pending.get(topic) as number);
    const taskSink: TaskSink = {
      emit: (o) => sink.emit(task, o),
      deadLetter: (original, reasonCode, reason, details) =>
        sink.deadLetter(
          task,
          { key: Buffer.isBuffer(original.key) ? original.key.toString('utf8') : original.key, raw: original.raw, source: original.source },
          reasonCode,
          reason,
          details,
        ),
      count: (metric, labels) => sink.count?.(`${processor.name}_${metric}`, labels),
    };
    this.streamTask = new StreamTask(processor, task, this.stores, taskSink, { inputs });
  }

  get streamTimeMs(): number {
    return this.streamTask.streamTimeMs;
  }

  /** Processes a decoded record, or dead-letters undecodable bytes, then punctuates when due. */
  feedDecoded(d: DecodedRecord): void {
    const topic = 'record' in d ? d.record.source.topic : d.failed.topic;
    // The record is read before it is processed, as the live runner's position moves with its chunk.
    const left = this.remaining.get(topic);
    if (left !== undefined) {
      this.remaining.set(topic, left - 1);
      if (left - 1 <= 0) this.streamTask.setUnread(topic, false);
    }
    this.streamTask.feed(d);
    this.streamTask.punctuate();
  }

  feed(record: InputRecord): void {
    this.feedDecoded({ record });
  }

  /** The range is read to its end: no input holds the watermark back any more (the live runner when caught up). */
  finish(): void {
    for (const topic of this.remaining.keys()) {
      this.remaining.set(topic, 0);
      this.streamTask.setUnread(topic, false);
    }
    this.streamTask.punctuate();
  }

  watermark(): number {
    return this.streamTask.watermark();
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
