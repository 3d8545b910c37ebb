import { Kafka } from 'kafkajs';
import { AgentEventsProducer, createKafka, EventCodec, readTopicsToEnd, ReasonCode, toPlain } from '@srpo/events';
import { ensureKafka, outcome, output, streamClientEnv, transition, uniquePrefix } from '@srpo/testing';
import { loadMaterializerConfig } from '../src/materializer-config';
import { Materializer } from '../src/materializer.service';

const codec = new EventCodec();

async function waitFor<T>(read: () => Promise<T[]>, count: number, timeoutMs = 60_000): Promise<T[]> {
  const deadline = Date.now() + timeoutMs;
  let last: T[] = [];
  while (Date.now() < deadline) {
    last = await read();
    if (last.length >= count) return last;
    await new Promise((r) => setTimeout(r, 500));
  }
  throw new Error(`expected ${count} records, got ${last.length}`);
}

describe('materializer on the real broker', () => {
  const brokers = ensureKafka();
  let kafka: Kafka;
  let materializer: Materializer;
  let sdk: AgentEventsProducer;
  const T = 1_700_000_000_000;

  beforeAll(async () => {
    const config = loadMaterializerConfig({
      ...streamClientEnv(),
      KAFKA_BROKERS: brokers.join(','),
      SRPO_TOPIC_PREFIX: uniquePrefix('mat'),
      SRPO_RAW_PARTITIONS: '1',
      SRPO_DERIVED_PARTITIONS: '1',
      SRPO_SET_TTL_MS: '5000',
      SRPO_GROUP_TTL_MS: '5000',
      SRPO_LOG_LEVEL: 'warn',
    });
    materializer = new Materializer(config);
    await materializer.start();
    kafka = createKafka({ brokers, clientId: 'materializer-test' });
    sdk = new AgentEventsProducer({ kafka, topics: materializer.catalog });
  });

  afterAll(async () => {
    await sdk.disconnect();
    await materializer.stop();
  });

  it('materializes sets out of order with duplicates, invalidates incomplete sets, groups by size and by deadline', async () => {
    const at = (ms: number) => ({ eventTimeMs: T + ms, startedAtMs: T + ms });
    const declared = { groupKey: 'task-7/solve', expectedGroupSize: 3 };
    // Group of declared size 3: three episodes, two workers each, outcome rewards 1, 0, 1.
    await sdk.emitTransition(transition('a1', [0, 1], { ...declared, eventTimeMs: T + 10 }));
    await sdk.emitOutput(output('a1', 1, at(5)));
    await sdk.emitOutcome(outcome('a1', 1, { eventTimeMs: T + 20 }));
    await sdk.emitOutput(output('a1', 0, at(5)));
    await sdk.emitOutput(output('a2', 0, at(30)));
    await sdk.emitOutput(output('a2', 0, at(30))); // duplicate from a producer retry
    await sdk.emitOutput(output('a2', 1, at(30)));
    await sdk.emitTransition(transition('a2', [0, 1], { ...declared, eventTimeMs: T + 31 }));
    await sdk.emitTransition(transition('a2', [0, 1], { ...declared, eventTimeMs: T + 31 })); // duplicate
    await sdk.emitOutcome(outcome('a2', 0, { eventTimeMs: T + 40 }));
    await sdk.emitOutcome(outcome('a3', 1, { eventTimeMs: T + 50 }));
    await sdk.emitOutput(output('a3', 0, at(50)));
    await sdk.emitOutput(output('a3', 1, at(50)));
    await sdk.emitTransition(transition('a3', [0, 1], { ...declared, eventTimeMs: T + 51 }));
    // A set whose second member never arrives.
    await sdk.emitOutput(output('m1', 0, at(60)));
    await sdk.emitTransition(transition('m1', [0, 1], { taskId: 'task-m', eventTimeMs: T + 60 }));
    await sdk.emitOutcome(outcome('m1', 1, { eventTimeMs: T + 61 }));
    // Two sets of an undeclared group with immediate rewards: closes by deadline.
    await sdk.emitOutput(output('d1', 0, at(70)));
    await sdk.emitTransition(transition('d1', [0], { taskId: 'task-d', reward: 1, eventTimeMs: T + 70 }));
    await sdk.emitOutput(output('d2', 0, at(80)));
    await sdk.emitTransition(transition('d2', [0], { taskId: 'task-d', reward: 0, eventTimeMs: T + 80 }));
    // A garbage message among them.
    const raw = kafka.producer();
    await raw.connect();
    await raw.send({ topic: materializer.catalog.transitions.name, messages: [{ key: 'x', value: Buffer.from('not avro at all') }] });
    await raw.disconnect();
    // Later events move stream time past every deadline (sets first, then groups).
    await sdk.emitOutput(output('clock', 0, at(20_000)));
    await sdk.emitTransition(transition('clock', [0], { taskId: 'task-clock', reward: 1, eventTimeMs: T + 20_000 }));
    await sdk.emitOutput(output('clock2', 0, at(40_000)));
    await sdk.emitTransition(transition('clock2', [0], { taskId: 'task-clock', reward: 1, eventTimeMs: T + 40_000 }));

    const groups = await waitFor(
      async () => (await readTopicsToEnd(kafka, [materializer.catalog.advantageGroups.name])).map((r) => toPlain(codec.decodeAs('AdvantageGroup', r.value))),
      3,
    );
    const byKey = new Map(groups.map((g) => [g.groupKey, g]));
    const sized = byKey.get('worker|task-7/solve');
    expect(sized?.closeReason).toBe('SIZE');
    expect(sized?.sets.map((s) => s.set.setId)).toEqual(['a1/t0', 'a2/t0', 'a3/t0']);
    expect(sized?.sets.map((s) => s.set.members.map((m) => m.outputId))).toEqual([
      ['a1/o0', 'a1/o1'],
      ['a2/o0', 'a2/o1'],
      ['a3/o0', 'a3/o1'],
    ]);
    // rewards 1, 0, 1: mean 2/3, sample std sqrt(1/3); A = (R - 2/3) / (0.57735 + 1e-6)
    const sd = Math.sqrt(1 / 3) + 1e-6;
    sized?.sets.forEach((s, i) => expect(s.advantage).toBeCloseTo(([1, 0, 1][i] - 2 / 3) / sd, 9));
    // Every number traces back to Kafka coordinates.
    for (const s of sized?.sets ?? []) {
      expect(s.set.transitionSource.topic).toBe(materializer.catalog.transitions.name);
      expect(s.set.outcomeSource?.topic).toBe(materializer.catalog.episodeOutcomes.name);
      expect(s.setSource.topic).toBe(materializer.catalog.activeSets.name);
      for (const m of s.set.members) expect(m.source.topic).toBe(materializer.catalog.agentOutputs.name);
    }
    const deadline = byKey.get('worker|task-d/solve');
    expect(deadline?.closeReason).toBe('DEADLINE');
    expect(deadline?.sets.map((s) => [s.set.setId, s.set.reward])).toEqual([
      ['d1/t0', 1],
      ['d2/t0', 0],
    ]);

    // The incomplete set expires once the watermark passes its deadline: the outcomes partition stops
    // holding the watermark back when the idle poll sees it read to its end.
    const invalid = await waitFor(
      async () => (await readTopicsToEnd(kafka, [materializer.catalog.invalidSets.name])).map((r) => toPlain(codec.decodeAs('ActiveSet', r.value))),
      1,
    );
    expect(invalid.map((s) => [s.setId, s.invalidReason, s.missingOutputIds])).toEqual([['m1/t0', ReasonCode.MEMBER_MISSING_AT_TTL, ['m1/o1']]]);

    const dead = (await readTopicsToEnd(kafka, [materializer.catalog.deadLetter.name])).map((r) => toPlain(codec.decodeAs('DeadLetter', r.value)));
    expect(dead).toHaveLength(1);
    expect(dead[0].reasonCode).toBe(ReasonCode.DECODE_BAD_MAGIC);
    expect(dead[0].originalValue?.toString()).toBe('not avro at all');
    expect(dead[0].source.topic).toBe(materializer.catalog.transitions.name);
    expect(await materializer.metrics.value('deadletter_total', { reason: ReasonCode.DECODE_BAD_MAGIC })).toBe(1);

    // No set appears twice on the repartition topic despite the duplicates.
    const sets = (await readTopicsToEnd(kafka, [materializer.catalog.activeSets.name])).map((r) => codec.decodeAs('ActiveSet', r.value).setId);
    expect(new Set(sets).size).toBe(sets.length);
  });
});
