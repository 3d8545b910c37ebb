import { ErrorCode, SrpoError } from '@srpo/core';
import { createKafka, EventCodec, readTopicsToEnd, ReasonCode, type DeadLetter, type Transition } from '@srpo/events';
import {
  ConsumerRunner,
  createStreamClient,
  type InputRecord,
  type KeyValueStore,
  type OutgoingRecord,
  type Processor,
  type ProcessorContext,
  STREAM_CLIENT_NAMES,
  type StreamClient,
  type StreamTransaction,
  type TransactionalProducer,
} from '@srpo/streams';
import { ensureKafka, sleep, transitionValue, uniquePrefix } from '@srpo/testing';

const codec = new EventCodec();

async function until(condition: () => boolean | Promise<boolean>, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await sleep(200);
  }
}

type Stores = { pending: KeyValueStore<Transition> };

/**
 * Keeps each transition until the watermark reaches its event time, then emits it to `out`
 * from `punctuate` and forgets it (a deadline processor in small). Faults on demand: a
 * punctuation that throws after its first output and delete, a record that always throws
 * (`poison`), and one that throws a retriable error a few times (`flaky`).
 */
class Deadlines implements Processor<Stores> {
  readonly name = 'deadlines';
  readonly storeNames: 'pending'[] = ['pending'];
  readonly punctuationIntervalMs = 0;
  punctuationThrows = 0;
  flakyThrows = 0;
  poisonThrows = 0;

  constructor(private readonly out: string) {}

  eventTime(record: InputRecord): number {
    return (record.event.value as Transition).eventTimeMs;
  }

  process(record: InputRecord, stores: Stores): void {
    const t = record.event.value as Transition;
    if (t.transitionId === 'poison') {
      this.poisonThrows++;
      throw new TypeError('cannot read the poison record');
    }
    if (t.transitionId === 'flaky' && this.flakyThrows > 0) {
      this.flakyThrows--;
      throw new SrpoError(ErrorCode.UNAVAILABLE, 'lookup away', { retriable: true });
    }
    stores.pending.put(t.transitionId, t);
  }

  punctuate(stores: Stores, ctx: ProcessorContext): void {
    const due = [...stores.pending.entries()].filter(([, t]) => t.eventTimeMs <= ctx.watermarkMs).sort(([, a], [, b]) => a.eventTimeMs - b.eventTimeMs);
    for (const [id, t] of due) {
      ctx.emit({ topic: this.out, key: id, type: 'Transition', value: t });
      stores.pending.delete(id);
      if (this.punctuationThrows > 0) {
        this.punctuationThrows--;
        throw new Error('punctuation failed midway');
      }
    }
  }
}

/** What a transaction did before its commit, for deciding where to inject a fault. */
interface TransactionSeen {
  topics: Set<string>;
  /** Whether the input offsets went with it (a chunk) or not (an idle punctuation). */
  offsets: boolean;
}

/**
 * The real client with one fault on demand: the commit of a transaction that `failCommit`
 * picks is aborted on the broker and fails as an unreachable broker would. Everything else
 * goes to the broker unchanged.
 */
class FaultyClient implements StreamClient {
  readonly name: StreamClient['name'];
  failCommit: (tx: TransactionSeen) => boolean = () => false;
  injected: TransactionSeen[] = [];

  constructor(private readonly inner: StreamClient) {
    this.name = inner.name;
  }

  groupConsumer = (...args: Parameters<StreamClient['groupConsumer']>) => this.inner.groupConsumer(...args);
  admin = () => this.inner.admin();
  isFencing = (e: unknown) => this.inner.isFencing(e);
  isRetriable = (e: unknown) => this.inner.isRetriable(e);

  async transactionalProducer(id: string, options: { transactionTimeoutMs: number }): Promise<TransactionalProducer> {
    const producer = await this.inner.transactionalProducer(id, options);
    return {
      close: () => producer.close(),
      begin: async () => this.wrap(await producer.begin()),
    };
  }

