import { ActiveSet, EventCodec, ReasonCode, topicCatalog } from '@srpo/events';
import { ProcessorHarness } from '@srpo/streams';
import { outcome, output, transition } from '@srpo/testing';
import { ActiveSetProcessor, ActiveSetProcessorOptions, ActiveSetStores } from './active-set.processor';

const topics = topicCatalog({ prefix: 'et.' });
const codec = new EventCodec();
/** The broker's clock when the records below were appended. */
const B = 1_700_000_000_000;
const MINUTE = 60_000;

/**
 * The live defaults (60 s sets, 10 min lateness, 10 s broker skew): event time is checked
 * against each record's Kafka timestamp (never ahead of the record timestamp's clock on the raw topics),
 * which the harness sets per record.
 */
function setup(options: Partial<ActiveSetProcessorOptions> = {}) {
  const h = new ProcessorHarness<ActiveSetStores>(new ActiveSetProcessor({ topics, codec, ...options }));
  const at = (timestampMs: number) => ({ timestampMs });
  const o = (v: ReturnType<typeof output>, brokerMs = v.eventTimeMs) =>
    h.record(topics.agentOutputs.name, { type: 'AgentOutput', value: v }, v.episodeId, codec, at(brokerMs));
  const t = (v: ReturnType<typeof transition>, brokerMs = v.eventTimeMs) =>
    h.record(topics.transitions.name, { type: 'Transition', value: v }, v.episodeId, codec, at(brokerMs));
  const r = (v: ReturnType<typeof outcome>, brokerMs = v.eventTimeMs) =>
    h.record(topics.episodeOutcomes.name, { type: 'EpisodeOutcome', value: v }, v.episodeId, codec, at(brokerMs));
  const sets = () => h.outputs.filter((x) => x.topic === topics.activeSets.name).map((x) => (x.value as ActiveSet).setId);
  const invalid = () => h.outputs.filter((x) => x.topic === topics.invalidSets.name).map((x) => (x.value as ActiveSet).setId);
  const skewed = () => h.deadLetters.filter((d) => d.reasonCode === (ReasonCode.CLOCK_SKEW as string)).map((d) => d.details.field);
  return { h, o, t, r, sets, invalid, skewed };
}

/** An honest episode whose set waits for its second member: it has `setTtlMs` of stream time to get it. */
function openSet(s: ReturnType<typeof setup>, id: string, time: number): void {
  s.h.feedAll([s.o(output(id, 0, { eventTimeMs: time, startedAtMs: time })), s.t(transition(id, [0, 1], { eventTimeMs: time, reward: 1 }))]);
}

