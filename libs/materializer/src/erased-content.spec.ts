import { ActiveSet, AdvantageGroup, EventCodec, sealOutput, topicCatalog, type ContentKey } from '@srpo/events';
import { DEFAULT_OBJECTIVE_CONFIG } from '@srpo/srpo';
import { ProcessorHarness } from '@srpo/streams';
import { activeSet, member, outcome, output, transition } from '@srpo/testing';
import { ActiveSetProcessor, ActiveSetStores } from './active-set.processor';
import { AdvantageGroupProcessor, AdvantageGroupStores } from './advantage-group.processor';
import { ErasedContentTable, setHoldsErased } from './erased-content';

const topics = topicCatalog({ prefix: 't.' });
const codec = new EventCodec();
const key = (keyId: string, fill: number): ContentKey => ({ keyId, key: Buffer.alloc(32, fill) });
const BOB = key('ck-bob', 1);
const ALICE = key('ck-alice', 2);

function erase(table: ErasedContentTable, subject: string, keyIds: string[], n = 0): void {
  table.add({ erasureId: `er-${subject}-${n}`, scope: 'subject', target: subject, keyIds, eventTimeMs: 1 });
}

describe('ErasedContentTable', () => {
  it('moves its generation only when an erasure adds something, and answers by key id', () => {
    const t = new ErasedContentTable();
    expect(t.generation).toBe(0);
    expect(t.mayHold(['bob'], 'ep')).toBe(false);
    erase(t, 'bob', ['ck-bob']);
    expect(t.generation).toBe(1);
    erase(t, 'bob', ['ck-bob']); // read again (a restarted reader): nothing new
    expect(t.generation).toBe(1);
    expect(t.size).toBe(1);
    expect(t.isErasedKey('ck-bob')).toBe(true);
    expect(t.isErasedKey('ck-alice')).toBe(false);
    expect(t.mayHold(['alice', 'bob'], 'ep-1')).toBe(true);
    expect(t.mayHold(['alice'], 'ep-1')).toBe(false);
    t.add({ erasureId: 'er-ep', scope: 'episode', target: 'ep-9', keyIds: ['ck-ep9'], eventTimeMs: 2 });
    expect(t.generation).toBe(2);
    expect(t.mayHold([], 'ep-9')).toBe(true);
  });

  it('finds erased content only in sealed members under an erased key, never in the clear', () => {
    const t = new ErasedContentTable();
    erase(t, 'bob', ['ck-bob']);
    const sealedBob = { ...activeSet('s1', [member({ outputId: 'o1', logpOld: [-1, -1, -1], subjectId: 'bob', seal: BOB })]), subjectIds: ['bob'] };
    const clearBob = { ...activeSet('s2', [member({ outputId: 'o2', logpOld: [-1, -1, -1], subjectId: 'bob' })]), subjectIds: ['bob'] };
    // Sealed for bob after the erasure: a new key, not erased.
    const newKey = { ...activeSet('s3', [member({ outputId: 'o3', logpOld: [-1, -1, -1], subjectId: 'bob', seal: key('ck-bob-2', 3) })]), subjectIds: ['bob'] };
    expect(setHoldsErased(sealedBob, t, codec)).toBe(true);
    expect(setHoldsErased(clearBob, t, codec)).toBe(false);
    expect(setHoldsErased(newKey, t, codec)).toBe(false);
  });
});

describe('AdvantageGroupProcessor under erasures', () => {
  function setup(erased: ErasedContentTable) {
    const h = new ProcessorHarness<AdvantageGroupStores>(
      new AdvantageGroupProcessor({ topics, codec, objective: DEFAULT_OBJECTIVE_CONFIG, groupTtlMs: 10_000, scanIntervalMs: 0, erased }),
    );
    const feed = (s: ActiveSet) => h.feed(h.record(topics.activeSets.name, { type: 'ActiveSet', value: s }, s.groupKey, codec));
    const groups = () => h.outputs.map((o) => o.value as AdvantageGroup);
    return { h, feed, groups };
  }
  const set = (id: string, reward: number, subject: string, seal: ContentKey): ActiveSet => ({
    ...activeSet(id, [member({ outputId: `${id}/o`, logpOld: [-1, -1, -1], subjectId: subject, seal })]),
    episodeId: `ep-${id}`,
    subjectIds: [subject],
    reward,
    eventTimeMs: 1000,
  });

  it("drops an open group's erased sets when the erasure is read, and values the group over the sets left", () => {
    const erased = new ErasedContentTable();
    const s = setup(erased);
    [set('a', 1, 'alice', ALICE), set('b', 1, 'bob', BOB), set('c', 0, 'alice', ALICE), set('d', 0, 'alice', ALICE)].forEach(s.feed);
    erase(erased, 'bob', ['ck-bob']);
    s.h.advanceTo(11_000); // the deadline scan sweeps first, then emits
    const [g] = s.groups();
    expect(g.sets.map((x) => x.set.setId)).toEqual(['a', 'c', 'd']);
    // Rewards 1, 0, 0 by hand: mean 1/3, sample std sqrt(((2/3)^2 + 2 (1/3)^2) / 2) = sqrt(1/3).
    const std = Math.sqrt(1 / 3);
    expect(g.rewardMean).toBeCloseTo(1 / 3, 12);
    g.sets.forEach((x, i) => expect(x.advantage).toBeCloseTo([2 / 3, -1 / 3, -1 / 3][i] / (std + 1e-6), 9));
    expect(s.h.counters.get('sets_erased_total')).toBe(1);
  });

  it('never groups a set that arrives after the erasure, and forgets a group left empty', () => {
    const erased = new ErasedContentTable();
    const s = setup(erased);
    s.feed(set('b1', 1, 'bob', BOB));
    erase(erased, 'bob', ['ck-bob']);
    s.feed(set('b2', 0, 'bob', BOB)); // sweeps b1 (group left empty), then drops b2
    s.h.advanceTo(20_000);
    expect(s.groups()).toHaveLength(0);
    expect(s.h.counters.get('sets_erased_total')).toBe(2);
    expect([...s.h.stores.groups.entries()]).toHaveLength(0);
  });
});

