import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { Kafka } from 'kafkajs';
import { announceErasure } from '@srpo/audit';
import { ActiveSet, AdvantageGroup, AgentEventsProducer, createKafka, DeadLetter, EventCodec, readTopicsToEnd, toPlain } from '@srpo/events';
import { KeyStore } from '@srpo/store';
import { ensureKafka, outcome, output, streamClientEnv, transition, uniquePrefix } from '@srpo/testing';
import { loadMaterializerConfig } from '../src/materializer-config';
import { Materializer } from '../src/materializer.service';

const codec = new EventCodec();

async function waitFor<T>(what: string, read: () => Promise<T>, ok: (x: T) => boolean, timeoutMs = 60_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: T | undefined;
  while (Date.now() < deadline) {
    last = await read();
    if (ok(last)) return last;
    await new Promise((r) => setTimeout(r, 300));
  }
  throw new Error(`${what}: not there after ${timeoutMs} ms; last read ${JSON.stringify(last).slice(0, 2000)}`);
}

/**
 * The materializer under an erasure (docs/erasure.md), over the real broker: bob's sealed content
 * is waiting in both stages when he is erased while the materializer is down. Started again, it
 * reads the erasure from the erasures topic, drops bob's pending set and his set in the open
 * group, counts both, and values the group over alice's sets alone.
 */
describe('materializer: an erasure read from the erasures topic (real broker)', () => {
  const brokers = ensureKafka();
  const kafka: Kafka = createKafka({ brokers, clientId: 'materializer-erasure-test' });
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-materializer-erasure-'));
  const config = loadMaterializerConfig({
    ...streamClientEnv(),
    KAFKA_BROKERS: brokers.join(','),
    SRPO_TOPIC_PREFIX: uniquePrefix('mat-erase'),
    SRPO_RAW_PARTITIONS: '1',
    SRPO_DERIVED_PARTITIONS: '1',
    SRPO_SET_TTL_MS: '300000',
    SRPO_GROUP_TTL_MS: '20000',
    SRPO_STATE_DIR: path.join(dir, 'state'),
    SRPO_LOG_LEVEL: 'warn',
  });
  let materializer: Materializer | undefined;
  let keys: KeyStore;
  let sdk: AgentEventsProducer;

  const read = async <T>(topic: string, type: 'ActiveSet' | 'AdvantageGroup' | 'DeadLetter'): Promise<T[]> =>
    (await readTopicsToEnd(kafka, [topic])).map((r) => toPlain(codec.decodeAs(type, r.value)) as T);

  beforeAll(async () => {
    keys = await KeyStore.open({ kind: 'sqlite', path: path.join(dir, 'keys.sqlite') });
    materializer = new Materializer(config);
    await materializer.start();
    sdk = new AgentEventsProducer({ kafka, topics: materializer.catalog, sealer: keys });
  });

  afterAll(async () => {
    await sdk?.disconnect();
    await materializer?.stop();
    await keys?.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it("drops bob's pending set and his set in an open group, counts them, and groups alice's sets alone", async () => {
    const first = materializer as Materializer;
    const catalog = first.catalog;
    const T0 = Date.now() - 60 * 60_000;
    const at = (ms: number, subjectId: string) => ({ eventTimeMs: T0 + ms, startedAtMs: T0 + ms, subjectId });
    const done = (ep: string, ms: number, subjectId: string, reward: number | null, groupKey = 'g-er') =>
      transition(ep, [0], { groupKey, reward, eventTimeMs: T0 + ms, subjectId });

    // b1: bob's set waits for its outcome; b2 (bob) and a1 (alice) are complete and wait in group g-er.
    await sdk.emitOutput(output('b1', 0, at(0, 'bob')));
    await sdk.emitTransition(done('b1', 0, 'bob', null));
    await sdk.emitOutput(output('b2', 0, at(100, 'bob')));
    await sdk.emitTransition(done('b2', 100, 'bob', 1));
    await sdk.emitOutput(output('a1', 0, at(200, 'alice')));
    await sdk.emitTransition(done('a1', 200, 'alice', 1));
    const sets = () => read<ActiveSet>(catalog.activeSets.name, 'ActiveSet');
    await waitFor('b2/t0 and a1/t0 on active-sets', sets, (xs) => ['b2/t0', 'a1/t0'].every((id) => xs.some((s) => s.setId === id)));
    // Every output on the topic is ciphertext.
    for (const r of await readTopicsToEnd(kafka, [catalog.agentOutputs.name])) {
      const o = codec.decodeAs('AgentOutput', r.value);
      expect([o.sealed?.scheme, o.responseTokenIds]).toEqual(['aes-256-gcm/v1', []]);
    }
    await first.stop();
    materializer = undefined;

    // Bob is erased while the materializer is down: his keys go, and the erasure is announced.
    const erased = await keys.erase({ subjectId: 'bob' }, 'er-bob', Date.now());
    expect(erased.erasure.keyIds).toHaveLength(2);
    expect(await announceErasure(kafka, catalog.erasures, codec, erased.erasure)).toBe(1);

    const second = new Materializer(config);
    materializer = second;
    await second.start();
    // b1's outcome now: its set holds erased content and is settled, never emitted. Alice's a2 and
    // a3 join the group; a clock episode at +40 s moves stream time past the group's deadline.
    await sdk.emitOutcome(outcome('b1', 1, { eventTimeMs: T0 + 300, subjectId: 'bob' }));
    await sdk.emitOutput(output('a2', 0, at(400, 'alice')));
    await sdk.emitTransition(done('a2', 400, 'alice', 0));
    await sdk.emitOutput(output('a3', 0, at(500, 'alice')));
    await sdk.emitTransition(done('a3', 500, 'alice', 0));
    await sdk.emitOutput(output('clock', 0, at(40_000, 'carol')));
    await sdk.emitTransition(done('clock', 40_000, 'carol', 1, 'g-clock'));

    const groups = await waitFor(
      'group g-er',
      () => read<AdvantageGroup>(catalog.advantageGroups.name, 'AdvantageGroup'),
      (gs) => gs.some((g) => g.groupKey === 'worker|g-er'),
    );
    const g = groups.filter((x) => x.groupKey === 'worker|g-er');
    expect(g).toHaveLength(1);
    expect(g[0].sets.map((s) => s.set.setId)).toEqual(['a1/t0', 'a2/t0', 'a3/t0']);
    // Rewards 1, 0, 0 by hand: mean 1/3, sample std sqrt(1/3); A = (r - 1/3) / (sqrt(1/3) + 1e-6).
    const std = Math.sqrt(1 / 3);
    g[0].sets.forEach((s, i) => expect(s.advantage).toBeCloseTo([2 / 3, -1 / 3, -1 / 3][i] / (std + 1e-6), 5));
    expect((await sets()).map((s) => s.setId)).not.toContain('b1/t0');

    const m = second.metrics;
    expect(await m.value('materializer_erasures_read_total')).toBe(1);
    expect(await m.value('active-set-materializer_erased_outputs_total')).toBe(1);
    expect(await m.value('active-set-materializer_sets_erased_total', { workflow: 'JOINT' })).toBe(1);
    expect(await m.value('advantage-group-materializer_sets_erased_total')).toBe(1);
    expect(await read<DeadLetter>(catalog.deadLetter.name, 'DeadLetter')).toEqual([]);
  }, 150_000);
});
