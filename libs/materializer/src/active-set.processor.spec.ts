import { ActiveSet, EventCodec, ReasonCode, topicCatalog } from '@srpo/events';
import { InputRecord, ProcessorHarness, TransactionalStore } from '@srpo/streams';
import { ActiveSetProcessor, ActiveSetStores } from './active-set.processor';
import { readMaterializerSettings } from './materializer-settings';
import { materializerTopology } from './topology';
import { outcome, output, transition } from '@srpo/testing';

const topics = topicCatalog({ prefix: 't.' });
const codec = new EventCodec();

function setup(ttl = 10_000, latestPolicyVersion?: (policyId: string) => number | undefined) {
  const h = new ProcessorHarness<ActiveSetStores>(
    new ActiveSetProcessor({ topics, codec, setTtlMs: ttl, scanIntervalMs: 0, dedupeRetentionMs: 50_000, maxLatenessMs: 50_000, latestPolicyVersion }),
  );
  const o = (v: ReturnType<typeof output>) => h.record(topics.agentOutputs.name, { type: 'AgentOutput', value: v }, v.episodeId, codec);
  const t = (v: ReturnType<typeof transition>) => h.record(topics.transitions.name, { type: 'Transition', value: v }, v.episodeId, codec);
  const r = (v: ReturnType<typeof outcome>) => h.record(topics.episodeOutcomes.name, { type: 'EpisodeOutcome', value: v }, v.episodeId, codec);
  const sets = () => h.outputs.filter((x) => x.topic === topics.activeSets.name).map((x) => x.value as ActiveSet);
  const invalid = () => h.outputs.filter((x) => x.topic === topics.invalidSets.name).map((x) => x.value as ActiveSet);
  return { h, o, t, r, sets, invalid };
}

