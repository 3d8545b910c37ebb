import { createKafka, EventCodec } from '@srpo/events';
import { ConsumerRunner, createStreamClient, STREAM_CLIENT_NAMES } from '@srpo/streams';
import { ensureKafka, sleep, transitionValue, uniquePrefix } from '@srpo/testing';

const codec = new EventCodec();

const transition = (id: string): Buffer => transitionValue(id);

async function until(condition: () => boolean | Promise<boolean>, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await sleep(100);
  }
}

/**
 * The consumer loop's sink mode on the real broker, on both clients: the committed offset
 * is the first record not yet written (kafkajs commits the offset it is given, and so must
 * the platformatic adapter), and a new runner of the group resumes from there.
 */
describe.each(STREAM_CLIENT_NAMES)('ConsumerRunner sink mode on %s', (clientName) => {
  const brokers = ensureKafka();
  const connection = { brokers, clientId: `sink-mode-${clientName}` };
  const kafka = createKafka(connection);
  /** A sink runner of `groupId` on `topic` writing transition ids in pairs to `written`. */
  const sinkRunner = (groupId: string, topic: string, written: string[][]) =>
    ConsumerRunner.sink<string>({
      groupId,
      kafka,
      client: createStreamClient(clientName, connection, kafka),
      codec,
      topic,
      sessionTimeoutMs: 10_000,
      select: (r) => (r.event.type === 'Transition' ? r.event.value.transitionId : null),
      batchSize: (pending) => (pending.length >= 2 ? 2 : 0),
      write: async (items) => {
        written.push([...items]);
      },
    });

  it('commits the first unwritten offset after each write; a restarted group resumes there', async () => {
    const prefix = uniquePrefix(`sink-${clientName}`);
    const topic = `${prefix}groups`;
    const groupId = `${prefix}learner`;
    const admin = kafka.admin();
    await admin.connect();
    await admin.createTopics({ topics: [{ topic, numPartitions: 1, replicationFactor: 1 }], waitForLeaders: true });
    const producer = kafka.producer();
    await producer.connect();
    await producer.send({ topic, acks: -1, messages: ['a', 'b', 'c', 'd', 'e'].map((id) => ({ key: 'p', value: transition(id) })) });

    const committed = async () => {
      const [t] = await admin.fetchOffsets({ groupId, topics: [topic] });
      return Number(t.partitions[0].offset);
    };
    const run = (written: string[][]) => sinkRunner(groupId, topic, written);
    try {
      const first: string[][] = [];
      const runner = run(first);
      await runner.start();
      await until(async () => first.length === 2 && (await committed()) === 4);
      expect(first).toEqual([
        ['a', 'b'],
        ['c', 'd'],
      ]);
      await runner.stop();

      // e was read but never written: the next member of the group reads it again.
      await producer.send({ topic, acks: -1, messages: [{ key: 'p', value: transition('f') }] });
      const second: string[][] = [];
      const next = run(second);
      await next.start();
      await until(async () => second.length === 1 && (await committed()) === 6);
      expect(second).toEqual([['e', 'f']]);
      await next.stop();
    } finally {
      await producer.disconnect();
      await admin.deleteTopics({ topics: [topic] }).catch(() => undefined);
      await admin.disconnect();
    }
  }, 90_000);

  it('a stop while the consumer is still starting leaves no member behind in the group', async () => {
    const prefix = uniquePrefix(`sink-stop-${clientName}`);
    const topic = `${prefix}groups`;
    const groupId = `${prefix}learner`;
    const admin = kafka.admin();
    await admin.connect();
    try {
      await admin.createTopics({ topics: [{ topic, numPartitions: 1, replicationFactor: 1 }], waitForLeaders: true });
      const runner = sinkRunner(groupId, topic, []);
      // The learner's shutdown can come while its consumer connects (an app closed right after boot).
      const starting = runner.start().catch(() => undefined);
      await runner.stop();
      await starting;
      // Long enough for a consumer that went on after the stop to have joined.
      await sleep(4_000);
      const { groups } = await admin.describeGroups([groupId]);
      expect(groups[0].members).toEqual([]);
    } finally {
      await admin.deleteTopics({ topics: [topic] }).catch(() => undefined);
      await admin.disconnect();
    }
  }, 60_000);
});
