import type { EpisodeOutcome, PolicyUpdate } from '@srpo/events';
import { DemoStats, rateOf, startVersusEnd, targetHeld, wilson, workflowOf } from './demo-stats';
import { bar, clock, fit, renderLive, renderLogLine, renderSummary } from './progress-view';

function outcome(workflow: string, success: boolean, eventTimeMs: number): EpisodeOutcome {
  return {
    episodeId: `e${eventTimeMs}`,
    taskId: `${workflow}:x`,
    outcomeReward: success ? 1 : 0,
    success,
    verifier: `srpo-agents/${workflow}@1`,
    verifierDetails: { workflow },
    observationDigests: [],
    turns: 1,
    eventTimeMs,
    rewardSource: '',
    revision: 0,
    subjectId: null,
  };
}

function update(policyId: string, versionAfter: number, clipLow: number, clipHigh: number): PolicyUpdate {
  return {
    updateId: `${policyId}.v${versionAfter}`,
    policyId,
    versionBefore: versionAfter - 1,
    versionAfter,
    weightsHashBefore: 'a',
    weightsHashAfter: 'b',
    groupIds: ['g1', 'g2'],
    groupSources: [],
    objective: 'srpo',
    loss: 0.5,
    gradNorm: 1.5,
    diagnostics: { 'losses/clip_frac_low': clipLow, 'losses/clip_frac_high': clipHigh },
    checkpointUri: 'file:///x',
    backend: 'tensorflow',
    eventTimeMs: 0,
  };
}

describe('demo statistics', () => {
  it('start = first episodes by event time, end = the last window; clearly up only when the intervals separate', () => {
    const s = new DemoStats();
    // 100 early failures (one success), 100 late successes (ten failures), out of arrival order.
    for (let i = 99; i >= 0; i--) s.onOutcome(outcome('fixed', i === 50, 1000 + i));
    for (let i = 0; i < 100; i++) s.onOutcome(outcome('fixed', i >= 10, 100_000 + i));
    // A workflow that did not move.
    for (let i = 0; i < 200; i++) s.onOutcome(outcome('joint', i % 10 === 0, 1000 + i * 500));
    const rows = startVersusEnd(s, { startEpisodes: 100, endWindowMs: 1000, endAtMs: 100_200 });
    const fixed = rows.find((r) => r.workflow === 'fixed');
    expect(fixed?.start).toEqual({ successes: 1, episodes: 100, rate: 0.01 });
    expect(fixed?.end).toEqual({ successes: 90, episodes: 100, rate: 0.9 });
    expect(fixed?.clearlyUp).toBe(true);
    expect(rows.find((r) => r.workflow === 'joint')?.clearlyUp).toBe(false);
  });

  it('Wilson intervals: hand-worked 95 % interval for 1/100 and the degenerate ends', () => {
    const [lo, hi] = wilson({ successes: 1, episodes: 100, rate: 0.01 });
    expect(lo).toBeCloseTo(0.00177, 4);
    expect(hi).toBeCloseTo(0.0545, 3);
    expect(wilson({ successes: 0, episodes: 10, rate: 0 })[0]).toBe(0);
    expect(wilson(rateOf([]))[0]).toBeNaN();
  });

  it('folds updates into per-policy progress with the clip fraction of both sides', () => {
    const s = new DemoStats();
    s.onUpdate(update('actor', 1, 0.1, 0.05));
    s.onUpdate(update('actor', 2, 0, 0.05));
    const p = s.policy('actor');
    expect(p.updates).toBe(2);
    expect(p.version).toBe(2);
    expect(p.clipFrac).toBeCloseTo(0.05, 12);
    expect(p.clipFracMean).toBeCloseTo(0.1, 12);
    expect(p.groups).toBe(4);
  });

  it('counts outputs stamped with learned versions and the newest version stamped', () => {
    const s = new DemoStats();
    const base = {
      outputId: 'o',
      episodeId: 'e',
      step: 0,
      agentId: 'a',
      role: 'solver',
      policyId: 'actor',
      contextRef: 'c',
      contextTokenIds: [],
      responseTokenIds: [1],
      behaviourLogProbs: [-1],
      lossMask: [true],
      sampling: { temperature: 1, topK: 0, maxNewTokens: 1, seed: null, stopTokenIds: [] },
      startedAtMs: 0,
      eventTimeMs: 0,
      tokenIdOrigin: 'sampled' as const,
      turn: 0,
      parentOutputId: null,
      tokenDrift: null,
      malformedToolCall: false,
      subjectId: null,
      sealed: null,
    };
    s.onOutput({ ...base, policyVersion: 0 });
    s.onOutput({ ...base, policyVersion: 7 });
    expect([s.outputs, s.outputsNewVersion, s.policy('actor').stampedVersion]).toEqual([2, 1, 7]);
  });

  it('takes the workflow from the verifier details, else from the task id', () => {
    expect(workflowOf({ verifierDetails: { workflow: 'joint' }, taskId: 'x:1' })).toBe('joint');
    expect(workflowOf({ verifierDetails: {}, taskId: 'routed:1,_' })).toBe('routed');
  });
});

