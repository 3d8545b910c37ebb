/**
 * The Kafka client as the stream runtime sees it: what {@link ConsumerRunner} needs for
 * exactly-once processing and for its sink mode (plain offset commits after an external
 * write, pause/resume), and nothing more. Two implementations sit behind it:
 * `kafkajs` (the default) and `@platformatic/kafka`; `createStreamClient` picks one by name
 * (`SRPO_KAFKA_CLIENT`). The runner's loop, restore, fencing and punctuation are written once
 * against this interface, so a client is compared on the same code (bench/materializer).
 *
 * Changelog restore and source hydration read through kafkajs in either case (`@srpo/events`'
 * topic reader): they run once per task start, not per record.
 */

/** One fetched input record. Offsets are numbers: a partition's offsets stay below 2^53. */
export interface FetchedRecord {
  offset: number;
  key: Buffer | null;
  value: Buffer | null;
  timestampMs: number;
}

/** Consecutive records of one input partition, handed over in offset order. */
export interface InputBatch {
  topic: string;
  partition: number;
  records: FetchedRecord[];
  /** False once the batch is stale (a rebalance, a seek, the consumer stopping): stop processing it. */
  isActive(): boolean;
  /** Records up to `offset` are done: the client will not hand them over again unless sought back. */
  resolve(offset: number): void;
  /** Keeps the group membership alive during long batches (a no-op where the client heartbeats by itself). */
  heartbeat(): Promise<void>;
}

export interface ConsumerHandlers {
  /** Called for one batch at a time; the next batch waits for the returned promise. */
  onBatch(batch: InputBatch): Promise<void>;
  /** The input partitions this member owns after a rebalance (the same numbers for every co-partitioned topic). */
  onAssignment(partitions: ReadonlySet<number>): void;
  /** The consumer stopped for good (it does not restart by itself): the runner replaces it. */
  onFatal(error: Error): void;
}

export interface GroupConsumerOptions {
  groupId: string;
  /** Co-partitioned inputs: partition p of every topic goes to the same member. */
  topics: string[];
  sessionTimeoutMs: number;
  heartbeatIntervalMs: number;
  rebalanceTimeoutMs: number;
  /** Longest a fetch waits for records. */
  maxWaitMs: number;
}

/** A group member reading committed records only (read_committed) from the committed offsets. */
export interface GroupConsumer {
  start(handlers: ConsumerHandlers): Promise<void>;
  /** Rewinds one partition: its next batch starts at `offset`. */
  seek(topic: string, partition: number, offset: number): void;
  /**
   * Commits the group's position `nextOffset` (the first record not yet done) for one
   * partition, outside any transaction: the sink mode's commit, after its external write.
   */
  commit(topic: string, partition: number, nextOffset: number): Promise<void>;
  /** Hands over no further batches (the one in progress finishes) until {@link resume}; membership stays. */
  pause(): void;
  resume(): void;
  stop(): Promise<void>;
}

/** One record to produce; without a partition, the key's murmur2 partition (Java-compatible, as kafkajs's default). */
export interface OutgoingRecord {
  topic: string;
  key: Buffer | string | null;
  /** Null: a tombstone (a changelog delete). */
  value: Buffer | null;
  partition?: number;
}

/** Where the broker put a produced batch of one topic partition. */
export interface ProducedBatch {
  topic: string;
  partition: number;
  baseOffset: number;
}

export interface StreamTransaction {
  /** Sends records (acks=all) and resolves with where they landed, one entry per topic partition request. */
  send(records: OutgoingRecord[]): Promise<ProducedBatch[]>;
  /** Commits the consumer group's position `nextOffset` for one input partition inside the transaction. */
  sendOffsets(groupId: string, topic: string, partition: number, nextOffset: number): Promise<void>;
  commit(): Promise<void>;
  abort(): Promise<void>;
}

/**
 * A transactional producer with a stable id. Creating it (initProducerId) bumps the epoch:
 * any earlier producer with the id is fenced and its open transaction aborted.
 */
export interface TransactionalProducer {
  begin(): Promise<StreamTransaction>;
  close(): Promise<void>;
}

export interface PartitionOffsets {
  partition: number;
  low: number;
  high: number;
}

export interface NewTopic {
  topic: string;
  partitions: number;
  configs: Record<string, string>;
}

export interface StreamAdmin {
  /** Low and high watermarks (read_uncommitted high: it includes the last commit marker). */
  endOffsets(topic: string): Promise<PartitionOffsets[]>;
  /** The group's committed positions, keyed `topic:partition`; absent where it has none. */
  committedOffsets(groupId: string, topics: string[]): Promise<Map<string, number>>;
  listTopics(): Promise<string[]>;
  /** Creates topics (replication: the broker's default); one that already exists is not an error. */
  createTopics(topics: NewTopic[]): Promise<void>;
  close(): Promise<void>;
}

export interface StreamClient {
  /** `kafkajs` or `platformatic`: logged and reported by benchmarks. */
  readonly name: StreamClientName;
  groupConsumer(options: GroupConsumerOptions): GroupConsumer;
  /** Connects a transactional producer and initialises its id (fencing earlier owners). */
  transactionalProducer(transactionalId: string, options: { transactionTimeoutMs: number }): Promise<TransactionalProducer>;
  admin(): Promise<StreamAdmin>;
  /** Whether an error says this producer was fenced by a newer one with its id (never retry with it). */
  isFencing(error: unknown): boolean;
  /** Whether an operation that failed with this error may succeed if retried with a fresh producer. */
  isRetriable(error: unknown): boolean;
}

export const STREAM_CLIENT_NAMES = ['kafkajs', 'platformatic'] as const;
export type StreamClientName = (typeof STREAM_CLIENT_NAMES)[number];
