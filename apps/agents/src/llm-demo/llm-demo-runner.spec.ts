import type { EpisodeOutcomeInit, TransitionInit } from '@srpo/events';
import {
  DEFAULT_WORD_PROBLEM_PLAY,
  heldOutWordProblems,
  TrainingWordProblems,
  WORD_PROBLEM_VARIANTS,
  wilsonInterval,
  type ChatMessage,
  type ChatReply,
  type ChatRequest,
  type TextAgentClient,
} from '@srpo/workflows';
import { LlmDemoRunner, nextEvaluationAt, stopDecision, verdictOf, type Clock, type LlmDemoEvent, type LlmDemoRunOptions } from './llm-demo-runner';
import type { GreedyReply } from './text-agent-client';

const HELD_OUT = 40;
const settings = WORD_PROBLEM_VARIANTS['add-10'];
const heldOut = heldOutWordProblems(settings, HELD_OUT);
const training = new TrainingWordProblems(settings, new Set(heldOut.map((p) => p.text)));
/** Every problem's answer by its text: the fakes answer from the prompt's last turn. */
const answers = new Map<string, number>([...heldOut, ...Array.from({ length: 2000 }, (_, i) => training.at(i))].map((p) => [p.text, p.answer]));
const answerOf = (messages: ChatMessage[]) => answers.get(messages[messages.length - 1].content) ?? -1;

/** Time moves only when something waits: a chat takes 100 ms, a greedy reply 10 ms, a pause its length. */
class FakeClock implements Clock {
  t = 1_000_000;
  now(): number {
    return this.t;
  }
  sleep(ms: number): Promise<void> {
    this.t += ms;
    return Promise.resolve();
  }
}

/**
 * A fake topology: the served version rises by one every `tasksPerVersion` problems; greedy
 * replies are right for the first `rightAtStart` of every 4 problems at version 0, and for all of
 * them from `learnedAt` on (never when undefined).
 */
class FakeTopology implements TextAgentClient {
  readonly calls: ('chat' | 'greedy')[] = [];
  problems = 0;
  failChat = false;
  constructor(
    private readonly clock: FakeClock,
    private readonly o: { tasksPerVersion: number; learnedAt?: number; rightAtStart: number; msPerVersion?: number },
  ) {
    this.t0 = clock.t;
  }
  private readonly t0: number;
  /** From the problems completed; with `msPerVersion`, a learner no faster than that. */
  version(): number {
    const byProblems = Math.floor(this.problems / this.o.tasksPerVersion);
    return this.o.msPerVersion === undefined ? byProblems : Math.min(byProblems, Math.floor((this.clock.t - this.t0) / this.o.msPerVersion));
  }
  servedVersion = (): Promise<number> => Promise.resolve(this.version());
  chat(r: ChatRequest): Promise<ChatReply> {
    this.calls.push('chat');
    this.clock.t += 100;
    if (this.failChat) return Promise.reject(new Error('502 from the gateway'));
    const right = r.episodeId.endsWith('.r0') || r.episodeId.endsWith('.r1');
    return Promise.resolve({ text: `Answer: ${right ? answerOf(r.messages) : -7}`, outputIds: [`${r.episodeId}.o`], policyVersion: this.version() });
  }
  recordTransition(_t: TransitionInit): Promise<void> {
    return Promise.resolve();
  }
  recordOutcome(o: EpisodeOutcomeInit): Promise<void> {
    // The last episode of a group closes it: count problems by their r7 outcome.
    if (o.episodeId.endsWith('.r7')) this.problems++;
    return Promise.resolve();
  }
  private seen = 0;
  greedy = (messages: ChatMessage[]): Promise<GreedyReply> => {
    this.calls.push('greedy');
    this.clock.t += 10;
    const v = this.version();
    const right = (this.o.learnedAt !== undefined && v >= this.o.learnedAt) || this.seen++ % 4 < this.o.rightAtStart;
    return Promise.resolve({ text: `Answer: ${right ? answerOf(messages) : -7}`, version: v });
  };
}

function options(over: Partial<LlmDemoRunOptions> = {}): LlmDemoRunOptions {
  return {
    variant: 'add-10',
    heldOut: HELD_OUT,
    play: { ...DEFAULT_WORD_PROBLEM_PLAY, runId: 'spec', groupSize: 8, verifier: false },
    concurrency: 2,
    evalEveryMs: 30_000,
    limitMs: 300_000,
    until: 'gain',
    evalConcurrency: 4,
    maxConsecutiveFailures: 3,
    ...over,
  };
}

function setup(over: Partial<LlmDemoRunOptions>, topo: { tasksPerVersion: number; learnedAt?: number; rightAtStart: number; msPerVersion?: number }) {
  const clock = new FakeClock();
  const fake = new FakeTopology(clock, topo);
  const events: LlmDemoEvent[] = [];
  const runner = new LlmDemoRunner(options(over), { client: fake, greedy: fake.greedy, clock, emit: (e) => events.push(e), servedVersion: fake.servedVersion });
  return { clock, fake, events, runner };
}