describe('ActiveSetProcessor under erasures', () => {
  function setup(erased: ErasedContentTable) {
    const h = new ProcessorHarness<ActiveSetStores>(
      new ActiveSetProcessor({ topics, codec, setTtlMs: 10_000, scanIntervalMs: 0, dedupeRetentionMs: 50_000, maxLatenessMs: 50_000, erased }),
    );
    const o = (v: ReturnType<typeof output>) => h.record(topics.agentOutputs.name, { type: 'AgentOutput', value: v }, v.episodeId, codec);
    const t = (v: ReturnType<typeof transition>) => h.record(topics.transitions.name, { type: 'Transition', value: v }, v.episodeId, codec);
    const r = (v: ReturnType<typeof outcome>) => h.record(topics.episodeOutcomes.name, { type: 'EpisodeOutcome', value: v }, v.episodeId, codec);
    const sets = () => h.outputs.filter((x) => x.topic === topics.activeSets.name).map((x) => x.value as ActiveSet);
    return { h, o, t, r, sets };
  }
  const sealed = (ep: string, i: number, subject: string, k: ContentKey) => sealOutput(output(ep, i, { subjectId: subject }), k);

  it("settles a pending set whose member's key was erased: never emitted, its bytes dropped, the episode's other sets untouched", () => {
    const erased = new ErasedContentTable();
    const s = setup(erased);
    // Episode e1: bob's set waits for its outcome; alice's set in e2 likewise.
    s.h.feedAll([s.o(sealed('e1', 0, 'bob', BOB)), s.t(transition('e1', [0])), s.o(sealed('e2', 0, 'alice', ALICE)), s.t(transition('e2', [0]))]);
    expect(s.h.stores.episodes.get('e1')?.sourced).toHaveLength(1);
    erase(erased, 'bob', ['ck-bob']);
    s.h.feedAll([s.r(outcome('e1', 1)), s.r(outcome('e2', 1))]);
    expect(s.sets().map((x) => x.setId)).toEqual(['e2/t0']);
    expect(s.h.counters.get('sets_erased_total{"workflow":"JOINT"}')).toBe(1);
    expect(s.h.counters.get('erased_outputs_total')).toBe(1);
    const e1 = s.h.stores.episodes.get('e1');
    expect(e1?.sourced ?? []).toHaveLength(0);
    expect(e1?.erasedOutputIds ?? []).toEqual(['e1/o0']);
    expect(s.h.deadLetters).toHaveLength(0);
  });

  it('settles the set of an output that arrives under an erased key, and still recognises its duplicate', () => {
    const erased = new ErasedContentTable();
    erase(erased, 'bob', ['ck-bob']);
    const s = setup(erased);
    const late = sealed('e3', 0, 'bob', BOB);
    s.h.feedAll([s.t(transition('e3', [0])), s.o(late), s.r(outcome('e3', 1))]);
    s.h.feed(s.o(late));
    expect(s.sets()).toHaveLength(0);
    expect(s.h.counters.get('sets_erased_total{"workflow":"JOINT"}')).toBe(1);
    expect(s.h.counters.get('duplicates_total{"type":"AgentOutput"}')).toBe(1);
    expect(s.h.deadLetters).toHaveLength(0);
    // Nothing waits for the member: no invalid set at the deadline.
    s.h.advanceTo(100_000);
    expect(s.h.outputs.filter((x) => x.topic === topics.invalidSets.name)).toHaveLength(0);
  });

  it('keeps content in the clear and sealed under other keys', () => {
    const erased = new ErasedContentTable();
    erase(erased, 'bob', ['ck-bob']);
    const s = setup(erased);
    s.h.feedAll([
      s.o(output('e4', 0, { subjectId: 'bob' })),
      s.o(sealed('e4', 1, 'bob', key('ck-bob-new', 5))),
      s.t(transition('e4', [0, 1])),
      s.r(outcome('e4', 1)),
    ]);
    expect(s.sets().map((x) => x.setId)).toEqual(['e4/t0']);
    expect(s.h.counters.get('erased_outputs_total')).toBeUndefined();
  });
});