  private wrap(tx: StreamTransaction): StreamTransaction {
    const seen: TransactionSeen = { topics: new Set(), offsets: false };
    return {
      send: (records: OutgoingRecord[]) => {
        for (const r of records) seen.topics.add(r.topic);
        return tx.send(records);
      },
      sendOffsets: (...args) => {
        seen.offsets = true;
        return tx.sendOffsets(...args);
      },
      abort: () => tx.abort(),
      commit: async () => {
        if (this.failCommit(seen)) {
          this.failCommit = () => false;
          this.injected.push(seen);
          await tx.abort();
          throw Object.assign(new Error('injected: broker unreachable at commit'), { retriable: true });
        }
        await tx.commit();
      },
    };
  }
}

/**
 * The processor mode's consumer loop on the real broker under faults (issue #41): whatever
 * a chunk or a punctuation emits is inside the transaction that is aborted and retried, and
 * a record the processor throws on every time is dead-lettered after its attempts.
 */
describe.each(STREAM_CLIENT_NAMES)('ConsumerRunner processor mode under faults on %s (real broker)', (clientName) => {
  const brokers = ensureKafka();
  const connection = { brokers, clientId: `stream-faults-${clientName}` };
  const kafka = createKafka(connection);

  async function setup(label: string, inputs: string[]) {
    const prefix = uniquePrefix(`${label}-${clientName}`);
    const topics = { inputs: inputs.map((i) => `${prefix}${i}`), out: `${prefix}out`, dead: `${prefix}dead-letter` };
    const appId = `${prefix}app`;
    const admin = kafka.admin();
    await admin.connect();
    await admin.createTopics({
      topics: [...topics.inputs, topics.out, topics.dead].map((topic) => ({ topic, numPartitions: 1, replicationFactor: 1 })),
      waitForLeaders: true,
    });
    const processor = new Deadlines(topics.out);
    const client = new FaultyClient(createStreamClient(clientName, connection, kafka));
    const counts = new Map<string, number>();
    const runner = new ConsumerRunner<Stores>({
      appId,
      kafka,
      client,
      codec,
      inputTopics: topics.inputs,
      processor,
      deadLetterTopic: topics.dead,
      partitions: 1,
      sessionTimeoutMs: 10_000,
      idlePollMs: 200,
      maxProcessingAttempts: 3,
      count: (metric, labels) => {
        const key = `${metric}${labels ? JSON.stringify(labels) : ''}`;
        counts.set(key, (counts.get(key) ?? 0) + 1);
      },
    });
    const producer = kafka.producer();
    await producer.connect();
    const produce = (ids: string[], t0: number) =>
      producer.send({ topic: topics.inputs[0], acks: -1, messages: ids.map((id, i) => ({ key: 'p', value: transitionValue(id, t0 + i) })) });
    const outputs = async () => (await readTopicsToEnd(kafka, [topics.out])).map((r) => r.key?.toString());
    const deadLetters = async () => (await readTopicsToEnd(kafka, [topics.dead])).map((r) => codec.decode(r.value).value as DeadLetter);
    const cleanup = async () => {
      await runner.stop();
      await producer.disconnect();
      await admin.deleteTopics({ topics: [...topics.inputs, topics.out, topics.dead] }).catch(() => undefined);
      await admin.disconnect();
    };
    return { appId, topics, admin, processor, client, counts, runner, produce, outputs, deadLetters, cleanup };
  }

  /** Waits until `outputs` holds `expected`, then a little longer, so a late duplicate would show. */
  async function settle(read: () => Promise<(string | undefined)[]>, expected: number): Promise<(string | undefined)[]> {
    await until(async () => (await read()).length >= expected);
    await sleep(1_500);
    return read();
  }

  it('an idle punctuation whose commit fails is retried at the next poll: each output once, without new input', async () => {
    // The second input stays empty: the watermark moves only once the idle poll sees it read to its end.
    const s = await setup('idle-commit', ['a', 'b']);
    try {
      s.client.failCommit = (tx) => !tx.offsets && tx.topics.has(s.topics.out);
      await s.produce(['x1', 'x2', 'x3'], 1_000);
      await s.runner.start();
      expect(await settle(s.outputs, 3)).toEqual(['x1', 'x2', 'x3']);
      expect(s.client.injected).toHaveLength(1);
      expect(s.counts.get('stream_consumer_restarts_total')).toBeUndefined();
    } finally {
      await s.cleanup();
    }
  }, 90_000);

  it('an idle punctuation that throws midway is taken back and punctuated again: each output once', async () => {
    const s = await setup('idle-throw', ['a', 'b']);
    try {
      s.processor.punctuationThrows = 1;
      await s.produce(['y1', 'y2', 'y3'], 1_000);
      await s.runner.start();
      expect(await settle(s.outputs, 3)).toEqual(['y1', 'y2', 'y3']);
      expect(s.processor.punctuationThrows).toBe(0);
    } finally {
      await s.cleanup();
    }
  }, 90_000);

  it("a chunk's punctuation that throws midway takes back the whole chunk, which is read again: each output once", async () => {
    // One input: each chunk's watermark is its stream time, so the chunk itself punctuates.
    const s = await setup('chunk-throw', ['a']);
    try {
      s.processor.punctuationThrows = 1;
      await s.produce(['z1', 'z2', 'z3'], 1_000);
      await s.runner.start();
      expect(await settle(s.outputs, 3)).toEqual(['z1', 'z2', 'z3']);
      expect(s.processor.punctuationThrows).toBe(0);
      await s.produce(['z4'], 2_000);
      expect(await settle(s.outputs, 4)).toEqual(['z1', 'z2', 'z3', 'z4']);
    } finally {
      await s.cleanup();
    }
  }, 90_000);

  it('a poison record is dead-lettered after 3 throws and the partition moves on; retriable throws and a failed commit do not count', async () => {
    const s = await setup('poison', ['a']);
    try {
      s.processor.flakyThrows = 4;
      // The first transaction carrying the dead letter fails: the record is dead-lettered again, not processed again.
      s.client.failCommit = (tx) => tx.topics.has(s.topics.dead);
      await s.produce(['p1', 'p2', 'flaky', 'poison', 'p3', 'p4'], 1_000);
      await s.runner.start();
      expect(await settle(s.outputs, 5)).toEqual(['p1', 'p2', 'flaky', 'p3', 'p4']);
      expect(s.processor.poisonThrows).toBe(3);
      expect(s.processor.flakyThrows).toBe(0);
      expect(s.client.injected).toHaveLength(1);

      const dead = await s.deadLetters();
      expect(dead).toHaveLength(1);
      expect(dead[0]).toMatchObject({
        reasonCode: ReasonCode.PROCESSING_FAILED,
        reason: 'cannot read the poison record',
        source: { topic: s.topics.inputs[0], partition: 0, offset: 3 },
        processor: 'deadlines',
        details: { attempts: '3' },
      });
      expect(codec.decode(dead[0].originalValue).value).toMatchObject({ transitionId: 'poison' });
      expect(s.counts.get(`stream_poison_records_total${JSON.stringify({ topic: s.topics.inputs[0] })}`)).toBe(1);
      expect(s.counts.get('stream_consumer_restarts_total')).toBeUndefined();

      // The partition moved on: a later record is processed, and the group's position is past everything.
      await s.produce(['p5'], 2_000);
      expect(await settle(s.outputs, 6)).toEqual(['p1', 'p2', 'flaky', 'p3', 'p4', 'p5']);
      const [committed] = await s.admin.fetchOffsets({ groupId: s.appId, topics: [s.topics.inputs[0]] });
      expect(committed.partitions[0].offset).toBe('7');
      expect(s.processor.poisonThrows).toBe(3);
    } finally {
      await s.cleanup();
    }
  }, 90_000);
});
