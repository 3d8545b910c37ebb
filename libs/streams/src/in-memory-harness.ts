import { EventCodec, ReasonCode } from '@srpo/events';
import { TransactionalStore } from './key-value-store';
import { InputRecord, OutputRecord, Processor, storeDerivationsOf, Stores } from './processor';
import { DeadLetterOriginal, StreamTask } from './stream-task';

export interface HarnessDeadLetter {
  record: DeadLetterOriginal;
  reasonCode: ReasonCode | string;
  reason: string;
  details: Record<string, string>;
}

/**
 * Runs a processor's `StreamTask` without Kafka, for unit tests of processor logic: each
 * `feed` is one transaction of one record (process, punctuate when due, commit the stores),
 * which is what the live runner does at a chunk size of 1. Records carry no input progress,
 * so the watermark is stream time.
 */
export class ProcessorHarness<S extends Stores> {
  readonly stores: S;
  readonly outputs: OutputRecord[] = [];
  readonly deadLetters: HarnessDeadLetter[] = [];
  readonly counters = new Map<string, number>();
  readonly streamTask: StreamTask<S>;
  private offset = 0;

  constructor(
    readonly processor: Processor<S>,
    readonly task = 0,
  ) {
    const stores: Record<string, TransactionalStore<unknown>> = {};
    for (const name of processor.storeNames) stores[name] = new TransactionalStore(name, undefined, storeDerivationsOf(processor, name));
    this.stores = stores as unknown as S;
    this.streamTask = new StreamTask(processor, task, this.stores, {
      emit: (o) => this.outputs.push(o),
      deadLetter: (record, reasonCode, reason, details) => this.deadLetters.push({ record, reasonCode, reason, details }),
      count: (metric, labels) => {
        const k = labels ? `${metric}${JSON.stringify(labels)}` : metric;
        this.counters.set(k, (this.counters.get(k) ?? 0) + 1);
      },
    });
  }

  get streamTimeMs(): number {
    return this.streamTask.streamTimeMs;
  }

  /**
   * Wraps an event as a record on `topic` with increasing offsets. Its Kafka timestamp is
   * `options.timestampMs`, by default the event's own time (a producer whose clock agrees with
   * the broker's), or -1 (none) for an event without one.
   */
  record(topic: string, event: InputRecord['event'], key: string | null = null, codec?: EventCodec, options: { timestampMs?: number } = {}): InputRecord {
    const raw = codec ? codec.encode(event.type, event.value) : Buffer.alloc(0);
    const eventTimeMs = (event.value as { eventTimeMs?: unknown }).eventTimeMs;
    const timestampMs = options.timestampMs ?? (typeof eventTimeMs === 'number' ? eventTimeMs : -1);
    return { source: { topic, partition: this.task, offset: this.offset++ }, key, event, raw, timestampMs };
  }

  feed(record: InputRecord): void {
    this.streamTask.process(record);
    this.commit();
  }

  feedAll(records: InputRecord[]): void {
    for (const r of records) this.feed(r);
  }

  /** Moves stream time forward without a record (as a later event would) and fires deadlines when due. */
  advanceTo(streamTimeMs: number): void {
    this.streamTask.advanceStreamTime(streamTimeMs);
    this.commit();
  }

  private commit(): void {
    this.streamTask.punctuate();
    for (const s of Object.values(this.stores)) (s as TransactionalStore<unknown>).commit();
  }
}
