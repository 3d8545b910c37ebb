import { ActiveSet, AdvantageGroup, EventCodec, sampleEvents, topicCatalog } from '@srpo/events';
import { DEFAULT_OBJECTIVE_CONFIG } from '@srpo/srpo';
import { ProcessorHarness, TransactionalStore } from '@srpo/streams';
import { sourceBackedSerde } from '@srpo/streams';
import { AdvantageGroupProcessor, AdvantageGroupStores, asDecoded } from './advantage-group.processor';
import { readMaterializerSettings } from './materializer-settings';
import { materializerTopology } from './topology';

const topics = topicCatalog({ prefix: 't.' });
const WINDOW = 600_000;
const codec = new EventCodec();

function set(id: string, reward: number, patch: Partial<ActiveSet> = {}): ActiveSet {
  return {
    ...sampleEvents(0).ActiveSet,
    setId: id,
    reward,
    groupKey: 'solver|task/solve',
    expectedGroupSize: null,
    eventTimeMs: 1000,
    progress: null,
    ...patch,
  };
}

function setup() {
  const h = new ProcessorHarness<AdvantageGroupStores>(
    new AdvantageGroupProcessor({ topics, codec, objective: DEFAULT_OBJECTIVE_CONFIG, groupTtlMs: 10_000, scanIntervalMs: 0 }),
  );
  const feed = (s: ActiveSet) => h.feed(h.record(topics.activeSets.name, { type: 'ActiveSet', value: s }, s.groupKey, codec));
  const groups = () => h.outputs.map((o) => o.value as AdvantageGroup);
  return { h, feed, groups };
}

