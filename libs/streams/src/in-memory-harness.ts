import { SrpoError } from '@srpo/core';
import { EventCodec, ReasonCode } from '@srpo/events';
import { TransactionalStore } from './key-value-store';
import { InputRecord, OutputRecord, Processor, ProcessorContext, storeDerivationsOf, Stores } from './processor';

export interface HarnessDeadLetter {
  record: InputRecord;
  reasonCode: ReasonCode | string;
  reason: string;
  details: Record<string, string>;
}

/**
 * Runs a processor without Kafka: each `feed` is one "transaction" (process,
 * punctuate, commit the stores). For unit tests of processor logic; the real
 * runner adds decoding, changelogs and Kafka transactions around the same calls.
 * With one input the watermark equals stream time.
 */
export class ProcessorHarness<S extends Stores> {
  readonly stores: S;
  readonly outputs: OutputRecord[] = [];
  readonly deadLetters: HarnessDeadLetter[] = [];
  readonly counters = new Map<string, number>();
  streamTimeMs = 0;
  private offset = 0;

  constructor(
    readonly processor: Processor<S>,
    readonly task = 0,
  ) {
    const stores: Record<string, TransactionalStore<unknown>> = {};
    for (const name of processor.storeNames) stores[name] = new TransactionalStore(name, undefined, storeDerivationsOf(processor, name));
    this.stores = stores as unknown as S;
  }

  /** Wraps an event as a record on `topic` with increasing offsets. */
  record(topic: string, event: InputRecord['event'], key: string | null = null, codec?: EventCodec): InputRecord {
    const raw = codec ? codec.encode(event.type, event.value as never) : Buffer.alloc(0);
    return { source: { topic, partition: this.task, offset: this.offset++ }, key, event, raw };
  }

  feed(record: InputRecord): void {
    const ctx = this.context();
    const streamTimeBefore = this.streamTimeMs;
    const t = this.processor.eventTime(record, this.streamTimeMs);
    if (Number.isFinite(t) && t > this.streamTimeMs) this.streamTimeMs = t;
    try {
      this.processor.process(record, this.stores, ctx);
    } catch (e) {
      if (e instanceof SrpoError && !e.retriable) {
        // As in the runner: a refused record does not move event time.
        this.streamTimeMs = streamTimeBefore;
        ctx.deadLetter(record, (e.details?.reasonCode as ReasonCode) ?? ReasonCode.INVALID_FIELD, e.message, e.field ? { field: e.field } : {});
      } else throw e;
    }
    this.processor.punctuate?.(this.stores, ctx);
    for (const s of Object.values(this.stores)) (s as TransactionalStore<unknown>).commit();
  }

  feedAll(records: InputRecord[]): void {
    for (const r of records) this.feed(r);
  }

  /** Moves stream time forward without a record (as a later event would) and fires deadlines. */
  advanceTo(streamTimeMs: number): void {
    this.streamTimeMs = Math.max(this.streamTimeMs, streamTimeMs);
    this.processor.punctuate?.(this.stores, this.context());
    for (const s of Object.values(this.stores)) (s as TransactionalStore<unknown>).commit();
  }

  private context(): ProcessorContext {
    const self = this;
    return {
      task: this.task,
      get streamTimeMs() {
        return self.streamTimeMs;
      },
      get watermarkMs() {
        return self.streamTimeMs;
      },
      emit: (o) => this.outputs.push(o),
      deadLetter: (record, reasonCode, reason, details = {}) => this.deadLetters.push({ record, reasonCode, reason, details }),
      count: (metric, labels) => {
        const k = labels ? `${metric}${JSON.stringify(labels)}` : metric;
        this.counters.set(k, (this.counters.get(k) ?? 0) + 1);
      },
    };
  }
}
