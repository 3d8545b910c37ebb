import { Logger } from '@srpo/core';
import { createKafka, EventCodec } from '@srpo/events';
import { ConsumerRunner, createStreamClient, STREAM_CLIENT_NAMES } from '@srpo/streams';
import { ensureKafka, sleep, transitionValue, uniquePrefix } from '@srpo/testing';

const codec = new EventCodec();

/** Log lines of this file's runners (also written to stderr): each `assignment` line is one (re)join of the group. */
const lines: string[] = [];
Logger.configure({
  sink: {
    write: (line) => {
      lines.push(line);
      process.stderr.write(line + '\n');
    },
  },
});
const assignments = (groupId: string) => lines.filter((l) => l.includes('"msg":"assignment"') && l.includes(`"groupId":"${groupId}"`)).length;

/** The broker's `group.min.session.timeout.ms` (Kafka's default; infra/kafka/kafka.sh leaves it): the shortest session a member may ask for. */
const SESSION_TIMEOUT_MS = 6_000;
/** One piece of the write blocks the event loop this long, as one micro-batch of native TensorFlow does. */
const PIECE_MS = 1_000;
/** The write blocks for PIECES × PIECE_MS in all: more than twice the session timeout. */
const PIECES = 14;

/** Blocks the event loop (no timer, no I/O runs), as a synchronous native computation does. */
function blockFor(ms: number): number {
  const end = Date.now() + ms;
  let spins = 0;
  while (Date.now() < end) spins++;
  return spins;
}

async function until(condition: () => boolean | Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await sleep(200);
  }
}

/**
 * A sink write far longer than the session timeout, which blocks the event loop in pieces and
 * awaits `keepAlive()` between them (what the learner's update does between micro-batches),
 * keeps its member in the group on both clients: written once, no consumer restart, one
 * assignment (no rejoin), the commit after it succeeds, and the group stable with its one
 * member. Without the keep-alive calls the broker evicts the member mid-write (checked by hand):
 * kafkajs's commit is refused and the consumer crashes and writes the batch again, over and
 * over; @platformatic/kafka's commit (sent without a generation) lands in the emptied group and
 * the member rejoins after the write: a second assignment.
 */
describe.each(STREAM_CLIENT_NAMES)('sink write longer than the session timeout on %s', (clientName) => {
  const brokers = ensureKafka();
  const connection = { brokers, clientId: `sink-keepalive-${clientName}` };
  const kafka = createKafka(connection);

  it('keeps the membership while the write blocks in pieces and awaits keepAlive between them', async () => {
    const prefix = uniquePrefix(`keepalive-${clientName}`);
    const topic = `${prefix}groups`;
    const groupId = `${prefix}learner`;
    const admin = kafka.admin();
    await admin.connect();
    await admin.createTopics({ topics: [{ topic, numPartitions: 1, replicationFactor: 1 }], waitForLeaders: true });
    const producer = kafka.producer();
    await producer.connect();
    await producer.send({ topic, acks: -1, messages: ['a', 'b'].map((id) => ({ key: 'p', value: transitionValue(id) })) });
    const committed = async () => Number((await admin.fetchOffsets({ groupId, topics: [topic] }))[0].partitions[0].offset);

    const written: string[][] = [];
    const metrics: string[] = [];
    let keepAlives = 0;
    let writeMs = 0;
    const runner = ConsumerRunner.sink<string>({
      groupId,
      kafka,
      client: createStreamClient(clientName, connection, kafka),
      codec,
      topic,
      sessionTimeoutMs: SESSION_TIMEOUT_MS,
      count: (metric) => metrics.push(metric),
      select: (r) => (r.event.type === 'Transition' ? r.event.value.transitionId : null),
      batchSize: (pending) => (pending.length >= 2 ? 2 : 0),
      write: async (items, context) => {
        const started = Date.now();
        for (let i = 0; i < PIECES; i++) {
          blockFor(PIECE_MS);
          await context.keepAlive();
          keepAlives++;
        }
        writeMs = Date.now() - started;
        written.push([...items]);
      },
    });
    try {
      await runner.start();
      await until(async () => written.length >= 1 && (await committed()) === 2, 90_000);
      // Long enough for an evicted member to have rejoined and written the batch again.
      await sleep(SESSION_TIMEOUT_MS + 2_000);
      expect(writeMs).toBeGreaterThan(2 * SESSION_TIMEOUT_MS);
      expect(keepAlives).toBe(PIECES);
      expect(written).toEqual([['a', 'b']]);
      expect(metrics.filter((m) => m === 'sink_consumer_restarts_total')).toEqual([]);
      expect(assignments(groupId)).toBe(1);
      expect(await committed()).toBe(2);
      const group = await admin.describeGroups([groupId]);
      expect(group.groups[0].state).toBe('Stable');
      expect(group.groups[0].members).toHaveLength(1);
    } finally {
      await runner.stop();
      await producer.disconnect();
      await admin.deleteTopics({ topics: [topic] }).catch(() => undefined);
      await admin.disconnect();
    }
  }, 150_000);
});