describe('AdvantageGroupProcessor', () => {
  it('emits a declared-size group as soon as it fills, with sample-std advantages', () => {
    const s = setup();
    [set('c', 1, { expectedGroupSize: 4 }), set('a', 0, { expectedGroupSize: 4 }), set('b', 0, { expectedGroupSize: 4 })].forEach(s.feed);
    expect(s.groups()).toHaveLength(0);
    s.feed(set('d', 1, { expectedGroupSize: 4 }));
    const [g] = s.groups();
    expect(g.closeReason).toBe('SIZE');
    expect(g.sets.map((x) => x.set.setId)).toEqual(['a', 'b', 'c', 'd']);
    // rewards 0,0,1,1: mean 0.5, sample std sqrt(1/3) = 0.57735; A = ±0.5/(0.57735+1e-6)
    const a = 0.5 / (Math.sqrt(1 / 3) + 1e-6);
    g.sets.forEach((x, i) => expect(x.advantage).toBeCloseTo([-a, -a, a, a][i], 9));
    expect(g.rewardMean).toBe(0.5);
    expect(g.rewardStd).toBeCloseTo(0.5773502692, 9);
    expect(g.degenerate).toBe(false);
    expect(s.h.outputs[0].key).toBe('solver');
  });

  it('closes an undeclared group at its deadline', () => {
    const s = setup();
    s.feed(set('x', 1));
    s.feed(set('y', 0, { eventTimeMs: 2000 }));
    s.h.advanceTo(10_999);
    expect(s.groups()).toHaveLength(0);
    s.h.advanceTo(11_000);
    const [g] = s.groups();
    expect(g.closeReason).toBe('DEADLINE');
    expect(g.sets.map((x) => x.set.setId)).toEqual(['x', 'y']);
    // two sets, rewards 1 and 0: sample std = 0.70711, A = ±0.5/0.70711
    expect(g.sets[0].advantage).toBeCloseTo(0.5 / (Math.SQRT1_2 + 1e-6), 9);
  });

  it('emits a lone set at the deadline as a degenerate group with advantage 0', () => {
    const s = setup();
    s.feed(set('solo', 1));
    s.h.advanceTo(20_000);
    const [g] = s.groups();
    expect(g.degenerate).toBe(true);
    expect(g.sets[0].advantage).toBe(0);
  });

  it('drops duplicate sets, in an open group and after emission', () => {
    const s = setup();
    s.feed(set('a', 1, { expectedGroupSize: 2 }));
    s.feed(set('a', 1, { expectedGroupSize: 2 }));
    expect(s.groups()).toHaveLength(0);
    s.feed(set('b', 0, { expectedGroupSize: 2 }));
    s.feed(set('b', 0, { expectedGroupSize: 2 }));
    s.h.advanceTo(50_000);
    expect(s.groups()).toHaveLength(1);
    expect(s.groups()[0].sets).toHaveLength(2);
  });

  it('falls back to progress when the whole group failed', () => {
    const s = new ProcessorHarness<AdvantageGroupStores>(
      new AdvantageGroupProcessor({
        topics,
        codec,
        objective: { ...DEFAULT_OBJECTIVE_CONFIG, progress: { enabled: true, rewardThreshold: 1e-3, stdThreshold: 1e-4 } },
        scanIntervalMs: 0,
      }),
    );
    for (const [id, p] of [
      ['a', 0.5],
      ['b', 0],
    ] as const) {
      const v = set(id, 0, { progress: p, expectedGroupSize: 2 });
      s.feed(s.record(topics.activeSets.name, { type: 'ActiveSet', value: v }, v.groupKey, codec));
    }
    const g = s.outputs[0].value as AdvantageGroup;
    expect(g.sets.map((x) => x.advantageFromProgress)).toEqual([true, true]);
    // progress 0.5 and 0: mean 0.25, sample std 0.353553; A = ±0.25/0.353553
    expect(g.sets[0].advantage).toBeCloseTo(0.25 / (Math.sqrt(0.125) + 1e-6), 9);
    expect(g.rewardMean).toBe(0.25);
  });

  it('drops a set already in another open group, and one of an emitted group until it expires', () => {
    const s = setup();
    s.feed(set('a', 1, { expectedGroupSize: 2 }));
    // The same set id under another group key must not land in a second group.
    s.feed(set('a', 1, { expectedGroupSize: 2, groupKey: 'solver|other/solve' }));
    s.feed(set('b', 0, { expectedGroupSize: 2 }));
    expect(s.groups().map((g) => g.sets.map((x) => x.set.setId))).toEqual([['a', 'b']]);
    expect(s.h.counters.get('duplicates_total')).toBe(1);
    // Emitted at stream time 1000: remembered through 1000 + 10 min (the default window, which is
    // the set stage's default lateness allowance), then forgotten.
    expect(s.h.stores.closed.size).toBe(1);
    s.h.advanceTo(1000 + WINDOW);
    s.feed(set('b', 0, { expectedGroupSize: 2, eventTimeMs: 1000 + WINDOW }));
    expect(s.h.counters.get('duplicates_total')).toBe(2);
    s.h.advanceTo(1000 + WINDOW + 1);
    expect(s.h.stores.closed.size).toBe(0);
    expect(s.h.stores.groups.size).toBe(0);
  });

  it('drops a set duplicated just inside the lateness allowance once, with the live settings (dedupe window ≥ lateness)', () => {
    const settings = readMaterializerSettings({});
    const h = new ProcessorHarness<AdvantageGroupStores>(materializerTopology(topics, codec, settings).groups.processor);
    const feed = (v: ActiveSet) => h.feed(h.record(topics.activeSets.name, { type: 'ActiveSet', value: v }, v.groupKey, codec));
    feed(set('a', 1, { expectedGroupSize: 1 }));
    expect(h.outputs).toHaveLength(1);
    // A copy of the set (event time 1000) as late as the set stage still accepts its events.
    h.advanceTo(1000 + settings.maxLatenessMs);
    feed(set('a', 1, { expectedGroupSize: 1 }));
    expect(h.outputs).toHaveLength(1);
    expect(h.counters.get('duplicates_total')).toBe(1);
    expect(h.deadLetters).toHaveLength(0);
  });

  it('restores groups changelogged by the previous layout (sets and emitted ids in stores of their own)', () => {
    const s = setup();
    const stores = s.h.stores as unknown as Record<string, TransactionalStore<unknown>>;
    const a = set('a', 1, { expectedGroupSize: 3 });
    const aRaw = codec.encode('ActiveSet', a);
    const source = { topic: topics.activeSets.name, partition: 0, offset: 7 };
    stores.groups.restore(
      'solver|task/solve',
      Buffer.from(JSON.stringify({ groupKey: 'solver|task/solve', policyId: a.policyId, expectedSize: 3, setIds: ['a'], deadlineMs: 11_000 })),
    );
    stores.sets.restore('a', Buffer.from(JSON.stringify({ source })));
    (s.h.stores.sets.get('a') as { raw?: Buffer }).raw = aRaw;
    stores.emitted.restore('z', Buffer.from('600000'));
    s.h.processor.migrate?.(s.h.stores);
    expect([s.h.stores.sets.size, s.h.stores.emitted.size, s.h.stores.closed.size]).toEqual([0, 0, 1]);
    // Offsets in this harness: z 0, a 1, b 2, c 3; the restored a keeps its offset 7.
    s.feed(set('z', 1, { expectedGroupSize: 3 }));
    s.feed(set('a', 1, { expectedGroupSize: 3 }));
    expect(s.h.counters.get('duplicates_total')).toBe(2);
    s.feed(set('b', 0, { expectedGroupSize: 3 }));
    expect(s.groups()).toHaveLength(0);
    s.feed(set('c', 0, { expectedGroupSize: 3 }));
    const [g] = s.groups();
    expect(g.sets.map((x) => [x.set.setId, x.setSource.offset])).toEqual([
      ['a', 7],
      ['b', 2],
      ['c', 3],
    ]);
    // rewards 1, 0, 0: mean 1/3, sample std sqrt(1/3); A(a) = (2/3) / (sqrt(1/3) + 1e-6)
    expect(g.sets[0].advantage).toBeCloseTo(2 / 3 / (Math.sqrt(1 / 3) + 1e-6), 9);
    // Emitted ids keep their expiry: z is forgotten at 600 000.
    s.h.advanceTo(600_000);
    expect(s.h.stores.closed.lookup('sets', 'z')).toBeUndefined();
  });

  it('asDecoded gives what decoding the set bytes gives (temperature is an Avro float)', () => {
    const base = set('t', 1);
    const v: ActiveSet = { ...base, members: base.members.map((m, i) => ({ ...m, temperature: i === 0 ? 0.7 : 1 })) };
    const decoded = codec.decodeAs('ActiveSet', codec.encode('ActiveSet', v));
    const normal = asDecoded(v);
    // float32(0.7) = 0.699999988079071
    expect(normal.members[0].temperature).toBe(Math.fround(0.7));
    expect(normal.members[0].temperature).toBeCloseTo(0.699999988079071, 15);
    expect(normal).toEqual(decoded);
    expect(codec.encode('ActiveSet', normal).equals(codec.encode('ActiveSet', v))).toBe(true);
    // A value already in decoded form is returned as it is, not copied.
    expect(asDecoded(decoded)).toBe(decoded);
  });

  it('builds the same group bytes from in-memory sets, restored sets and plain values', () => {
    const members = (id: string, reward: number) => {
      const base = set(id, reward, { expectedGroupSize: 2 });
      return { ...base, members: base.members.map((m) => ({ ...m, temperature: 0.7 })) };
    };
    const run = (restored: boolean) => {
      const s = setup();
      const stores = s.h.stores;
      s.feed(members('a', 1));
      if (restored) {
        // What a restore leaves: the changelogged fields plus the re-read bytes, no decoded form.
        type Group = NonNullable<ReturnType<typeof stores.groups.get>>;
        const serde = sourceBackedSerde<Group>();
        const kept = stores.groups.get('solver|task/solve') as Group;
        const bytes = serde.serialize(kept);
        expect(JSON.parse(bytes.toString('utf8'))).toEqual({
          groupKey: 'solver|task/solve',
          policyId: kept.policyId,
          expectedSize: 2,
          deadlineMs: 11_000,
          sourced: [{ setId: 'a', source: { topic: topics.activeSets.name, partition: 0, offset: 0 } }],
        });
        const back = serde.deserialize(bytes);
        back.sourced[0].raw = kept.sourced[0].raw;
        expect(back.sourced[0].decoded).toBeUndefined();
        stores.groups.put('solver|task/solve', back);
      }
      s.feed(members('b', 0));
      return codec.encode('AdvantageGroup', s.groups()[0]);
    };
    expect(run(true).equals(run(false))).toBe(true);
  });
});

