import * as fs from 'fs';
import type { Kafka } from 'kafkajs';
import type * as Platformatic from '@platformatic/kafka';
import type { KafkaConnectionOptions } from '@srpo/events';
import { ConfigError, ErrorCode, errorMessage, isRetriable, SrpoError } from '@srpo/core';
import { coPartitionAssignment } from '../co-partition-assigner';
import { keyPartition } from '../bulk-io';
import { KafkajsStreamClient } from './kafkajs-stream-client';
import { PartitionBuffers } from './partition-buffers';
import type {
  ConsumerHandlers,
  GroupConsumer,
  GroupConsumerOptions,
  OutgoingRecord,
  ProducedBatch,
  StreamAdmin,
  StreamClient,
  StreamTransaction,
  TransactionalProducer,
} from './stream-client';

type Pk = typeof Platformatic;
type PkConsumer = Platformatic.Consumer<Buffer, Buffer, Buffer, Buffer>;
type PkProducer = Platformatic.Producer<Buffer, Buffer, Buffer, Buffer>;
type PkStream = Platformatic.MessagesStream<Buffer, Buffer, Buffer, Buffer>;

/**
 * The package is ESM-only. It is loaded on first use with Node's require(esm) (Node ≥ 20.19),
 * so processes that never pick this client never load it; in jest too (see `nodeRequire`).
 */
let loaded: Pk | undefined;
function platformatic(): Pk {
  // Node's own require, reached through process.getBuiltinModule (Node ≥ 20.16): a loader
  // that wraps `require` (jest's does) cannot load an ES module, Node's can.
  loaded ??= nodeRequire()('@platformatic/kafka') as Pk;
  return loaded;
}

function nodeRequire(): NodeJS.Require {
  const builtin = (process as unknown as { getBuiltinModule?: (name: 'module') => typeof import('module') }).getBuiltinModule;

  return builtin ? builtin('module').createRequire(__filename) : require;
}

/** Buffered records per consumer before its stream is paused (it resumes once they are handed over). */
const MAX_BUFFERED = 20_000;

/**
 * The runtime's client on `@platformatic/kafka` 1.x for the hot path: the group consumer and
 * the transactional producers. Admin requests (end offsets at the idle poll, committed
 * offsets at task start, changelog topics) go through kafkajs, as do restore reads.
 *
 * Fencing is the same as on kafkajs (one producer per task with a stable id, initialised
 * before restore); in addition, offsets are committed with the consumer's generation and
 * member id (KIP-447), so the broker also refuses a commit from a member that lost the
 * partition in a rebalance.
 */
export class PlatformaticStreamClient implements StreamClient {
  readonly name = 'platformatic' as const;
  private readonly admins: KafkajsStreamClient;
  /** Live consumers by group id: a transaction's offsets carry their generation and member id. */
  private readonly consumers = new Map<string, PkConsumer>();
  private readonly base: Platformatic.BaseOptions;

  constructor(connection: KafkaConnectionOptions, kafka: Kafka) {
    this.admins = new KafkajsStreamClient(kafka);
    this.base = baseOptions(connection);
  }

  groupConsumer(options: GroupConsumerOptions): GroupConsumer {
    return new PlatformaticGroupConsumer(this.base, options, this.consumers);
  }

  async transactionalProducer(transactionalId: string, options: { transactionTimeoutMs: number }): Promise<TransactionalProducer> {
    const producer: PkProducer = new (platformatic().Producer)({
      ...this.base,
      clientId: `${this.base.clientId}-${transactionalId}`,
      transactionalId,
      idempotent: true,
      // InitProducerId must carry "no producer" (-1/-1) for a new instance. The client defaults
      // to 0/0, which the broker reads as a claim to producer id 0: once the transactional id
      // has another producer id (any earlier run), every InitProducerId of a new process is
      // answered PRODUCER_FENCED, forever. That was the crash test's hang on this client.
      producerId: -1n,
      producerEpoch: -1,
      acks: -1,
      // The broker answers CONCURRENT_TRANSACTIONS until the previous commit's markers are written.
      retries: 600,
      retryDelay: 5,
      // The client sends its operation timeout as InitProducerId's transaction timeout.
      timeout: options.transactionTimeoutMs,
    });
    // InitProducerId runs on the first begin: it bumps the epoch, fencing an earlier owner and
    // aborting its open transaction. Cancelling releases the (empty) transaction locally.
    try {
      const tx = await producer.beginTransaction();
      await tx.cancel();
    } catch (e) {
      await forceClose(producer).catch(() => undefined);
      throw asStreamFailure(e);
    }
    return new PlatformaticTransactionalProducer(producer, this.consumers);
  }

