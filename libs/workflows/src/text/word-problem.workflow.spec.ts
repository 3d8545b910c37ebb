import type { EpisodeOutcomeInit, TransitionInit } from '@srpo/events';
import type { WordProblem } from '../envs/word-problems.env';
import {
  checkWordProblemPlay,
  DEFAULT_WORD_PROBLEM_PLAY,
  evaluateWordProblems,
  isDegenerate,
  playWordProblemGroup,
  type ChatReply,
  type ChatRequest,
  type TextAgentClient,
  type WordProblemPlay,
} from './word-problem.workflow';

const problem: WordProblem = { seed: 17, text: 'Sam has 3 apples. Sam gets 2 more apples. How many apples does Sam have now?', answer: 5 };
const play: WordProblemPlay = { ...DEFAULT_WORD_PROBLEM_PLAY, runId: 'run1', groupSize: 3 };

/** Answers from a script keyed by episode and role, and keeps what was posted. */
class ScriptedClient implements TextAgentClient {
  readonly requests: ChatRequest[] = [];
  readonly transitions: TransitionInit[] = [];
  readonly outcomes: EpisodeOutcomeInit[] = [];
  constructor(private readonly replies: Record<string, string>) {}
  chat(r: ChatRequest): Promise<ChatReply> {
    this.requests.push(r);
    const text = this.replies[`${r.episodeId}/${r.role}`] ?? '';
    return Promise.resolve({ text, outputIds: [`${r.episodeId}.s${r.step}.${r.agentId}`], policyVersion: 4 });
  }
  recordTransition(t: TransitionInit): Promise<void> {
    this.transitions.push(t);
    return Promise.resolve();
  }
  recordOutcome(o: EpisodeOutcomeInit): Promise<void> {
    this.outcomes.push(o);
    return Promise.resolve();
  }
}

describe('playWordProblemGroup', () => {
  it('plays G episodes: solver then verifier on the solver’s parsed answer, a reward per step, success = exact answer', async () => {
    const c = new ScriptedClient({
      'run1-wp17.r0/solver': '3 + 2 = 5\nAnswer: 5',
      'run1-wp17.r0/verifier': 'Verdict: correct',
      'run1-wp17.r1/solver': 'Answer: 6',
      'run1-wp17.r1/verifier': 'Verdict: correct',
      'run1-wp17.r2/solver': 'I am not sure.',
      'run1-wp17.r2/verifier': 'No.',
    });
    const episodes = await playWordProblemGroup(c, problem, play);
    expect(episodes.map((e) => [e.correct, e.answer, e.solverReward, e.verdict, e.verifierReward])).toEqual([
      [true, 5, 1, true, 1],
      [false, 6, 0, true, 0],
      [false, undefined, 0, false, 1],
    ]);
    // The verifier saw each episode's own proposed answer.
    const verifierPrompts = c.requests.filter((r) => r.role === 'verifier').map((r) => r.messages[r.messages.length - 1].content);
    expect(verifierPrompts.some((t) => t.includes('Proposed answer: 6'))).toBe(true);
    expect(verifierPrompts.some((t) => t.includes('Proposed answer: (no number given)'))).toBe(true);

    const r1 = c.transitions.filter((t) => t.episodeId === 'run1-wp17.r1');
    expect(r1.map((t) => [t.step, t.position, t.groupKey, t.reward, t.done, t.consumedOutputIds])).toEqual([
      [0, 'solve', 'run1-wp17/solve', 0, false, ['run1-wp17.r1.s0.solver-0']],
      [1, 'verify', 'run1-wp17/verify', 0, true, ['run1-wp17.r1.s1.verifier-0']],
    ]);
    expect(r1.every((t) => t.expectedGroupSize === 3 && t.taskId === 'run1-wp17' && t.expectedCardinality === 1)).toBe(true);
    expect(c.outcomes.map((o) => [o.episodeId, o.success, o.outcomeReward, o.turns]).sort()).toEqual([
      ['run1-wp17.r0', true, 1, 2],
      ['run1-wp17.r1', false, 0, 2],
      ['run1-wp17.r2', false, 0, 2],
    ]);
    expect(c.requests.every((r) => r.temperature === play.temperature)).toBe(true);
    // The solver gets the worked examples by default, and the instruction alone with `tagged`.
    expect(c.requests.filter((r) => r.role === 'solver').every((r) => r.messages.length === 6)).toBe(true);
    const tagged = new ScriptedClient({});
    await playWordProblemGroup(tagged, problem, { ...play, groupSize: 1, promptStyle: 'tagged' });
    expect(tagged.requests[0].messages).toHaveLength(1);
  });

  it('without the verifier: one transition per episode, done at once, turns 1', async () => {
    const c = new ScriptedClient({ 'run1-wp17.r0/solver': 'Answer: 5' });
    await playWordProblemGroup(c, problem, { ...play, groupSize: 1, verifier: false });
    expect(c.requests.map((r) => r.role)).toEqual(['solver']);
    expect(c.transitions.map((t) => [t.position, t.done])).toEqual([['solve', true]]);
    expect(c.outcomes[0].turns).toBe(1);
  });

  it('refuses bad settings naming the field', () => {
    expect(() => checkWordProblemPlay({ ...play, temperature: 0 })).toThrow(/temperature/);
    expect(() => checkWordProblemPlay({ ...play, groupSize: 0 })).toThrow(/groupSize/);
    expect(() => checkWordProblemPlay({ ...play, runId: 'a b' })).toThrow(/runId/);
    expect(() => checkWordProblemPlay({ ...play, solverMaxTokens: 0 })).toThrow(/solverMaxTokens/);
  });
});

describe('isDegenerate', () => {
  it('is true only when every reward is equal', () => {
    expect(isDegenerate([0, 0, 0])).toBe(true);
    expect(isDegenerate([1, 1])).toBe(true);
    expect(isDegenerate([0, 1, 0])).toBe(false);
  });
});

describe('evaluateWordProblems', () => {
  it('grades each problem’s reply in order and gives the Wilson interval', async () => {
    const problems: WordProblem[] = Array.from({ length: 10 }, (_, i) => ({ seed: i, text: `p${i}`, answer: i }));
    // Right on the even seeds: 5 of 10 → [0.23659, 0.76341] by hand.
    const r = await evaluateWordProblems(problems, (_m, p) => Promise.resolve(`Answer: ${p.seed % 2 === 0 ? p.answer : p.answer + 1}`), 3);
    expect(r.answers.map((a) => a.correct)).toEqual([true, false, true, false, true, false, true, false, true, false]);
    expect(r.successes).toBe(5);
    expect(r.low).toBeCloseTo(0.23659, 5);
    expect(r.high).toBeCloseTo(0.76341, 5);
    await expect(evaluateWordProblems(problems, () => Promise.resolve(''), 0)).rejects.toThrow(/concurrency/);
  });
});
