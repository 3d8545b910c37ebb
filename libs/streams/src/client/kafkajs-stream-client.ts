import { Consumer, Kafka, Message, Partitioners, Producer } from 'kafkajs';
import { isRetriable } from '@srpo/core';
import { createTopicsIdempotent } from '@srpo/events';
import { CoPartitionAssigner } from '../co-partition-assigner';
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

/**
 * The runtime's client on kafkajs 2.2.4 (the default). kafkajs has only the pre-KIP-447
 * transactional protocol, so the runner fences with one producer per task and a stable id.
 */
export class KafkajsStreamClient implements StreamClient {
  readonly name = 'kafkajs' as const;

  constructor(private readonly kafka: Kafka) {}

  groupConsumer(options: GroupConsumerOptions): GroupConsumer {
    return new KafkajsGroupConsumer(this.kafka, options);
  }

  async transactionalProducer(transactionalId: string, options: { transactionTimeoutMs: number }): Promise<TransactionalProducer> {
    const producer = this.kafka.producer({
      transactionalId,
      idempotent: true,
      maxInFlightRequests: 1,
      transactionTimeout: options.transactionTimeoutMs,
      createPartitioner: Partitioners.DefaultPartitioner,
      // The broker answers CONCURRENT_TRANSACTIONS until the previous commit's markers are
      // written (a few ms); kafkajs's default 100+ ms backoff would cap each task at a few
      // transactions per second. Retries stay bounded so a dead broker surfaces as an error.
      retry: { initialRetryTime: 5, maxRetryTime: 1_000, retries: 600 },
    });
    await producer.connect();
    return new KafkajsTransactionalProducer(producer);
  }

  async admin(): Promise<StreamAdmin> {
    const admin = this.kafka.admin();
    await admin.connect();
    return {
      endOffsets: async (topic) => (await admin.fetchTopicOffsets(topic)).map((o) => ({ partition: o.partition, low: Number(o.low), high: Number(o.high) })),
      committedOffsets: async (groupId, topics) => {
        const out = new Map<string, number>();
        for (const t of await admin.fetchOffsets({ groupId, topics })) {
          for (const p of t.partitions) if (Number(p.offset) >= 0) out.set(`${t.topic}:${p.partition}`, Number(p.offset));
        }
        return out;
      },
      listTopics: () => admin.listTopics(),
      createTopics: (topics) =>
        createTopicsIdempotent(
          admin,
          topics.map((t) => ({
            topic: t.topic,
            numPartitions: t.partitions,
            replicationFactor: -1,
            configEntries: Object.entries(t.configs).map(([name, value]) => ({ name, value })),
          })),
        ),
      close: () => admin.disconnect(),
    };
  }

  isFencing(e: unknown): boolean {
    const type = (e as { type?: string } | null)?.type ?? '';
    const name = (e as { name?: string } | null)?.name ?? '';
    return /INVALID_PRODUCER_EPOCH|PRODUCER_FENCED|TRANSACTIONAL_ID_AUTHORIZATION|INVALID_PRODUCER_ID_MAPPING/.test(type) || /Fenced/i.test(name);
  }

  isRetriable(e: unknown): boolean {
    return isRetriable(e);
  }
}

class KafkajsGroupConsumer implements GroupConsumer {
  private consumer?: Consumer;
  /** kafkajs refuses pause/resume before `run`: the wish is kept and applied once it runs. */
  private running = false;
  private paused = false;
  /** Set by {@link stop}: a start still connecting sees it between its steps and disconnects. */
  private stopped = false;

  constructor(
    private readonly kafka: Kafka,
    private readonly options: GroupConsumerOptions,
  ) {}