  admin(): Promise<StreamAdmin> {
    return this.admins.admin();
  }

  isFencing(e: unknown): boolean {
    return someError(e, (x) => FENCING.includes(String(x.apiId)));
  }

  isRetriable(e: unknown): boolean {
    return platformaticRetriable(e);
  }
}

const FENCING = ['INVALID_PRODUCER_EPOCH', 'PRODUCER_FENCED', 'INVALID_PRODUCER_ID_MAPPING', 'TRANSACTIONAL_ID_AUTHORIZATION_FAILED'];

/**
 * Whether a failure of this client is transient: one it marks retriable, or a network failure
 * (its `TimeoutError` carries the network code but `canRetry: false`), alone or aggregated
 * (`findGroupCoordinator failed 4 times` while the broker is away). Fencing never is.
 */
function platformaticRetriable(e: unknown): boolean {
  if (someError(e, (x) => FENCING.includes(String(x.apiId)))) return false;
  return isRetriable(e) || someError(e, (x) => x.canRetry === true || x.code === 'PLT_KFK_NETWORK');
}

/**
 * A failure to hand to the runtime's callers: a transient one as a retriable SrpoError, which
 * the project's retrier (`retry`, used by every start and restart loop) knows; else as it is.
 */
export function asStreamFailure(e: unknown): unknown {
  if (e instanceof SrpoError || !platformaticRetriable(e)) return e;
  return new SrpoError(ErrorCode.UNAVAILABLE, `Kafka unavailable: ${errorMessage(e)}`, { retriable: true, cause: e });
}

/** Closes a client without waiting for its pending requests (the promise overload of `close(force)`). */
function forceClose(client: PkProducer | PkConsumer): Promise<void> {
  return new Promise((resolve, reject) => client.close(true, (e?: Error | null) => (e ? reject(e) : resolve())));
}

interface ErrorLike {
  apiId?: unknown;
  code?: unknown;
  canRetry?: unknown;
  errors?: unknown[];
}

/** Whether the error, or one it aggregates (the client wraps per-request errors), matches. */
function someError(e: unknown, match: (x: ErrorLike) => boolean, depth = 0): boolean {
  if (typeof e !== 'object' || e === null || depth > 4) return false;
  const x = e as ErrorLike;
  if (match(x)) return true;
  return Array.isArray(x.errors) && x.errors.some((inner) => someError(inner, match, depth + 1));
}

function baseOptions(c: KafkaConnectionOptions): Platformatic.BaseOptions {
  const options: Platformatic.BaseOptions = { clientId: c.clientId, bootstrapBrokers: c.brokers };
  if (c.connectionTimeoutMs !== undefined) options.connectTimeout = c.connectionTimeoutMs;
  if (c.requestTimeoutMs !== undefined) options.requestTimeout = c.requestTimeoutMs;
  if (c.ssl) {
    options.tls = {
      rejectUnauthorized: c.ssl.rejectUnauthorized,
      ...(c.ssl.caFile ? { ca: fs.readFileSync(c.ssl.caFile) } : {}),
      ...(c.ssl.certFile ? { cert: fs.readFileSync(c.ssl.certFile) } : {}),
      ...(c.ssl.keyFile ? { key: fs.readFileSync(c.ssl.keyFile) } : {}),
    };
  }
  if (c.sasl) {
    const mechanism = ({ plain: 'PLAIN', 'scram-sha-256': 'SCRAM-SHA-256', 'scram-sha-512': 'SCRAM-SHA-512' } as const)[c.sasl.mechanism];
    if (!mechanism) throw new ConfigError('KAFKA_SASL_MECHANISM', `${c.sasl.mechanism} is not supported by the platformatic client`);
    options.sasl = { mechanism, username: c.sasl.username, password: c.sasl.password };
  }
  return options;
}

class PlatformaticGroupConsumer implements GroupConsumer {
  private consumer?: PkConsumer;
  private stream?: PkStream;
  private handlers?: ConsumerHandlers;
  private readonly buffers = new PartitionBuffers();
  /** Bumped by every rebalance, seek and stop: a batch handed over before is stale. */
  private generation = 0;
  private draining = false;
  private stopped = false;
  /** Paused: fetched records stay buffered (the stream pauses at the buffer bound) and no batch is handed over. */
  private paused = false;
  private reopening?: Promise<void>;

