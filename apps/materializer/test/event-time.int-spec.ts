import {
  ActiveSet,
  AgentEventsProducer,
  createKafka,
  DeadLetter,
  ensureTopics,
  EventCodec,
  readTopicsToEnd,
  topicCatalog,
  topicsWithoutTimestampBound,
} from '@srpo/events';
import { readMaterializerSettings, rematerialize } from '@srpo/materializer';
import { ensureKafka, output, sleep, streamClientEnv, transition, uniquePrefix } from '@srpo/testing';
import { loadMaterializerConfig } from '../src/materializer-config';
import { Materializer } from '../src/materializer.service';

const MINUTE = 60_000;

/**
 * A producer chooses an event's time, and its record's timestamp too (CreateTime). On the raw
 * topics the broker refuses a record stamped more than `message.timestamp.after.max.ms` ahead of
 * its clock, and the set stage bounds event time by the record timestamp: an event 50 minutes
 * ahead (inside the 1 h stream-time allowance) is dead-lettered instead of closing every open
 * set, live and in a re-materialization of the recorded records.
 */
describe('event time against the broker clock (real broker)', () => {
  const kafka = createKafka({ brokers: ensureKafka(), clientId: 'event-time-test' });
  const codec = new EventCodec();
  const prefix = uniquePrefix('event-time');
  const catalog = topicCatalog({ prefix, rawPartitions: 1, derivedPartitions: 1 });
  let before = 0;
  let after = 0;

  beforeAll(async () => {
    const admin = kafka.admin();
    await admin.connect();
    try {
      await ensureTopics(admin, catalog.all());
    } finally {
      await admin.disconnect();
    }
    const producer = kafka.producer();
    await producer.connect();
    try {
      before = Date.now();
      const now = before;
      // An honest episode whose set waits for its second output (60 s to get it).
      await producer.send({
        topic: catalog.agentOutputs.name,
        messages: [{ key: 'a', value: codec.encode('AgentOutput', output('a', 0, { eventTimeMs: now, startedAtMs: now })) }],
      });
      await producer.send({
        topic: catalog.transitions.name,
        messages: [{ key: 'a', value: codec.encode('Transition', transition('a', [0, 1], { eventTimeMs: now, reward: 1 })) }],
      });
      // A hostile output 50 min ahead, in a record stamped now (as a gateway client's would be).
      await producer.send({
        topic: catalog.agentOutputs.name,
        messages: [{ key: 'x', value: codec.encode('AgentOutput', output('x', 0, { eventTimeMs: now + 50 * MINUTE, startedAtMs: now })) }],
      });
      after = Date.now();
    } finally {
      await producer.disconnect();
    }
  });

  it('refuses a record stamped ahead of the broker clock on a raw topic; the others keep their producer timestamps', async () => {
    const producer = kafka.producer({ retry: { retries: 0 } });
    await producer.connect();
    try {
      const ahead = Date.now() + 50 * MINUTE;
      const forged = { key: 'y', value: codec.encode('AgentOutput', output('y', 0, { eventTimeMs: ahead })), timestamp: String(ahead) };
      await expect(producer.send({ topic: catalog.agentOutputs.name, messages: [forged] })).rejects.toThrow(/timestamp/i);
    } finally {
      await producer.disconnect();
    }
    const records = await readTopicsToEnd(kafka, [catalog.agentOutputs.name, catalog.transitions.name]);
    expect(records.map((r) => r.key?.toString())).toEqual(['a', 'x', 'a']);
    for (const r of records) {
      expect(r.timestampMs).toBeGreaterThanOrEqual(before);
      expect(r.timestampMs).toBeLessThanOrEqual(after);
    }
  });

  it('finds raw topics created earlier without the timestamp bound, which ensureTopics leaves as they are', async () => {
    const old = topicCatalog({ prefix: `${prefix}old.`, rawPartitions: 1, derivedPartitions: 1 });
    const admin = kafka.admin();
    await admin.connect();
    try {
      await admin.createTopics({ topics: [{ topic: old.transitions.name, numPartitions: 1 }], waitForLeaders: true });
      await ensureTopics(admin, [old.agentOutputs, old.transitions, old.activeSets]);
      expect(await topicsWithoutTimestampBound(admin, [old.agentOutputs, old.transitions, old.activeSets])).toEqual([old.transitions.name]);
      expect(await topicsWithoutTimestampBound(admin, catalog.all())).toEqual([]);
    } finally {
      await admin.disconnect();
    }
  });

  it('dead-letters the event ahead of its record timestamp as CLOCK_SKEW and keeps the open set open, the same in every re-materialization', async () => {
    const settings = readMaterializerSettings({});
    const runs = [];
    for (const run of ['r1', 'r2']) {
      const result = await rematerialize({ kafka, source: catalog, targetPrefix: `${prefix}${run}.`, settings, codec });
      const letters = (await readTopicsToEnd(kafka, [result.target.deadLetter.name])).map((r) => codec.decode(r.value).value as DeadLetter);
      runs.push({
        events: result.events,
        setsComplete: result.setsComplete,
        setsInvalid: result.setsInvalid,
        letters: letters.map((d) => [d.reasonCode, d.details.field, d.originalKey?.toString()]),
      });
    }
    expect(runs[0]).toEqual({ events: 3, setsComplete: 0, setsInvalid: 0, letters: [['CLOCK_SKEW', 'AgentOutput.eventTimeMs', 'x']] });
    expect(runs[1]).toEqual(runs[0]);
  });

  it('live: the materializer dead-letters the event ahead of its record timestamp and completes the honest set', async () => {
    const brokers = ensureKafka();
    const config = loadMaterializerConfig({
      ...streamClientEnv(),
      KAFKA_BROKERS: brokers.join(','),
      SRPO_TOPIC_PREFIX: uniquePrefix('event-time-live'),
      SRPO_RAW_PARTITIONS: '1',
      SRPO_DERIVED_PARTITIONS: '1',
      SRPO_LOG_LEVEL: 'warn',
    });
    const materializer = new Materializer(config);
    await materializer.start();
    const topics = materializer.catalog;
    const sdk = new AgentEventsProducer({ kafka, topics });
    try {
      const now = Date.now();
      const ahead = now + 50 * MINUTE;
      await sdk.emitOutput(output('a', 0, { eventTimeMs: now, startedAtMs: now }));
      await sdk.emitTransition(transition('a', [0, 1], { eventTimeMs: now, reward: 1 }));
      await sdk.emitOutput(output('x', 0, { eventTimeMs: ahead, startedAtMs: now }));
      await sdk.emitOutput(output('a', 1, { eventTimeMs: now + 1000, startedAtMs: now }));
      const read = async (topic: string) => (await readTopicsToEnd(kafka, [topic])).map((r) => codec.decode(r.value).value);
      const deadline = Date.now() + 30_000;
      let sets: ActiveSet[] = [];
      let letters: DeadLetter[] = [];
      while (Date.now() < deadline && (sets.length < 1 || letters.length < 1)) {
        await sleep(300);
        sets = (await read(topics.activeSets.name)) as ActiveSet[];
        letters = (await read(topics.deadLetter.name)) as DeadLetter[];
      }
      expect(sets.map((x) => x.setId)).toEqual(['a/t0']);
      expect(letters.map((d) => [d.reasonCode, d.details.field, d.originalKey?.toString()])).toEqual([['CLOCK_SKEW', 'AgentOutput.eventTimeMs', 'x']]);
      expect(await read(topics.invalidSets.name)).toEqual([]);
    } finally {
      await sdk.disconnect();
      await materializer.stop();
    }
  });
});