  async start(handlers: ConsumerHandlers): Promise<void> {
    const o = this.options;
    const consumer = this.kafka.consumer({
      groupId: o.groupId,
      partitionAssigners: [CoPartitionAssigner],
      readUncommitted: false,
      sessionTimeout: o.sessionTimeoutMs,
      rebalanceTimeout: o.rebalanceTimeoutMs,
      heartbeatInterval: o.heartbeatIntervalMs,
      maxWaitTimeInMs: o.maxWaitMs,
      retry: { retries: 10 },
    });
    this.consumer = consumer;
    consumer.on(consumer.events.GROUP_JOIN, (e) => {
      const partitions = new Set<number>();
      for (const topic of o.topics) for (const p of e.payload.memberAssignment[topic] ?? []) partitions.add(p);
      handlers.onAssignment(partitions);
    });
    consumer.on(consumer.events.CRASH, (e) => {
      // kafkajs restarts itself after retriable errors only; after a non-retriable one (e.g. the
      // coordinator forgot this member while the broker was down) the consumer stays dead.
      if (!e.payload.restart) handlers.onFatal(e.payload.error);
    });
    // A stop while connecting must not leave a consumer that goes on to join the group: kafkajs
    // lets `run` proceed after a `disconnect` issued during `connect`.
    await consumer.connect();
    if (await this.abandoned(consumer)) return;
    await consumer.subscribe({ topics: o.topics, fromBeginning: true });
    if (await this.abandoned(consumer)) return;
    await consumer.run({
      autoCommit: false,
      eachBatchAutoResolve: false,
      partitionsConsumedConcurrently: 1,
      // eslint-disable-next-line @typescript-eslint/unbound-method -- kafkajs passes closures; only its typings declare them as methods
      eachBatch: ({ batch, resolveOffset, heartbeat, isRunning, isStale }) =>
        handlers.onBatch({
          topic: batch.topic,
          partition: batch.partition,
          records: batch.messages.map((m) => ({ offset: Number(m.offset), key: m.key, value: m.value, timestampMs: Number(m.timestamp) })),
          isActive: () => isRunning() && !isStale(),
          resolve: (offset) => resolveOffset(String(offset)),
          heartbeat,
        }),
    });
    if (await this.abandoned(consumer)) return;
    this.running = true;
    if (this.paused) this.pause();
  }

  /** True (after disconnecting it) when {@link stop} came while `consumer` was starting. */
  private async abandoned(consumer: Consumer): Promise<boolean> {
    if (!this.stopped) return false;
    await consumer.disconnect().catch(() => undefined);
    return true;
  }

  seek(topic: string, partition: number, offset: number): void {
    this.consumer?.seek({ topic, partition, offset: String(offset) });
  }

  async commit(topic: string, partition: number, nextOffset: number): Promise<void> {
    // kafkajs commits the offset it is given (the next one to read), with the member's generation.
    await this.consumer?.commitOffsets([{ topic, partition, offset: String(nextOffset) }]);
  }

  pause(): void {
    this.paused = true;
    if (this.running) this.consumer?.pause(this.options.topics.map((topic) => ({ topic })));
  }

  resume(): void {
    this.paused = false;
    if (this.running) this.consumer?.resume(this.options.topics.map((topic) => ({ topic })));
  }

  async stop(): Promise<void> {
    this.stopped = true;
    const c = this.consumer;
    this.consumer = undefined;
    this.running = false;
    await c?.disconnect();
  }
}

class KafkajsTransactionalProducer implements TransactionalProducer {
  constructor(private readonly producer: Producer) {}

  async begin(): Promise<StreamTransaction> {
    const tx = await this.producer.transaction();
    return {
      send: async (records: OutgoingRecord[]): Promise<ProducedBatch[]> => {
        const byTopic = new Map<string, Message[]>();
        for (const r of records) {
          const list = byTopic.get(r.topic) ?? [];
          list.push({ key: r.key, value: r.value, ...(r.partition === undefined ? {} : { partition: r.partition }) });
          byTopic.set(r.topic, list);
        }
        const sent = await tx.sendBatch({ topicMessages: [...byTopic].map(([topic, messages]) => ({ topic, messages })), acks: -1 });
        return sent.filter((m) => m.baseOffset !== undefined).map((m) => ({ topic: m.topicName, partition: m.partition, baseOffset: Number(m.baseOffset) }));
      },
      sendOffsets: (groupId, topic, partition, nextOffset) =>
        tx.sendOffsets({ consumerGroupId: groupId, topics: [{ topic, partitions: [{ partition, offset: String(nextOffset) }] }] }),
      commit: () => tx.commit(),
      abort: () => tx.abort(),
    };
  }

  close(): Promise<void> {
    return this.producer.disconnect();
  }
}