describe('stopDecision (the stop rule)', () => {
  const start = wilsonInterval(100, 200); // [43.1, 56.9] %
  const overlapping = wilsonInterval(112, 200); // [49.1, 62.7] %
  const above = wilsonInterval(150, 200); // [68.6, 80.6] %

  it("ends a gain run at the first evaluation whose interval lies wholly above the start's", () => {
    expect(stopDecision({ until: 'gain', start, latest: above, elapsedMs: 10, limitMs: 100 })).toBe('gain');
    expect(stopDecision({ until: 'gain', start, latest: overlapping, elapsedMs: 10, limitMs: 100 })).toBeUndefined();
    expect(stopDecision({ until: 'gain', start, latest: undefined, elapsedMs: 10, limitMs: 100 })).toBeUndefined();
  });

  it('ignores the gain with --until time, and ends every run at the limit', () => {
    expect(stopDecision({ until: 'time', start, latest: above, elapsedMs: 10, limitMs: 100 })).toBeUndefined();
    expect(stopDecision({ until: 'time', start, latest: above, elapsedMs: 100, limitMs: 100 })).toBe('time');
    expect(stopDecision({ until: 'gain', start, latest: overlapping, elapsedMs: 101, limitMs: 100 })).toBe('time');
  });

  it('a gain wins over the limit reached at the same evaluation', () => {
    expect(stopDecision({ until: 'gain', start, latest: above, elapsedMs: 100, limitMs: 100 })).toBe('gain');
  });

  it('verdict: clear gain only when the last interval lies above the first', () => {
    expect(verdictOf([start, overlapping, above])).toBe('clear gain');
    expect(verdictOf([start, above, overlapping])).toBe('no clear gain yet');
    expect(verdictOf([start])).toBe('no clear gain yet');
    expect(verdictOf([])).toBe('no clear gain yet');
  });

  it('the next evaluation is due at the next multiple of the interval (a slow one skips slots)', () => {
    expect(nextEvaluationAt(0, 240_000)).toBe(240_000);
    expect(nextEvaluationAt(250_000, 240_000)).toBe(480_000);
    expect(nextEvaluationAt(500_000, 240_000)).toBe(720_000);
  });
});