  constructor(
    private readonly base: Platformatic.BaseOptions,
    private readonly options: GroupConsumerOptions,
    private readonly registry: Map<string, PkConsumer>,
  ) {}

  async start(handlers: ConsumerHandlers): Promise<void> {
    const o = this.options;
    this.handlers = handlers;
    const consumer: PkConsumer = new (platformatic().Consumer)({
      ...this.base,
      groupId: o.groupId,
      sessionTimeout: o.sessionTimeoutMs,
      heartbeatInterval: o.heartbeatIntervalMs,
      rebalanceTimeout: o.rebalanceTimeoutMs,
      maxWaitTime: o.maxWaitMs,
      autocommit: false,
      partitionAssigner: (_current, members, topics, metadata) => {
        const partitionsOf = new Map<string, number[]>();
        for (const topic of topics)
          partitionsOf.set(
            topic,
            Array.from({ length: metadata.topics.get(topic)?.partitionsCount ?? 0 }, (_, i) => i),
          );
        return [...coPartitionAssignment([...members.keys()], partitionsOf)].map(([memberId, a]) => ({
          memberId,
          assignments: new Map(Object.entries(a).map(([topic, partitions]) => [topic, { topic, partitions }])),
        }));
      },
    });
    this.consumer = consumer;
    this.registry.set(o.groupId, consumer);
    consumer.on('consumer:group:join', (e: { assignments?: { topic: string; partitions: number[] }[] }) => {
      this.generation++;
      const partitions = new Set<number>();
      for (const a of e.assignments ?? []) if (o.topics.includes(a.topic)) for (const p of a.partitions) partitions.add(p);
      this.buffers.retainPartitions(partitions);
      handlers.onAssignment(partitions);
    });
    consumer.on('consumer:group:rebalance', () => this.generation++);
    try {
      await this.open();
    } catch (e) {
      throw asStreamFailure(e);
    }
  }

  /** Consumes from the committed offsets; records before a partition's resolved position are dropped. */
  private async open(): Promise<void> {
    const consumer = this.consumer;
    if (!consumer) return;
    const stream = await consumer.consume({
      topics: this.options.topics,
      mode: 'committed',
      fallbackMode: 'earliest',
      autocommit: false,
      isolationLevel: 1, // READ_COMMITTED
      maxWaitTime: this.options.maxWaitMs,
    });
    this.stream = stream;
    stream.on('data', (m) => {
      if (stream !== this.stream) return;
      this.buffers.push(m.topic, m.partition, { offset: Number(m.offset), key: m.key ?? null, value: m.value ?? null, timestampMs: Number(m.timestamp) });
      if (this.buffers.size > MAX_BUFFERED) stream.pause();
      this.scheduleDrain();
    });
    stream.on('error', (e: Error) => {
      if (stream === this.stream && !this.stopped) this.handlers?.onFatal(e);
    });
  }

  private scheduleDrain(): void {
    if (this.draining) return;
    this.draining = true;
    setImmediate(() => void this.drain());
  }

  /** Hands over one partition's buffered records at a time, in turn, until none are left. */
  private async drain(): Promise<void> {
    try {
      for (;;) {
        await this.reopening;
        if (this.stopped || this.paused || !this.handlers) return;
        const taken = this.buffers.take();
        if (!taken) return;
        const generation = this.generation;
        await this.handlers.onBatch({
          topic: taken.topic,
          partition: taken.partition,
          records: taken.records,
          isActive: () => !this.stopped && generation === this.generation,
          resolve: (offset) => this.buffers.resolve(taken.topic, taken.partition, offset),
          heartbeat: async () => undefined,
        });
        // What the runner left unresolved is handed over again, unless a seek dropped it.
        this.buffers.giveBack(taken);
        if (this.stream?.isPaused() && this.buffers.size < MAX_BUFFERED / 2) this.stream.resume();
        await new Promise((r) => setImmediate(r));
      }
    } catch (e) {
      if (!this.stopped) this.handlers?.onFatal(e instanceof Error ? e : new Error(String(e)));
    } finally {
      this.draining = false;
      if (!this.stopped && !this.paused && this.buffers.size > 0) this.scheduleDrain();
    }
  }

  /**
   * The stream's fetch position cannot be moved while a fetch is in flight, so a seek reopens
   * it from the committed offsets (never past a resolved position); what comes back before
   * each partition's resolved position is dropped.
   */
  seek(topic: string, partition: number, offset: number): void {
    this.generation++;
    this.buffers.seek(topic, partition, offset);
    if (this.reopening) return;
    const old = this.stream;
    this.stream = undefined;
    this.reopening = (async () => {
      await old?.close().catch(() => undefined);
      this.buffers.clear();
      if (!this.stopped) await this.open();
    })()
      .catch((e) => this.handlers?.onFatal(e instanceof Error ? e : new Error(String(e))))
      .finally(() => (this.reopening = undefined));
  }