describe('AdvantageGroupProcessor: sets re-emitted for a revised outcome (docs/rewards.md)', () => {
  const outcomeAt = (offset: number) => ({ topic: 't.episode-outcomes', partition: 0, offset });

  it('replaces the set in its open group with the newer outcome, once; the group carries it without the note', () => {
    const s = setup();
    s.feed(set('a', 0, { outcomeSource: outcomeAt(5) }));
    s.feed(set('b', 1, { outcomeSource: outcomeAt(6) }));
    s.feed(set('a', 1, { outcomeSource: outcomeAt(9), correction: true, eventTimeMs: 4000 }));
    // An older correction (or a copy) changes nothing.
    s.feed(set('a', 0.5, { outcomeSource: outcomeAt(7), correction: true }));
    s.feed(set('a', 1, { outcomeSource: outcomeAt(9), correction: true, eventTimeMs: 4000 }));
    expect(s.h.counters.get('sets_reward_revised_total')).toBe(1);
    expect(s.h.counters.get('duplicates_total')).toBe(2);
    s.h.advanceTo(11_000);
    const [g] = s.groups();
    expect(g.sets.map((x) => [x.set.setId, x.set.reward, x.set.outcomeSource?.offset, x.set.invalidReason])).toEqual([
      ['a', 1, 9, null],
      ['b', 1, 6, null],
    ]);
    expect(g.degenerate).toBe(true);
    expect(g.eventTimeMs).toBe(4000);
  });

  it('counts a correction for a group already emitted, once per revision, and never groups it', () => {
    const s = setup();
    s.feed(set('a', 0, { outcomeSource: outcomeAt(5), expectedGroupSize: 2 }));
    s.feed(set('b', 1, { outcomeSource: outcomeAt(6), expectedGroupSize: 2 }));
    expect(s.groups()).toHaveLength(1);
    s.feed(set('a', 1, { outcomeSource: outcomeAt(9), correction: true, expectedGroupSize: 2 }));
    s.feed(set('a', 1, { outcomeSource: outcomeAt(9), correction: true, expectedGroupSize: 2 }));
    // A correction for a set this stage no longer remembers is counted too, not grouped as new.
    s.feed(set('z', 1, { outcomeSource: outcomeAt(11), correction: true, expectedGroupSize: 2 }));
    s.h.advanceTo(1_000_000);
    expect(s.groups()).toHaveLength(1);
    expect(s.h.counters.get('outcomes_superseded_after_emit_total')).toBe(2);
    expect(s.h.counters.get('duplicates_total')).toBe(1);
  });
});
