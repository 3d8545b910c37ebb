import type { AnyEvent, EventMap, EventType, KafkaCoordinates, ReasonCode } from '@srpo/events';
import type { KeyValueStore, StoreDerivations, StoreIndexes } from './key-value-store';

/** One decoded input record, with where it came from. */
export interface InputRecord {
  source: KafkaCoordinates;
  key: string | null;
  event: AnyEvent;
  /** The original bytes, kept for dead letters and for pass-through outputs. */
  raw: Buffer;
  /**
   * The record's Kafka timestamp (ms) as the client read it: the producer's CreateTime, which on
   * the raw topics the broker refused beyond `message.timestamp.after.max.ms` ahead of its clock;
   * -1 when the record has none. Part of the record, so a replay reads the same value:
   * processors may bound event time by it without reading a clock.
   */
  timestampMs: number;
}

/** An output a processor asks the runner to write in the current transaction. */
export type OutputRecord = {
  [T in EventType]: { topic: string; key: string; type: T; value: EventMap[T] };
}[EventType];

/**
 * What a processor may do besides reading and writing its stores. Everything
 * here is buffered and written by the runner inside the task's Kafka
 * transaction, so processors contain no kafkajs calls and no wall clock:
 * `streamTimeMs` (the largest event time the task has seen) is their only time.
 */
export interface ProcessorContext {
  /** Task = input partition number shared by the co-partitioned input topics. */
  readonly task: number;
  /** Largest event time seen by this task so far: the clock for clock-skew checks. */
  readonly streamTimeMs: number;
  /**
   * Event-time watermark for deadlines: the smallest of the latest event times of
   * the task's input partitions that still have unread records (partitions read to
   * their end do not hold it back). Never above `streamTimeMs`.
   */
  readonly watermarkMs: number;
  emit(output: OutputRecord): void;
  /**
   * Sends the record's original bytes to the dead-letter topic with a reason. Only its key,
   * bytes and coordinates go: a record kept in a store (without its timestamp) may be sent.
   */
  deadLetter(record: Pick<InputRecord, 'key' | 'raw' | 'source'>, reasonCode: ReasonCode, reason: string, details?: Record<string, string>): void;
  /** Increments a named counter (exposed as a metric by the app). */
  count(metric: string, labels?: Record<string, string>): void;
}

export type Stores = Record<string, KeyValueStore<unknown>>;

/** The value type of a store. */
export type StoreValue<T> = T extends KeyValueStore<infer V> ? V : never;

/** The indexes and schedule a processor declares for one of its stores, for whoever builds the stores. */
export function storeDerivationsOf<S extends Stores>(processor: Processor<S>, name: string): StoreDerivations<unknown> {
  const indexes = (processor.storeIndexes as Record<string, StoreIndexes<unknown> | undefined> | undefined)?.[name];
  const schedule = (processor.storeSchedules as Record<string, ((value: unknown) => number | undefined) | undefined> | undefined)?.[name];
  return { ...(indexes ? { indexes } : {}), ...(schedule ? { schedule } : {}) };
}

/**
 * A stream processor: a pure function of (record, stores, event time). It must
 * be idempotent on event id, since redelivery (after a crash) and replay both
 * hand it records it has seen before.
 */
export interface Processor<S extends Stores = Stores> {
  readonly name: string;
  /** Store names; each is backed by a compacted changelog topic. */
  readonly storeNames: (keyof S & string)[];
  /**
   * Stores whose values carry an input record's original bytes as
   * `{ source: KafkaCoordinates; raw?: Buffer; decoded?: unknown }`, or several records'
   * as `{ sourced: [...] }` (see `SourceBacked`). Their changelog keeps the
   * coordinates only and restore re-reads the bytes from the input topic (Kafka
   * Streams' source-topic changelog optimisation), so each input byte is written once.
   */
  readonly sourceBackedStores?: (keyof S & string)[];
  /**
   * Secondary indexes of stores (see `StoreIndexes`): derived from the values, never
   * changelogged, rebuilt on restore. Reached through the store's `lookup`.
   */
  readonly storeIndexes?: { [K in keyof S]?: StoreIndexes<StoreValue<S[K]>> };
  /**
   * When each value of a store next needs `punctuate` (event time; undefined: never), so a
   * deadline scan reads `store.due(watermark)` instead of walking every value. Derived like
   * the indexes.
   */
  readonly storeSchedules?: { [K in keyof S]?: (value: StoreValue<S[K]>) => number | undefined };
  /**
   * Event time of a record, for stream time. Return NaN for a record that must
   * not move stream time (e.g. one too far in the future: clock skew).
   */
  eventTime(record: InputRecord, streamTimeMs: number): number;
  /** Handles one record. Throwing a non-retriable error dead-letters the record. */
  process(record: InputRecord, stores: S, ctx: ProcessorContext): void;
  /**
   * Called once after a task's stores are restored (and source-backed ones hydrated),
   * before its first record: rewrites state changelogged by an earlier layout of the
   * processor into the current one. Its writes are committed with the task's first
   * transaction; on current state it should write nothing.
   */
  migrate?(stores: S): void;
  /**
   * The layout `migrate` brings state to. When set, the runtime records it in the task's
   * clock store once `migrate` ran, and skips `migrate` at later starts of state already in
   * this layout: with disk-backed stores a migration scan would otherwise read every value
   * at every start. Bump it when `migrate` learns a new layout.
   */
  readonly stateLayout?: number;
  /**
   * Fires event-time deadlines. Scheduled by the runtime on stream time (see `StreamTask`):
   * called once the watermark has moved at least `punctuationIntervalMs` since the last call,
   * with `ctx.watermarkMs` the watermark it fires at.
   */
  punctuate?(stores: S, ctx: ProcessorContext): void;
  /** Least watermark movement between two `punctuate` calls (default 0: every movement). */
  readonly punctuationIntervalMs?: number;
}
