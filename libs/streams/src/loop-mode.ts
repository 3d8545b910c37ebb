import type { Logger } from '@srpo/core';
import type { InputBatch, StreamClient } from './client/stream-client';
import type { LoopConsumer } from './loop-consumer';
import type { LoopDeadLetters } from './loop-dead-letters';

/** Counter sink (metrics). */
export type CountMetric = (metric: string, labels?: Record<string, string>) => void;

/** What {@link ConsumerRunner} lends its mode: the client, the current consumer, dead letters, log and counters. */
export interface LoopContext {
  readonly client: StreamClient;
  /** Seeks and commits go to whichever consumer is current (it is replaced after a crash). */
  readonly consumer: LoopConsumer;
  readonly deadLetters: LoopDeadLetters;
  readonly log: Logger;
  readonly count: CountMetric;
  /** True once the runner is stopping: a mode ends long work (chunks, write retries) early. */
  stopping(): boolean;
}

/**
 * One of the consumer loop's two modes (processor or sink): what it does with a fetched
 * batch (phases 1-5 of {@link ConsumerRunner}) and what it holds across the consumer's
 * lifecycle. The runner calls these in this order: `open`, `afterStart`, then
 * `onAssignment`/`onBatch` as the consumer hands them over, `reset` whenever a crashed
 * consumer is replaced, and `stopBackground`, `close` on stop.
 */
export interface LoopMode {
  /** Before the consumer starts: what the mode writes to (changelog topics, the dead-letter producer). */
  open(): Promise<void>;
  /** After the consumer started: what runs beside it (the processor mode's idle poll). */
  afterStart(): Promise<void>;
  /** The partitions this member owns after a rebalance, before their batches. */
  onAssignment(partitions: ReadonlySet<number>): void;
  /** One fetched batch: non-empty, still active, and the runner not stopping. */
  onBatch(batch: InputBatch): Promise<void>;
  /** The consumer crashed and is being replaced: drop what the new one reads again from the committed offsets. */
  reset(): Promise<void>;
  /** First step of stopping, before the consumer stops: timers and admin clients. */
  stopBackground(): Promise<void>;
  /** Last step of stopping, after the consumer stopped: producers, tasks and their stores. */
  close(): Promise<void>;
}