describe('ActiveSetProcessor event time against the record timestamp (bounded by the broker clock)', () => {
  it('dead-letters an event 50 min ahead of its record timestamp and closes no open set', () => {
    const s = setup();
    openSet(s, 'a', B);
    openSet(s, 'b', B + 1000);
    // The producer stamps its event 50 min ahead; the broker appended it at B + 2 s.
    s.h.feed(s.o(output('x', 0, { eventTimeMs: B + 50 * MINUTE, startedAtMs: B }), B + 2000));
    expect(s.skewed()).toEqual(['AgentOutput.eventTimeMs']);
    expect(s.h.deadLetters[0].reason).toContain('ahead of its record timestamp');
    expect(s.h.streamTimeMs).toBe(B + 1000);
    expect(s.invalid()).toEqual([]);
    expect(s.h.counters.get('clock_skew_total{"type":"AgentOutput","bound":"broker"}')).toBe(1);
    // The open sets still complete with their honest members.
    s.h.feedAll([s.o(output('a', 1, { eventTimeMs: B + 3000, startedAtMs: B })), s.o(output('b', 1, { eventTimeMs: B + 3000, startedAtMs: B }))]);
    expect(s.sets()).toEqual(['a/t0', 'b/t0']);
  });

  it('does not let repeated events ahead of the record timestamp move stream time, for any event type', () => {
    const s = setup();
    openSet(s, 'a', B);
    for (let i = 1; i <= 5; i++) {
      const ahead = B + i * 50 * MINUTE;
      s.h.feed(s.t(transition(`x${i}`, [0], { eventTimeMs: ahead }), B + i));
      s.h.feed(s.r(outcome(`y${i}`, 1, { eventTimeMs: ahead }), B + i));
    }
    expect(s.h.streamTimeMs).toBe(B);
    expect(s.skewed()).toHaveLength(10);
    expect(s.h.counters.get('clock_skew_total{"type":"Transition","bound":"broker"}')).toBe(5);
    expect(s.h.counters.get('clock_skew_total{"type":"EpisodeOutcome","bound":"broker"}')).toBe(5);
    expect(s.invalid()).toEqual([]);
  });

  it('checks the first event of a fresh task too: a day-ahead event is refused and honest events after it are processed', () => {
    const s = setup();
    s.h.feed(s.o(output('x', 0, { eventTimeMs: B + 24 * 60 * MINUTE, startedAtMs: B }), B));
    expect(s.skewed()).toEqual(['AgentOutput.eventTimeMs']);
    expect(s.h.streamTimeMs).toBe(0);
    s.h.feedAll([
      s.o(output('a', 0, { eventTimeMs: B + 10, startedAtMs: B })),
      s.t(transition('a', [0], { eventTimeMs: B + 20 })),
      s.r(outcome('a', 1, { eventTimeMs: B + 30 })),
    ]);
    expect(s.sets()).toEqual(['a/t0']);
    expect(s.h.deadLetters).toHaveLength(1);
  });

  it('accepts an event up to the allowance ahead of its record timestamp, so stream time runs at most that far ahead of the record timestamp', () => {
    const s = setup({ maxBrokerSkewMs: 5_000 });
    s.h.feed(s.o(output('a', 0, { eventTimeMs: B + 5_000, startedAtMs: B }), B));
    expect(s.h.deadLetters).toEqual([]);
    expect(s.h.streamTimeMs).toBe(B + 5_000);
    s.h.feed(s.o(output('a', 1, { eventTimeMs: B + 5_001, startedAtMs: B }), B));
    expect(s.skewed()).toEqual(['AgentOutput.eventTimeMs']);
    expect(s.h.streamTimeMs).toBe(B + 5_000);
  });

  it('defaults the allowance to 10 s, well inside the 60 s a set has to complete', () => {
    const s = setup();
    s.h.feed(s.o(output('a', 0, { eventTimeMs: B + 10_000, startedAtMs: B }), B));
    s.h.feed(s.o(output('a', 1, { eventTimeMs: B + 10_001, startedAtMs: B }), B));
    expect(s.skewed()).toEqual(['AgentOutput.eventTimeMs']);
  });

  it('takes the next honest events after hours of silence (no allowance ahead of stream time: the record timestamp is the clock)', () => {
    const s = setup();
    openSet(s, 'a', B);
    s.h.feed(s.o(output('a', 1, { eventTimeMs: B + 1000, startedAtMs: B })));
    expect(s.sets()).toEqual(['a/t0']);
    // Two hours without an event, then an honest episode: once an allowance of 1 h ahead of stream
    // time refused it, and every event after it, for good.
    const later = B + 2 * 60 * MINUTE;
    openSet(s, 'b', later);
    s.h.feed(s.o(output('b', 1, { eventTimeMs: later + 1000, startedAtMs: later })));
    expect(s.skewed()).toEqual([]);
    expect(s.sets()).toEqual(['a/t0', 'b/t0']);
    expect(s.h.streamTimeMs).toBe(later + 1000);
  });

  it('a fresh task whose first event is 30 days old takes the honest events after it', () => {
    const s = setup();
    const old = B - 30 * 24 * 60 * MINUTE;
    s.h.feed(s.o(output('old', 0, { eventTimeMs: old, startedAtMs: old }), B));
    openSet(s, 'c', B);
    s.h.feed(s.o(output('c', 1, { eventTimeMs: B + 1000, startedAtMs: B })));
    expect(s.skewed()).toEqual([]);
    expect(s.sets()).toEqual(['c/t0']);
  });

  it('dead-letters an event whose record carries no timestamp (Kafka reports -1)', () => {
    const s = setup();
    s.h.feed(s.o(output('a', 0, { eventTimeMs: B, startedAtMs: B }), -1));
    expect(s.skewed()).toEqual(['AgentOutput.eventTimeMs']);
    expect(s.h.deadLetters[0].reason).toContain('no timestamp');
    expect(s.h.streamTimeMs).toBe(0);
  });
});