describe('progress view', () => {
  it('draws bars clamped to [0, 1]', () => {
    expect(bar(0.5, 10)).toBe('[█████░░░░░]');
    expect(bar(2, 4)).toBe('[████]');
    expect(bar(Number.NaN, 4)).toBe('[░░░░]');
    expect(clock(125_000)).toBe('2:05');
  });

  it('cuts panel lines to the terminal width, counting visible characters only', () => {
    const coloured = '\x1b[1mSRPO\x1b[0m demo';
    expect(fit(coloured, 80)).toBe(coloured);
    expect(fit('x'.repeat(100), 40)).toBe(`${'x'.repeat(38)}…`);
    expect(fit('x'.repeat(100), undefined)).toHaveLength(100);
  });

  it('renders the live panel, the log line and the summary with every workflow and policy', () => {
    const s = new DemoStats();
    s.onOutcome(outcome('fixed', true, 1));
    s.onUpdate(update('actor', 1, 0, 0.5));
    const view = {
      runId: 'r',
      prefix: 'p.',
      elapsedMs: 30_000,
      totalMs: 60_000,
      workflows: ['fixed', 'joint'],
      policies: ['actor'],
      recentEpisodes: 10,
      startRates: {},
      auditUrls: ['http://127.0.0.1:3000/updates?policy=actor'],
    };
    const live = renderLive(s, view, false).join('\n');
    expect(live).toMatch(/episodes\s+1 /);
    expect(live).toMatch(/fixed 100%/);
    expect(live).toMatch(/actor v1 clip 50\.0%/);
    expect(renderLogLine(s, view)).toMatch(/^\[demo 0:30\/1:00\] episodes=1 .*fixed=100% joint=— .*actor:v1\/clip=50\.0%/);
    const rows = startVersusEnd(s, { startEpisodes: 1, endWindowMs: 10, endAtMs: 5 });
    const summary = renderSummary(
      s,
      { runId: 'r', runDir: '/d', trainedMs: 60_000, startEpisodes: 1, endWindowMs: 10, rows, policies: ['actor'], auditUrls: view.auditUrls, serving: false },
      false,
    ).join('\n');
    expect(summary).toMatch(/\| fixed +\| 100\.0% \(1\/1/);
    expect(summary).toMatch(/http:\/\/127\.0\.0\.1:3000\/updates\?policy=actor/);
  });
});

describe('targetHeld: the early end of the demo', () => {
  const T0 = 1_000_000;
  /** `n` episodes spread evenly over [from, to), the first `ok` of them successes. */
  function fill(stats: DemoStats, workflow: string, from: number, to: number, n: number, ok: number): void {
    const list = stats.outcomes.get(workflow) ?? [];
    for (let i = 0; i < n; i++) list.push({ eventTimeMs: from + ((to - from) * i) / n, success: i < ok });
    stats.outcomes.set(workflow, list);
  }

  it('holds only when every workflow clears the target with its whole 95 % interval over the window', () => {
    const stats = new DemoStats();
    // Old failures before the window do not count against it.
    fill(stats, 'fixed', T0 - 120_000, T0 - 60_000, 1000, 0);
    fill(stats, 'fixed', T0 - 60_000, T0, 1000, 950);
    fill(stats, 'joint', T0 - 60_000, T0, 1000, 950);
    const opts = { target: 0.9, windowMs: 60_000, nowMs: T0, minEpisodes: 500 };
    // 950/1000: Wilson 95 % lower bound = 0.9346 (by hand: p=.95, n=1000, z=1.96).
    const both = targetHeld(stats, ['fixed', 'joint'], opts);
    expect(both.held).toBe(true);
    expect(both.workflows.map((w) => [w.workflow, w.rate.episodes, w.rate.successes])).toEqual([
      ['fixed', 1000, 950],
      ['joint', 1000, 950],
    ]);
    // A third workflow with no episode at all keeps the run going.
    expect(targetHeld(stats, ['fixed', 'joint', 'routed'], opts).held).toBe(false);
  });

  it('a rate just above the target whose interval reaches below it does not count, nor too few episodes', () => {
    const stats = new DemoStats();
    // 905/1000 = 90.5 %, but the Wilson lower bound is 0.8856 < 0.9.
    fill(stats, 'fixed', T0 - 60_000, T0, 1000, 905);
    expect(targetHeld(stats, ['fixed'], { target: 0.9, windowMs: 60_000, nowMs: T0, minEpisodes: 500 }).held).toBe(false);
    // 100/100 has lower bound 0.963 but only 100 episodes.
    const few = new DemoStats();
    fill(few, 'fixed', T0 - 60_000, T0, 100, 100);
    expect(targetHeld(few, ['fixed'], { target: 0.9, windowMs: 60_000, nowMs: T0, minEpisodes: 500 }).held).toBe(false);
    expect(targetHeld(few, ['fixed'], { target: 0.9, windowMs: 60_000, nowMs: T0, minEpisodes: 100 }).held).toBe(true);
  });
});
