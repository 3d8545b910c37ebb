import { wilsonInterval } from '@srpo/workflows';
import type { EvaluationRecord, LlmDemoOutcome, TaskRecord } from './llm-demo-runner';
import {
  intervalBar,
  recentReward,
  renderLlmEventLine,
  renderLlmPanel,
  renderLlmSummary,
  servedVersion,
  versionsLabel,
  type LlmPanelState,
} from './llm-progress-view';

// eslint-disable-next-line no-control-regex -- ANSI escape sequences start with the ESC control character
const ANSI = /\x1b\[/;

function evaluation(label: EvaluationRecord['label'], atMs: number, successes: number, versions: number[]): EvaluationRecord {
  return { label, startedAtMs: 0, atMs, durationMs: 5000, versions, ...wilsonInterval(successes, 200) };
}

function task(i: number, solved: number, versions: number[]): TaskRecord {
  return { task: i, seed: 1000 + i, atMs: i * 1000, groupSize: 8, solved, reward: solved / 8, degenerate: solved === 0 || solved === 8, versions };
}

const start = evaluation('start', 0, 123, [0]); // 61.5 % [54.6, 68.0]
const middle = evaluation('periodic', 240_000, 135, [3, 4]); // 67.5 %: overlaps
const gain = evaluation('periodic', 480_000, 180, [7]); // 90.0 %: above

function state(over: Partial<LlmPanelState> = {}): LlmPanelState {
  return {
    runId: 'r1',
    policy: 'smollm2-demo',
    lora: true,
    variant: 'add-10',
    verifier: false,
    until: 'gain',
    limitMs: 1_800_000,
    evalEveryMs: 240_000,
    trainingMs: 492_000,
    phase: 'training',
    updates: 7,
    // 30 problems: the first 10 all wrong, the last 20 six of eight right.
    tasks: Array.from({ length: 30 }, (_, i) => task(i, i < 10 ? 0 : 6, [i < 10 ? 2 : 8])),
    evaluations: [start, middle, gain],
    recentProblems: 20,
    ...over,
  };
}

describe('LLM demo panel pieces', () => {
  it('the training reward is the mean over the last n problems; the served version the newest any reply named', () => {
    const s = state();
    expect(recentReward(s.tasks, 20)).toBe(0.75);
    expect(recentReward(s.tasks, 30)).toBe(0.5);
    expect(recentReward([], 20)).toBeUndefined();
    expect(servedVersion(s.tasks, s.evaluations)).toBe(8);
    expect(servedVersion([], [start])).toBe(0);
    expect(servedVersion([], [])).toBeUndefined();
  });

  it('versions and interval bars', () => {
    expect(versionsLabel([0])).toBe('v0');
    expect(versionsLabel([3, 4, 5])).toBe('v3–v5');
    expect(versionsLabel([])).toBe('—');
    expect(intervalBar(0.5, 0.75, 8)).toBe('[████▒▒░░]');
    expect(intervalBar(0, 1, 4)).toBe('[▒▒▒▒]');
    expect(intervalBar(Number.NaN, 2, 4)).toBe('[▒▒▒▒]');
  });
});

describe('renderLlmPanel', () => {
  it('shows time against the limit, served version, updates, play, and one row per evaluation with the start marked and the gain flagged', () => {
    const lines = renderLlmPanel(state(), false);
    expect(lines[0]).toMatch(/^SRPO LLM demo 8:12 \/ 30:00 \[█████░+\] {2}training {2}run r1$/);
    expect(lines[1]).toBe(" policy   smollm2-demo (LoRA), add-10 word problems, solver only; until the held-out interval lies above the start's");
    expect(lines).toContain(' served   v8   learner updates 7');
    expect(lines.some((l) => l.startsWith(' played   240 episodes, 30 problems; training reward (last 20 problems) 0.75 ['))).toBe(true);
    const rows = lines.filter((l) => /^ {3}\S*\s+\d+:\d\d {2}v/.test(l));
    expect(rows).toHaveLength(3);
    expect(rows[0]).toMatch(/^ {3}start +0:00 {2}v0 +61\.5% \[54\.6, 68\.0\] +\[█+▒+░+\] 123\/200$/);
    expect(rows[1]).toMatch(/^ {9} +4:00 {2}v3–v4 +67\.5% \[.*\] 135\/200$/);
    expect(rows[2]).toMatch(/^ {9} +8:00 {2}v7 +90\.0% \[.*\] 180\/200 ▲$/);
    expect(lines.join('\n')).not.toMatch(ANSI);
  });

  it('shows an evaluation in progress, and colours only on a TTY', () => {
    const lines = renderLlmPanel(
      state({ evaluations: [], tasks: [], evaluating: { label: 'start', done: 57, trials: 200 }, phase: 'start evaluation', updates: undefined }),
      true,
    );
    expect(lines.join('\n')).toMatch(ANSI);
    expect(lines.join('\n')).toContain('evaluating… 57/200');
    expect(lines.join('\n')).toContain('learner updates —');
    expect(lines.join('\n')).toContain('training reward (last 0 problems) —');
  });

  it('with pacing, says how far ahead problems may start and which version the next one waits for', () => {
    expect(renderLlmPanel(state({ maxAhead: 1 }), false)[2]).toBe(' served   v8   learner updates 7   paced: 1 update ahead at most');
    expect(renderLlmPanel(state({ maxAhead: 1, waitingFor: 9 }), false)[2]).toBe(
      ' served   v8   learner updates 7   paced: 1 update ahead at most; waiting for v9',
    );
    // A version already served is no wait.
    expect(renderLlmPanel(state({ maxAhead: 2, waitingFor: 8 }), false)[2]).toBe(' served   v8   learner updates 7   paced: 2 updates ahead at most');
  });
});

describe('renderLlmEventLine (no TTY: a line per event)', () => {
  it('one line per problem, evaluation and update; none for evaluation progress', () => {
    const s = state();
    expect(renderLlmEventLine({ kind: 'evaluation-progress', label: 'start', done: 3, trials: 200 }, s)).toBeUndefined();
    expect(renderLlmEventLine({ kind: 'task', task: s.tasks[29] }, s)).toBe(
      '[llm-demo 8:12/30:00] problem 29: 6/8 solved by v8; episodes 240; reward last 20 0.75',
    );
    expect(renderLlmEventLine({ kind: 'evaluated', evaluation: gain, start }, s)).toBe(
      '[llm-demo 8:12/30:00] held-out periodic at 8:00, v7: 90.0% [85.1, 93.4] (180/200); start 61.5% [54.6, 68.0]: gain',
    );
    expect(renderLlmEventLine({ kind: 'evaluated', evaluation: start, start }, s)).toMatch(/held-out start at 0:00, v0: 61\.5% .*; the start$/);
    expect(renderLlmEventLine({ kind: 'updates', updates: 1 }, s)).toBe('[llm-demo 8:12/30:00] learner: 1 update published');
    expect(renderLlmEventLine({ kind: 'pace-timeout', task: 12, required: 6, served: 5 }, s)).toMatch(/problem 12 waited in vain for v6 \(v5 serves/);
  });
});

describe('renderLlmSummary', () => {
  const outcome = (over: Partial<LlmDemoOutcome>): LlmDemoOutcome => ({
    evaluations: [start, middle, gain],
    tasks: [...state().tasks],
    episodes: 240,
    trainingMs: 480_000,
    endedBy: 'gain',
    verdict: 'clear gain',
    ...over,
  });
  const view = { runId: 'r1', runDir: '/runs/r1', policy: 'p', updates: 7, wallMs: 600_000, notes: [], files: ['result.json', 'topology.log'] };

  it('start against end with intervals, versions, updates, episodes, wall time and the verdict', () => {
    const text = renderLlmSummary({ ...view, outcome: outcome({}) }, false).join('\n');
    expect(text).toContain("SRPO LLM demo r1: 8:00 of training, ended on a clear gain: the held-out interval lies wholly above the start's");
    expect(text).toMatch(/\| start +\| 0:00 +\| v0 +\| 61\.5% \[54\.6, 68\.0\] \(123\/200\) +\|/);
    expect(text).toMatch(/\| end +\| 8:00 +\| v7 +\| 90\.0% \[85\.1, 93\.4\] \(180\/200\) +\|/);
    expect(text).toContain(
      'learner updates 7; newest version served v8; 240 episodes over 30 problems; training reward of the last 20 problems 0.75; wall time 10:00',
    );
    expect(text).toContain("verdict: clear gain (the end's interval lies wholly above the start's)");
    expect(text).toContain('files in /runs/r1: result.json, topology.log');
  });

  it('no clear gain when the intervals overlap, or with one evaluation only', () => {
    const overlap = renderLlmSummary(
      { ...view, outcome: outcome({ evaluations: [start, middle], endedBy: 'time', verdict: 'no clear gain yet' }) },
      false,
    ).join('\n');
    expect(overlap).toContain('ended at the time limit');
    expect(overlap).toContain('verdict: no clear gain yet (the intervals overlap)');
    const early = renderLlmSummary({ ...view, outcome: outcome({ evaluations: [start], endedBy: 'request', verdict: 'no clear gain yet' }) }, false).join('\n');
    expect(early).toContain('stopped on request (no final evaluation)');
    expect(early).toMatch(/\| end +\| — +\| — +\| — +\|/);
    expect(early).toContain('verdict: no clear gain yet (fewer than two evaluations)');
  });
});