  async commit(topic: string, partition: number, nextOffset: number): Promise<void> {
    const consumer = this.consumer;
    if (!consumer) return;
    // The client stores the offset it is given (unlike its transactional `addOffset`, which adds
    // one), with the member's generation: a member that lost the partition is refused.
    try {
      await consumer.commit({ offsets: [{ topic, partition, offset: BigInt(nextOffset), leaderEpoch: -1 }] });
    } catch (e) {
      throw asStreamFailure(e);
    }
  }

  pause(): void {
    this.paused = true;
  }

  resume(): void {
    if (!this.paused) return;
    this.paused = false;
    if (!this.stopped && this.buffers.size > 0) this.scheduleDrain();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.generation++;
    await this.reopening;
    const stream = this.stream;
    this.stream = undefined;
    await stream?.close().catch(() => undefined);
    if (this.consumer && this.registry.get(this.options.groupId) === this.consumer) this.registry.delete(this.options.groupId);
    if (this.consumer) await forceClose(this.consumer);
    this.consumer = undefined;
  }
}

class PlatformaticTransactionalProducer implements TransactionalProducer {
  private readonly partitionCounts = new Map<string, number>();
  private roundRobin = 0;

  constructor(
    private readonly producer: PkProducer,
    private readonly consumers: Map<string, PkConsumer>,
  ) {}

  /** Partitions of a topic, from the producer's metadata (cached: topics never shrink). */
  private async partitionsOf(topic: string): Promise<number> {
    let n = this.partitionCounts.get(topic);
    if (n === undefined) {
      const metadata = await this.producer.metadata({ topics: [topic] });
      n = metadata.topics.get(topic)?.partitionsCount ?? 0;
      if (n <= 0) throw new SrpoError(ErrorCode.UNAVAILABLE, `topic ${topic} has no partitions in the cluster's metadata`, { retriable: true });
      this.partitionCounts.set(topic, n);
    }
    return n;
  }

  async begin(): Promise<StreamTransaction> {
    const tx = await this.producer.beginTransaction();
    return {
      send: async (records: OutgoingRecord[]): Promise<ProducedBatch[]> => {
        if (records.length === 0) return [];
        // Partition counts of the topics that need one, looked up once per send, not per record.
        const counts = new Map<string, number>();
        for (const r of records) if (r.partition === undefined && !counts.has(r.topic)) counts.set(r.topic, await this.partitionsOf(r.topic));
        const messages: Platformatic.MessageToProduce<Buffer, Buffer, Buffer, Buffer>[] = [];
        for (const r of records) {
          // kafkajs's default partitioner (Java-compatible murmur2), so both clients put a key in the same partition.
          const n = counts.get(r.topic) ?? 0;
          const partition = r.partition ?? (r.key === null ? this.roundRobin++ % n : keyPartition(r.topic, r.key.toString(), n));
          // A null value is written as a null record (a tombstone).
          messages.push({
            topic: r.topic,
            partition,
            value: r.value as Buffer,
            ...(r.key === null ? {} : { key: Buffer.isBuffer(r.key) ? r.key : Buffer.from(r.key) }),
          });
        }
        const result = await tx.send({ messages, acks: -1 });
        return (result.offsets ?? []).map((o) => ({ topic: o.topic, partition: o.partition, baseOffset: Number(o.offset) }));
      },
      sendOffsets: async (groupId, topic, partition, nextOffset) => {
        const consumer = this.consumers.get(groupId);
        if (!consumer) throw new Error(`no live consumer of group ${groupId} to commit offsets with`);
        await tx.addConsumer(consumer);
        // The client commits `offset + 1` of the message it is given, with the consumer's
        // generation and member id (KIP-447); only those fields are read.
        const position = {
          topic,
          partition,
          offset: BigInt(nextOffset - 1),
          metadata: { consumer: { groupId, memberId: consumer.memberId, generationId: consumer.generationId, coordinatorId: consumer.coordinatorId } },
        } as unknown as Platformatic.Message<Buffer, Buffer, Buffer, Buffer>;
        await tx.addOffset(position);
      },
      commit: () => tx.commit(),
      abort: () => tx.abort(),
    };
  }

  close(): Promise<void> {
    return forceClose(this.producer);
  }
}