describe('ActiveSetProcessor', () => {
  it('emits a set once every listed output and the outcome arrived, in any order', () => {
    const orders: ((s: ReturnType<typeof setup>) => InputRecord)[][] = [
      [(s) => s.o(output('e1', 0)), (s) => s.o(output('e1', 1)), (s) => s.t(transition('e1', [0, 1])), (s) => s.r(outcome('e1', 1))],
      [(s) => s.r(outcome('e1', 1)), (s) => s.t(transition('e1', [0, 1])), (s) => s.o(output('e1', 1)), (s) => s.o(output('e1', 0))],
      [(s) => s.t(transition('e1', [0, 1])), (s) => s.o(output('e1', 1)), (s) => s.r(outcome('e1', 1)), (s) => s.o(output('e1', 0))],
    ];
    for (const order of orders) {
      const s = setup();
      order.forEach((make, i) => {
        s.h.feed(make(s));
        // Nothing may be emitted before the last input.
        expect(s.sets()).toHaveLength(i === order.length - 1 ? 1 : 0);
      });
      const [set] = s.sets();
      expect(set.setId).toBe('e1/t0');
      expect(set.status).toBe('COMPLETE');
      expect(set.members.map((m) => m.outputId)).toEqual(['e1/o0', 'e1/o1']);
      expect(set.reward).toBe(1);
      expect(set.rewardSource).toBe('OUTCOME');
      // Coverage: 2 distinct observations over 1 turn: (2 - 1) / 1.
      expect(set.progress).toBe(1);
      expect(set.groupKey).toBe('worker|task-1/solve');
      expect(s.h.deadLetters).toHaveLength(0);
    }
  });

  it('uses the immediate reward without waiting for an outcome', () => {
    const s = setup();
    s.h.feedAll([s.o(output('e2', 0)), s.t(transition('e2', [0], { reward: 0.25, done: false }))]);
    expect(s.sets().map((x) => [x.reward, x.rewardSource])).toEqual([[0.25, 'IMMEDIATE']]);
  });

  it("carries the distinct subjects of a set's members, transition and outcome, sorted; an immediate reward's set has no outcome subject", () => {
    const s = setup();
    s.h.feedAll([
      s.o(output('e9', 0, { subjectId: 'user-b' })),
      s.o(output('e9', 1, { subjectId: 'user-a' })),
      s.o(output('e9', 2, { subjectId: null })),
      s.t(transition('e9', [0, 1, 2], { subjectId: 'user-b' })),
      s.r(outcome('e9', 1, { subjectId: 'user-c' })),
    ]);
    s.h.feedAll([
      s.o(output('e8', 0, { subjectId: 'user-d' })),
      s.t(transition('e8', [0], { reward: 1, done: false })),
      s.r(outcome('e8', 1, { subjectId: 'user-e' })),
    ]);
    expect(s.sets().map((x) => [x.setId, x.subjectIds])).toEqual([
      ['e9/t0', ['user-a', 'user-b', 'user-c']],
      ['e8/t0', ['user-d']],
    ]);
  });

  it('ignores exact duplicates of every event type', () => {
    const s = setup();
    const records = [s.o(output('e3', 0)), s.t(transition('e3', [0])), s.r(outcome('e3', 0))];
    s.h.feedAll(records);
    s.h.feedAll([s.o(output('e3', 0)), s.t(transition('e3', [0])), s.r(outcome('e3', 0))]);
    expect(s.sets()).toHaveLength(1);
    expect(s.invalid()).toHaveLength(0);
    expect(s.h.deadLetters).toHaveLength(0);
    expect(s.h.counters.get('duplicates_total{"type":"AgentOutput"}')).toBe(1);
  });

  it('dead-letters a duplicate id with different content', () => {
    const s = setup();
    s.h.feedAll([s.o(output('e4', 0)), s.o(output('e4', 0, { responseTokenIds: [9, 9] }))]);
    expect(s.h.deadLetters.map((d) => d.reasonCode)).toEqual([ReasonCode.CONFLICTING_DUPLICATE]);
    s.h.feedAll([s.t(transition('e4', [0])), s.t(transition('e4', [0], { taskId: 'other' }))]);
    expect(s.h.deadLetters.map((d) => d.reasonCode)).toEqual([ReasonCode.CONFLICTING_DUPLICATE, ReasonCode.CONFLICTING_DUPLICATE]);
  });

  it('invalidates a set whose member is missing at the deadline, whole, with the missing ids', () => {
    const s = setup(5_000);
    s.h.feedAll([s.o(output('e5', 0, { eventTimeMs: 1000 })), s.t(transition('e5', [0, 1, 2], { eventTimeMs: 1000 })), s.r(outcome('e5', 1))]);
    s.h.advanceTo(5_999);
    expect(s.invalid()).toHaveLength(0);
    s.h.advanceTo(6_000);
    const [bad] = s.invalid();
    expect(bad.status).toBe('INVALID');
    expect(bad.invalidReason).toBe(ReasonCode.MEMBER_MISSING_AT_TTL);
    expect(bad.missingOutputIds).toEqual(['e5/o1', 'e5/o2']);
    expect(bad.members.map((m) => m.outputId)).toEqual(['e5/o0']);
    expect(s.sets()).toHaveLength(0);
    // A late member after the deadline does not resurrect the set.
    s.h.feed(s.o(output('e5', 1, { eventTimeMs: 6000 })));
    expect(s.sets()).toHaveLength(0);
  });

  it('dead-letters relation errors with their reason codes', () => {
    const s = setup();
    s.h.feedAll([
      s.o(output('e6', 0)),
      s.o(output('e7', 0)),
      s.t(transition('e6', [0])),
      // another transition claims e6/o0
      s.t({ ...transition('e6', [0]), transitionId: 'e6/t1' }),
      // lists an output of episode e7
      s.t({ ...transition('e6', []), transitionId: 'e6/t2', consumedOutputIds: ['e7/o0'], expectedCardinality: 1 }),
      s.t({ ...transition('e8', [0, 0]), transitionId: 'e8/t0' }),
      s.t({ ...transition('e8', [0, 1]), expectedCardinality: 3 }),
    ]);
    expect(s.h.deadLetters.map((d) => d.reasonCode)).toEqual([
      ReasonCode.OUTPUT_CLAIMED_TWICE,
      ReasonCode.FOREIGN_EPISODE_OUTPUT,
      ReasonCode.DUPLICATE_OUTPUT_IN_TRANSITION,
      ReasonCode.CARDINALITY_MISMATCH,
    ]);
  });

  it('dead-letters bad fields, wrong keys and clock skew', () => {
    const s = setup();
    s.h.feed(s.o(output('e9', 0, { eventTimeMs: 10_000, startedAtMs: 10_000 })));
    s.h.feed(s.o(output('e9', 1, { behaviourLogProbs: [NaN, -1] })));
    s.h.feed(s.h.record(topics.agentOutputs.name, { type: 'AgentOutput', value: output('e9', 2) }, 'wrong-key', codec));
    // 4 h ahead of the broker's clock (the record was appended at 10 s).
    const ahead = output('e9', 3, { eventTimeMs: 10_000 + 4 * 3_600_000, startedAtMs: 10_000 });
    s.h.feed(s.h.record(topics.agentOutputs.name, { type: 'AgentOutput', value: ahead }, 'e9', codec, { timestampMs: 10_000 }));
    expect(s.h.deadLetters.map((d) => [d.reasonCode, d.details.field])).toEqual([
      [ReasonCode.INVALID_FIELD, 'AgentOutput.behaviourLogProbs[0]'],
      [ReasonCode.KEY_MISMATCH, 'AgentOutput.episodeId'],
      [ReasonCode.CLOCK_SKEW, 'AgentOutput.eventTimeMs'],
    ]);
    // The skewed event did not move stream time.
    expect(s.h.streamTimeMs).toBe(10_000);
  });

  it('accepts floor behaviour log-probs (−9999) as data, keeps them verbatim in the set, and counts them', () => {
    const s = setup();
    s.h.feedAll([
      s.o(output('ef', 0, { behaviourLogProbs: [-9999, -0.25] })),
      // A masked floor token never enters a ratio and is not counted.
      s.o(output('ef', 1, { behaviourLogProbs: [-9999, -9999], lossMask: [true, false] })),
      s.o(output('ef', 2)),
      s.t(transition('ef', [0, 1, 2])),
      s.r(outcome('ef', 1)),
    ]);
    expect(s.h.deadLetters).toHaveLength(0);
    const [set] = s.sets();
    expect(set.status).toBe('COMPLETE');
    expect(codec.decodeAs('AgentOutput', set.members[0].output).behaviourLogProbs).toEqual([-9999, -0.25]);
    expect(s.h.counters.get('behaviour_logprob_floor_outputs_total{"policy":"worker"}')).toBe(2);
    expect(s.h.counters.get('behaviour_logprob_floor_tokens_total{"policy":"worker"}')).toBe(2);
  });

  it('dead-letters an outcome whose episode never shows up, at its deadline', () => {
    const s = setup(5_000);
    s.h.feed(s.r(outcome('ghost', 1, { eventTimeMs: 1000 })));
    s.h.advanceTo(5_999);
    expect(s.h.deadLetters).toHaveLength(0);
    s.h.advanceTo(6_000);
    expect(s.h.deadLetters.map((d) => d.reasonCode)).toEqual([ReasonCode.UNKNOWN_EPISODE]);
  });

  it('forgets an episode whose outcome came first and whose transition never does', () => {
    const s = setup();
    // Outcome first (an orphan, with a 10 s deadline), then an output; no transition ever.
    s.h.feedAll([s.r(outcome('e14', 1, { eventTimeMs: 1000 })), s.o(output('e14', 0))]);
    // Past the orphan deadline the outcome is the episode's, not an unknown episode's.
    s.h.advanceTo(20_000);
    expect(s.h.deadLetters).toHaveLength(0);
    expect(s.h.stores.episodes.size).toBe(1);
    // Last event at 1000, retention 50 000: kept through 51 000 (inclusive), then abandoned, output and all.
    s.h.advanceTo(51_000);
    expect(s.h.stores.episodes.size).toBe(1);
    s.h.advanceTo(51_001);
    expect(s.h.stores.episodes.size).toBe(0);
    expect(s.h.stores.episodes.lookup('owners', 'e14/o0')).toBeUndefined();
    expect(s.h.counters.get('episodes_abandoned_total')).toBe(1);
    expect(s.h.deadLetters).toHaveLength(0);
  });

  it('frees the state of closed episodes after the retention window', () => {
    const s = setup();
    s.h.feedAll([s.o(output('e10', 0)), s.t(transition('e10', [0])), s.r(outcome('e10', 1))]);
    // The set is out: nothing of it waits any more, but it is held, outputs and all, until its
    // reward deadline (1000 + the 10 s window) for a revised outcome to re-emit it.
    expect(s.h.stores.episodes.get('e10')?.transitions).toEqual({});
    expect(s.h.stores.episodes.get('e10')?.sourced.map((o) => o.outputId)).toEqual(['e10/o0']);
    s.h.advanceTo(10_999);
    expect(Object.keys(s.h.stores.episodes.get('e10')?.emitted ?? {})).toEqual(['e10/t0']);
    s.h.advanceTo(11_000);
    expect(s.h.stores.episodes.get('e10')?.sourced).toEqual([]);
    expect(s.h.stores.episodes.get('e10')?.emitted).toEqual({});
    expect(s.h.stores.episodes.size).toBe(1);
    // Claims and ownerships outlive the set (later relation checks need them), not the episode.
    expect(s.h.stores.episodes.lookup('claims', 'e10/o0')).toBe('e10');
    expect(s.h.stores.episodes.lookup('owners', 'e10/o0')).toBe('e10');
    // Kept for the retention window after the end of its reward window (11 000), inclusive.
    s.h.advanceTo(11_000 + 50_000);
    expect(s.h.stores.episodes.size).toBe(1);
    s.h.advanceTo(11_000 + 50_001);
    expect(s.h.stores.episodes.size).toBe(0);
    expect(s.h.stores.episodes.lookup('claims', 'e10/o0')).toBeUndefined();
    expect(s.h.stores.episodes.lookup('owners', 'e10/o0')).toBeUndefined();
  });

  it('drops a duplicate arriving just inside the lateness allowance once, with the live settings (dedupe window ≥ lateness)', () => {
    // The processor as the materializer builds it from an empty environment: 10 min lateness allowance.
    const settings = readMaterializerSettings({});
    const h = new ProcessorHarness<ActiveSetStores>(materializerTopology(topics, codec, settings).sets.processor);
    const lateness = settings.maxLatenessMs;
    const o = () => h.record(topics.agentOutputs.name, { type: 'AgentOutput', value: output('late', 0) }, 'late', codec);
    const t = () => h.record(topics.transitions.name, { type: 'Transition', value: transition('late', [0]) }, 'late', codec);
    const r = () => h.record(topics.episodeOutcomes.name, { type: 'EpisodeOutcome', value: outcome('late', 1) }, 'late', codec);
    const emitted = () => h.outputs.filter((x) => x.topic === topics.activeSets.name).map((x) => (x.value as ActiveSet).setId);
    h.feedAll([o(), t(), r()]);
    expect(emitted()).toEqual(['late/t0']);
    // Every event is at 1000; stream time reaches 1000 + allowance: the last instant a copy of them is accepted.
    // (The episode itself is kept until its reward window, 60 s, plus the retention window have passed.)
    h.advanceTo(1000 + lateness);
    h.feedAll([o(), t(), r()]);
    expect(h.deadLetters).toHaveLength(0);
    expect(emitted()).toEqual(['late/t0']);
    expect(h.counters.get('duplicates_total{"type":"AgentOutput"}')).toBe(1);
    expect(h.counters.get('duplicates_total{"type":"Transition"}')).toBe(1);
    expect(h.counters.get('duplicates_total{"type":"EpisodeOutcome"}')).toBe(1);
    // One scan interval later a copy is refused as too late, not taken as new; after its reward window and the retention window the episode is forgotten.
    h.advanceTo(1000 + lateness + 1000);
    h.feedAll([o(), t(), r()]);
    expect(h.deadLetters.map((d) => d.reasonCode)).toEqual([ReasonCode.CLOCK_SKEW, ReasonCode.CLOCK_SKEW, ReasonCode.CLOCK_SKEW]);
    h.advanceTo(1000 + settings.setTtlMs + lateness + 1000);
    expect(h.stores.episodes.size).toBe(0);
    h.deadLetters.length = 0;
    h.feedAll([o(), t(), r()]);
    expect(h.deadLetters.map((d) => d.reasonCode)).toEqual([ReasonCode.CLOCK_SKEW, ReasonCode.CLOCK_SKEW, ReasonCode.CLOCK_SKEW]);
    expect(emitted()).toEqual(['late/t0']);
  });

  it('forgets an episode that never finishes once it has been idle for the retention window', () => {
    const s = setup();
    // An immediate reward emits the set, but no `done` transition and no outcome ever come.
    s.h.feedAll([s.o(output('e11', 0)), s.t(transition('e11', [0], { reward: 1, done: false }))]);
    expect(s.sets().map((x) => x.setId)).toEqual(['e11/t0']);
    expect(s.h.stores.episodes.get('e11')?.closed).toBe(false);
    // Last event at 1000; retention 50 000: still kept at 51 000, gone at 51 001.
    s.h.advanceTo(51_000);
    expect(s.h.stores.episodes.size).toBe(1);
    s.h.advanceTo(51_001);
    expect(s.h.stores.episodes.size).toBe(0);
    expect(s.h.stores.episodes.lookup('claims', 'e11/o0')).toBeUndefined();
    expect(s.h.stores.episodes.lookup('owners', 'e11/o0')).toBeUndefined();
    expect(s.h.counters.get('episodes_abandoned_total')).toBe(1);
  });

  it('judges relations against sets already emitted, not only waiting ones', () => {
    const s = setup();
    s.h.feedAll([s.o(output('r1', 0)), s.o(output('r1', 1)), s.t(transition('r1', [0, 1])), s.r(outcome('r1', 1))]);
    expect(s.sets().map((x) => x.setId)).toEqual(['r1/t0']);
    // Episode r1 is closed and its outputs' bytes are dropped; every late contradiction still has its own reason.
    s.h.feedAll([
      s.t({ ...transition('r1', [0]), transitionId: 'r1/t1', step: 1 }),
      s.t({ ...transition('r2', []), consumedOutputIds: ['r1/o1'], expectedCardinality: 1 }),
      s.t(transition('r1', [0, 1], { observationDigest: 'other' })),
      s.o(output('r1', 1, { responseTokenIds: [7, 7] })),
      s.o({ ...output('r3', 0), outputId: 'r1/o0' }),
    ]);
    expect(s.h.deadLetters.map((d) => [d.reasonCode, d.details.field])).toEqual([
      [ReasonCode.OUTPUT_CLAIMED_TWICE, 'Transition.consumedOutputIds[0]'],
      [ReasonCode.FOREIGN_EPISODE_OUTPUT, 'Transition.consumedOutputIds[0]'],
      [ReasonCode.CONFLICTING_DUPLICATE, 'Transition.transitionId'],
      [ReasonCode.CONFLICTING_DUPLICATE, 'AgentOutput.outputId'],
      [ReasonCode.CONFLICTING_DUPLICATE, 'AgentOutput.outputId'],
    ]);
    // Exact duplicates of emitted events are still just duplicates.
    s.h.feedAll([s.o(output('r1', 1)), s.t(transition('r1', [0, 1]))]);
    expect(s.h.deadLetters).toHaveLength(5);
    expect(s.sets()).toHaveLength(1);
  });

  it('migrates state changelogged by the previous layout (outputs, transitions, bare claims in stores of their own)', () => {
    // Transition e12/t0 waits for e12/o1; the previous layout kept it, the waiting output
    // e12/o0 and the episode (claims as bare ids) in three stores.
    const before = setup();
    before.h.feedAll([before.o(output('e12', 0)), before.t(transition('e12', [0, 1]))]);
    const current = before.h.stores.episodes.get('e12') as unknown as Record<string, unknown> & {
      transitions: Record<string, unknown>;
      sourced: { raw?: Buffer }[];
    };
    const { claims, transitions, sourced, outputDigests: _o, transitionDigests: _t, ...legacyEpisode } = current;
    const waiting = sourced[0];
    const s = setup();
    const stores = s.h.stores as unknown as Record<string, TransactionalStore<unknown>>;
    const json = (v: unknown) => Buffer.from(JSON.stringify(v, (k, x: unknown) => (k === 'raw' ? undefined : x)));
    stores.episodes.restore('e12', json({ ...legacyEpisode, claimedOutputIds: Object.keys(claims as object) }));
    stores.transitions.restore('e12/t0', json(transitions['e12/t0']));
    stores.outputs.restore('e12/o0', json(waiting));
    // Hydration, as the runner does for source-backed stores.
    (s.h.stores.outputs.get('e12/o0') as { raw?: Buffer }).raw = waiting.raw;
    s.h.processor.migrate?.(s.h.stores);
    expect(s.h.stores.outputs.size).toBe(0);
    expect(s.h.stores.transitions.size).toBe(0);
    expect(s.h.stores.episodes.get('e12')?.claims).toEqual({ 'e12/o0': 'e12/t0', 'e12/o1': 'e12/t0' });
    expect(s.h.stores.episodes.lookup('claims', 'e12/o1')).toBe('e12');
    // A second claim names the waiting transition.
    s.h.feed(s.t({ ...transition('e12', [1]), transitionId: 'e12/t9', step: 9 }));
    expect(s.h.deadLetters.map((d) => [d.reasonCode, d.reason])).toEqual([
      [ReasonCode.OUTPUT_CLAIMED_TWICE, expect.stringContaining('already consumed by transition e12/t0')],
    ]);
    // The missing output and the outcome complete the migrated set, with the migrated output's bytes.
    s.h.feedAll([s.o(output('e12', 1)), s.r(outcome('e12', 1))]);
    const [set] = s.sets();
    expect([set.setId, set.members.map((m) => m.outputId)]).toEqual(['e12/t0', ['e12/o0', 'e12/o1']]);
    expect(set.members[0].output.equals(waiting.raw as Buffer)).toBe(true);
    // Migrating current state writes nothing.
    const again = setup();
    again.h.feedAll([again.o(output('e13', 0))]);
    again.h.processor.migrate?.(again.h.stores);
    expect((again.h.stores.episodes as unknown as TransactionalStore<unknown>).dirty).toBe(false);
  });

  it('dead-letters an output stamped with a policy version newer than the newest published one', () => {
    const published = new Map([['worker', 5]]);
    const s = setup(10_000, (id) => published.get(id));
    s.h.feedAll([
      s.o(output('p1', 0, { policyVersion: 5 })),
      s.o(output('p1', 1, { policyVersion: 6 })),
      s.o({ ...output('p1', 2, { policyVersion: 99 }), policyId: 'unannounced' }),
    ]);
    expect(s.h.deadLetters.map((d) => [d.reasonCode, d.details.field, d.record.source.offset])).toEqual([
      [ReasonCode.FUTURE_POLICY_VERSION, 'AgentOutput.policyVersion', 1],
    ]);
    // Once the learner announces version 6, the same output is accepted.
    published.set('worker', 6);
    s.h.feed(s.o(output('p1', 1, { policyVersion: 6 })));
    expect(s.h.deadLetters).toHaveLength(1);
    expect(s.h.stores.episodes.get('p1')?.sourced.map((o) => o.outputId)).toEqual(['p1/o0', 'p1/o2', 'p1/o1']);
  });

  it('dead-letters a valid event on another raw topic than its own', () => {
    const s = setup();
    s.h.feed(s.h.record(topics.agentOutputs.name, { type: 'Transition', value: transition('w1', [0]) }, 'w1', codec));
    s.h.feed(s.h.record(topics.episodeOutcomes.name, { type: 'AgentOutput', value: output('w1', 0) }, 'w1', codec));
    expect(s.h.deadLetters.map((d) => d.reasonCode)).toEqual([ReasonCode.WRONG_EVENT_TYPE, ReasonCode.WRONG_EVENT_TYPE]);
    expect(s.h.stores.episodes.size).toBe(0);
  });

  it('does not let a refused event move stream time', () => {
    const s = setup(5_000);
    s.h.feedAll([s.o(output('s1', 0, { eventTimeMs: 1000 })), s.t(transition('s1', [0], { eventTimeMs: 1000 }))]);
    // 30 minutes ahead (inside the 1 h skew bound) but invalid: were it to count, the set would expire now.
    s.h.feed(s.o(output('s2', 0, { eventTimeMs: 1_801_000, startedAtMs: 1000, behaviourLogProbs: [NaN, -1] })));
    expect(s.h.deadLetters.map((d) => d.reasonCode)).toEqual([ReasonCode.INVALID_FIELD]);
    expect(s.h.streamTimeMs).toBe(1000);
    expect(s.invalid()).toHaveLength(0);
    s.h.feed(s.r(outcome('s1', 1, { eventTimeMs: 1001 })));
    expect(s.sets().map((x) => x.setId)).toEqual(['s1/t0']);
  });
});