describe('LlmDemoRunner (fake topology and clock)', () => {
  it('evaluates at version 0 before any play, then plays and ends at the first clear gain, with no final evaluation', async () => {
    const { fake, events, runner } = setup({ until: 'gain' }, { tasksPerVersion: 4, learnedAt: 3, rightAtStart: 2 });
    const outcome = await runner.run();

    expect(fake.calls.slice(0, HELD_OUT)).toEqual(Array(HELD_OUT).fill('greedy'));
    expect(fake.calls.indexOf('chat')).toBe(HELD_OUT);
    expect(outcome.endedBy).toBe('gain');
    expect(outcome.verdict).toBe('clear gain');
    const [start, ...later] = outcome.evaluations;
    expect(start).toMatchObject({ label: 'start', atMs: 0, versions: [0], successes: HELD_OUT / 2, trials: HELD_OUT });
    expect(later.length).toBeGreaterThanOrEqual(1);
    expect(later.every((e) => e.label === 'periodic')).toBe(true);
    expect(later[later.length - 1].successes).toBe(HELD_OUT);
    // Due every 30 s of training.
    expect(later.map((e) => e.atMs).every((t, i) => t >= 30_000 * (i + 1))).toBe(true);
    expect(outcome.tasks.length).toBeGreaterThan(0);
    expect(outcome.episodes).toBe(8 * outcome.tasks.length);
    expect(outcome.tasks.every((t) => t.solved === 2 && t.reward === 0.25 && !t.degenerate)).toBe(true);
    expect(events[0]).toEqual({ kind: 'evaluation-started', label: 'start', atMs: 0, trials: HELD_OUT });
    expect(events.filter((e) => e.kind === 'training-started')).toHaveLength(1);
  });

  it('with --until time it trains to the limit despite the gain, then evaluates once more (final)', async () => {
    const { events, runner } = setup({ until: 'time', limitMs: 120_000 }, { tasksPerVersion: 4, learnedAt: 3, rightAtStart: 2 });
    const outcome = await runner.run();
    expect(outcome.endedBy).toBe('time');
    const labels = outcome.evaluations.map((e) => e.label);
    expect(labels[0]).toBe('start');
    expect(labels[labels.length - 1]).toBe('final');
    expect(labels.filter((l) => l === 'periodic').length).toBeGreaterThanOrEqual(3);
    const times = outcome.evaluations.map((e) => e.atMs);
    expect([...times].sort((a, b) => a - b)).toEqual(times);
    expect(outcome.evaluations[outcome.evaluations.length - 1].atMs).toBe(120_000);
    expect(outcome.trainingMs).toBe(120_000);
    expect(outcome.verdict).toBe('clear gain');
    expect(events.filter((e) => e.kind === 'evaluated')).toHaveLength(outcome.evaluations.length);
  });

  it('without a gain, a gain run also ends at the limit with a final evaluation and no clear gain', async () => {
    const { runner } = setup({ until: 'gain', limitMs: 90_000 }, { tasksPerVersion: 4, rightAtStart: 2 });
    const outcome = await runner.run();
    expect(outcome.endedBy).toBe('time');
    expect(outcome.evaluations[outcome.evaluations.length - 1].label).toBe('final');
    expect(outcome.verdict).toBe('no clear gain yet');
  });

  it('a stop request ends training without the final evaluation', async () => {
    const { runner, events } = setup({ until: 'time', limitMs: 600_000 }, { tasksPerVersion: 4, rightAtStart: 2 });
    let stopped = false;
    const done = runner.run();
    // Stop once a few problems were played.
    const origEmit = events.push.bind(events);
    events.push = (...items: LlmDemoEvent[]) => {
      if (!stopped && events.filter((e) => e.kind === 'task').length >= 5) {
        stopped = true;
        runner.requestStop();
      }
      return origEmit(...items);
    };
    const outcome = await done;
    expect(stopped).toBe(true);
    expect(outcome.endedBy).toBe('request');
    expect(outcome.evaluations.map((e) => e.label)).not.toContain('final');
    expect(outcome.trainingMs).toBeLessThan(600_000);
  });

  it('fails after the configured number of problems failed in a row', async () => {
    const { fake, runner, events } = setup({ concurrency: 1 }, { tasksPerVersion: 4, rightAtStart: 2 });
    fake.failChat = true;
    const outcome = await runner.run();
    expect(outcome.endedBy).toBe('failure');
    expect(outcome.failure).toMatch(/^playing failed 3 times in a row; the last error: 502 from the gateway$/);
    expect(events.filter((e) => e.kind === 'play-error').map((e) => (e as { consecutive: number }).consecutive)).toEqual([1, 2, 3]);
    expect(outcome.verdict).toBe('no clear gain yet');
  });

  it('a failure from outside (the topology died) ends the run as a failure', async () => {
    const { runner, events } = setup({ until: 'time' }, { tasksPerVersion: 4, rightAtStart: 2 });
    const done = runner.run();
    const origEmit = events.push.bind(events);
    events.push = (...items: LlmDemoEvent[]) => {
      if (items[0]?.kind === 'training-started') runner.fail('srpo up exited unexpectedly');
      return origEmit(...items);
    };
    const outcome = await done;
    expect(outcome).toMatchObject({ endedBy: 'failure', failure: 'srpo up exited unexpectedly' });
    expect(outcome.evaluations.map((e) => e.label)).toEqual(['start']);
  });

  describe('pacing (VersionPacer)', () => {
    /** Problems sampled by a version more than one update behind the update that trains on them (2 problems per update). */
    const stale = (tasks: readonly { task: number; versions: number[] }[]) => tasks.filter((t) => Math.min(...t.versions) < Math.floor(t.task / 2) - 1);
    const slowLearner = { tasksPerVersion: 2, rightAtStart: 2, msPerVersion: 20_000 };

    it('starts each problem at most maxAhead updates ahead of the served version', async () => {
      const pacing = { tasksPerUpdate: 2, maxAhead: 1, timeoutMs: 180_000, pollMs: 500 };
      const { runner, events } = setup({ until: 'time', limitMs: 200_000, pacing }, slowLearner);
      const outcome = await runner.run();
      expect(outcome.tasks.length).toBeGreaterThanOrEqual(10);
      expect(stale(outcome.tasks)).toEqual([]);
      expect(events.some((e) => e.kind === 'pace-timeout')).toBe(false);
    });

    it('unpaced, the same slow learner leaves most problems sampled by old versions', async () => {
      const { runner } = setup({ until: 'time', limitMs: 200_000 }, slowLearner);
      const outcome = await runner.run();
      expect(stale(outcome.tasks).length).toBeGreaterThan(outcome.tasks.length / 2);
    });

    it('a learner that never publishes: the wait times out and the run goes on, said once per problem', async () => {
      const pacing = { tasksPerUpdate: 2, maxAhead: 0, timeoutMs: 5_000, pollMs: 500 };
      const { runner, events } = setup({ until: 'time', limitMs: 60_000, concurrency: 1, pacing }, { ...slowLearner, msPerVersion: 1e12 });
      const outcome = await runner.run();
      expect(outcome.endedBy).toBe('time');
      expect(outcome.tasks.length).toBeGreaterThan(3);
      const timeouts = events.filter((e) => e.kind === 'pace-timeout');
      expect(timeouts.length).toBeGreaterThanOrEqual(1);
      expect(timeouts[0]).toMatchObject({ kind: 'pace-timeout', required: 1, served: 0 });
    });
  });
});