describe('ActiveSetProcessor: reward windows, late and revised outcomes (docs/rewards.md)', () => {
  // Members have 10 s (setTtlMs); a `ci` outcome may take 100 s, a `judge` one 20 s; other sources 10 s.
  function windows() {
    const h = new ProcessorHarness<ActiveSetStores>(
      new ActiveSetProcessor({
        topics,
        codec,
        setTtlMs: 10_000,
        rewardWindows: { ci: 100_000, judge: 20_000 },
        scanIntervalMs: 0,
        dedupeRetentionMs: 50_000,
        maxLatenessMs: 50_000,
      }),
    );
    const o = (v: ReturnType<typeof output>) => h.record(topics.agentOutputs.name, { type: 'AgentOutput', value: v }, v.episodeId, codec);
    const t = (v: ReturnType<typeof transition>) => h.record(topics.transitions.name, { type: 'Transition', value: v }, v.episodeId, codec);
    const r = (v: ReturnType<typeof outcome>) => h.record(topics.episodeOutcomes.name, { type: 'EpisodeOutcome', value: v }, v.episodeId, codec);
    const sets = () => h.outputs.filter((x) => x.topic === topics.activeSets.name).map((x) => x.value as ActiveSet);
    const invalid = () => h.outputs.filter((x) => x.topic === topics.invalidSets.name).map((x) => x.value as ActiveSet);
    const reasons = () => h.deadLetters.map((d) => d.reasonCode);
    return { h, o, t, r, sets, invalid, reasons };
  }

  it("waits for a source's outcome until the transition's time plus its window, across the default TTL", () => {
    const s = windows();
    s.h.feedAll([s.o(output('w1', 0)), s.t(transition('w1', [0], { rewardSource: 'ci' }))]);
    // Past SRPO_SET_TTL_MS (1000 + 10 s): still waiting, on disk, scheduled at its reward deadline.
    s.h.advanceTo(100_999);
    expect(s.invalid()).toHaveLength(0);
    expect(s.h.stores.episodes.get('w1')?.pending).toEqual(['w1/t0']);
    s.h.feed(s.r(outcome('w1', 1, { eventTimeMs: 100_999, rewardSource: 'ci' })));
    expect(s.sets().map((x) => [x.setId, x.reward, x.rewardSource])).toEqual([['w1/t0', 1, 'OUTCOME']]);
    expect(s.h.deadLetters).toHaveLength(0);
  });

  it('gives a set of an unknown or absent source the default window, and members only SRPO_SET_TTL_MS', () => {
    const s = windows();
    s.h.feedAll([
      s.o(output('w2', 0)),
      s.t(transition('w2', [0], { rewardSource: 'nobody' })),
      s.o(output('w3', 0)),
      s.t(transition('w3', [0])),
      // A ci set still missing a member: the member deadline holds.
      s.o(output('w4', 0)),
      s.t(transition('w4', [0, 1], { rewardSource: 'ci' })),
    ]);
    s.h.advanceTo(10_999);
    expect(s.invalid()).toHaveLength(0);
    s.h.advanceTo(11_000);
    expect(s.invalid().map((x) => [x.setId, x.invalidReason])).toEqual([
      ['w2/t0', ReasonCode.REWARD_MISSING_AT_TTL],
      ['w3/t0', ReasonCode.REWARD_MISSING_AT_TTL],
      ['w4/t0', ReasonCode.MEMBER_MISSING_AT_TTL],
    ]);
  });

  it('dead-letters and counts an outcome that comes after its window, with its bytes; the episode is kept to tell', () => {
    const s = windows();
    s.h.feedAll([s.o(output('w5', 0)), s.t(transition('w5', [0], { rewardSource: 'judge' }))]);
    s.h.advanceTo(21_000);
    expect(s.invalid().map((x) => x.invalidReason)).toEqual([ReasonCode.REWARD_MISSING_AT_TTL]);
    const late = s.r(outcome('w5', 1, { eventTimeMs: 25_000, rewardSource: 'judge' }));
    s.h.feed(late);
    expect(s.reasons()).toEqual([ReasonCode.OUTCOME_AFTER_WINDOW]);
    expect(s.h.deadLetters[0].record.raw).toEqual(late.raw);
    expect(s.h.counters.get('outcomes_late_total{"source":"judge"}')).toBe(1);
    expect(s.sets()).toHaveLength(0);
    // Kept through the end of the window plus the retention window (21 000 + 50 000).
    s.h.advanceTo(71_000);
    expect(s.h.stores.episodes.size).toBe(1);
    s.h.advanceTo(71_001);
    expect(s.h.stores.episodes.size).toBe(0);
  });

  it('uses a higher revision for a set not yet emitted; refuses lower and equal revisions with other content', () => {
    const s = windows();
    s.h.feedAll([
      s.o(output('w6', 0)),
      s.t(transition('w6', [0, 1], { rewardSource: 'human' })),
      s.r(outcome('w6', 0, { revision: 0 })),
      s.r(outcome('w6', 0.5, { revision: 2 })),
      // Copies of an accepted revision are duplicates, whichever revision is current.
      s.r(outcome('w6', 0, { revision: 0 })),
      s.r(outcome('w6', 0.25, { revision: 1 })),
      s.r(outcome('w6', 0.75, { revision: 2 })),
      s.o(output('w6', 1)),
    ]);
    expect(s.sets().map((x) => [x.reward, x.outcomeSource?.offset])).toEqual([[0.5, 3]]);
    expect(s.reasons()).toEqual([ReasonCode.SUPERSEDED_OUTCOME, ReasonCode.CONFLICTING_DUPLICATE]);
    expect(s.h.counters.get('duplicates_total{"type":"EpisodeOutcome"}')).toBe(1);
    expect(s.h.counters.get('outcomes_revised_total{"source":"none"}')).toBe(1);
  });

  it('emits a set again, marked as a correction, when its outcome is revised within the window; later revisions are late', () => {
    const s = windows();
    s.h.feedAll([s.o(output('w7', 0)), s.t(transition('w7', [0], { rewardSource: 'ci' })), s.r(outcome('w7', 0, { rewardSource: 'ci' }))]);
    expect(s.sets().map((x) => [x.reward, x.invalidReason])).toEqual([[0, null]]);
    const revised = s.r(outcome('w7', 1, { revision: 1, eventTimeMs: 50_000, rewardSource: 'ci' }));
    s.h.feed(revised);
    const [, again] = s.sets();
    expect([again.setId, again.status, again.reward, again.success, again.invalidReason, again.correction]).toEqual(['w7/t0', 'COMPLETE', 1, true, null, true]);
    expect(again.outcomeSource).toEqual(revised.source);
    expect(again.members.map((m) => m.outputId)).toEqual(['w7/o0']);
    expect(s.h.counters.get('sets_revised_total{"workflow":"JOINT"}')).toBe(1);
    // The window of the ci set ends at 1000 + 100 s: its outputs are let go, a revision then is late.
    s.h.advanceTo(101_000);
    expect(s.h.stores.episodes.get('w7')?.sourced).toEqual([]);
    s.h.feed(s.r(outcome('w7', 0.5, { revision: 2, eventTimeMs: 101_000, rewardSource: 'ci' })));
    expect(s.reasons()).toEqual([ReasonCode.OUTCOME_AFTER_WINDOW]);
    expect(s.h.counters.get('outcomes_late_total{"source":"ci"}')).toBe(1);
    expect(s.sets()).toHaveLength(2);
  });

  it('does not re-emit sets with an immediate reward', () => {
    const s = windows();
    s.h.feedAll([s.o(output('w8', 0)), s.t(transition('w8', [0], { reward: 0.5 })), s.r(outcome('w8', 0)), s.r(outcome('w8', 1, { revision: 1 }))]);
    expect(s.sets().map((x) => [x.reward, x.rewardSource])).toEqual([[0.5, 'IMMEDIATE']]);
    expect(s.h.deadLetters).toHaveLength(0);
  });
});
