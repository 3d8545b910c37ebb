import { ValidationError } from '@srpo/core';
import {
  generateWordProblem,
  gradeSolver,
  gradeVerifier,
  parseNumericAnswer,
  parseVerdict,
  solverMessages,
  verifierMessages,
  WORD_PROBLEM_VARIANTS,
  type WordProblemSettings,
} from './word-problems.env';

/**
 * An independent reading of a problem's text: the sentences' numbers and verbs, evaluated the way
 * a person would. The generator's answer must agree with it for every seed tried.
 */
function solveByReading(text: string): number {
  const n = (s: string) => Number(s);
  let m = /^(?:\w+ has|There are) (\d+) \w+(?: in a box)?\. \w+ (gets|puts in|gives|takes out) (\d+)/.exec(text);
  let value: number;
  if (m) value = m[2] === 'gets' || m[2] === 'puts in' ? n(m[1]) + n(m[3]) : n(m[1]) - n(m[3]);
  else if ((m = /^(?:\w+ has (\d+) bags with (\d+)|There are (\d+) boxes\. Each box holds (\d+))/.exec(text))) value = n(m[1] ?? m[3]) * n(m[2] ?? m[4]);
  else if ((m = /^\w+ (?:shares|puts) (\d+) \w+ (?:equally among|into) (\d+)/.exec(text))) value = n(m[1]) / n(m[2]);
  else throw new Error(`unreadable: ${text}`);
  for (const s of text.matchAll(/Then \w+ (loses|finds) (\d+)/g)) value += s[1] === 'finds' ? n(s[2]) : -n(s[2]);
  return value;
}

describe('generateWordProblem', () => {
  it('gives the same problem for a seed, and different problems across seeds', () => {
    const s = WORD_PROBLEM_VARIANTS['addsub-20'];
    expect(generateWordProblem(42, s)).toEqual(generateWordProblem(42, s));
    const texts = new Set(Array.from({ length: 50 }, (_, i) => generateWordProblem(i, s).text));
    expect(texts.size).toBeGreaterThan(45);
  });

  it.each(Object.entries(WORD_PROBLEM_VARIANTS))('%s: the answer is what the text says, operands in range, every op used', (_, s: WordProblemSettings) => {
    const seenOps = new Set<string>();
    for (let seed = 0; seed < 400; seed++) {
      const p = generateWordProblem(seed, s);
      expect(p.seed).toBe(seed);
      expect(solveByReading(p.text)).toBe(p.answer);
      expect(Number.isInteger(p.answer) && p.answer >= 1).toBe(true);
      const numbers = (p.text.match(/\d+/g) ?? []).map(Number);
      // Operands (not the dividend of a division, which is a product of factors ≤ 12) stay in range.
      if (!/shares|puts \d+/.test(p.text)) for (const x of numbers) expect(x).toBeLessThanOrEqual(Math.max(s.maxOperand, 12));
      expect((p.text.match(/Then /g) ?? []).length).toBe(s.steps - 1);
      seenOps.add(/gets|puts in/.test(p.text) ? 'add' : /gives|takes out/.test(p.text) ? 'sub' : /bags with|Each box/.test(p.text) ? 'mul' : 'div');
    }
    expect([...seenOps].sort()).toEqual([...s.ops].sort());
  });

  it('refuses bad settings and seeds, naming the field', () => {
    const s = WORD_PROBLEM_VARIANTS['add-10'];
    expect(() => generateWordProblem(-1, s)).toThrow(/seed/);
    expect(() => generateWordProblem(1.5, s)).toThrow(ValidationError);
    expect(() => generateWordProblem(0, { ...s, maxOperand: 1 })).toThrow(/maxOperand/);
    expect(() => generateWordProblem(0, { ...s, steps: 4 })).toThrow(/steps/);
    expect(() => generateWordProblem(0, { ...s, ops: [] })).toThrow(/ops/);
  });

  it('puts the problem and the answer format in one user message', () => {
    const p = { seed: 0, text: 'Sam has 3 apples. Sam gets 2 more apples. How many apples does Sam have now?', answer: 5 };
    const m = solverMessages(p, 'tagged');
    expect(m).toHaveLength(1);
    expect(m[0].role).toBe('user');
    expect(m[0].content).toContain(p.text);
    expect(m[0].content).toContain("'Answer: <number>'");
    // shots: the format as the system prompt, two worked examples whose answers are right, then the bare problem.
    const shots = solverMessages(p);
    expect(shots.map((x) => x.role)).toEqual(['system', 'user', 'assistant', 'user', 'assistant', 'user']);
    expect(shots[0].content).toContain("'Answer: <number>'");
    expect(shots[5]).toEqual({ role: 'user', content: p.text });
    expect(shots[2].content).toBe('7 + 5 = 12\nAnswer: 12');
    expect(parseNumericAnswer(shots[4].content)).toBe(9 - 4);
    const v = verifierMessages(p, 7);
    expect(v.map((x) => x.role)).toEqual(['system', 'user', 'assistant', 'user', 'assistant', 'user']);
    expect(v[5].content).toBe(`Problem: ${p.text}\nProposed answer: 7`);
    expect(verifierMessages(p, undefined)[5].content).toContain('Proposed answer: (no number given)');
    // The worked verdicts are right: 7 + 5 = 12 is proposed as 12, 9 − 4 = 5 as 6.
    expect(parseVerdict(v[2].content)).toBe(true);
    expect(parseVerdict(v[4].content)).toBe(false);
  });
});

describe('parseNumericAnswer', () => {
  it.each([
    ['Answer: 12', 12],
    ['Sam has 3 + 4 = 7 apples.\nAnswer: 7', 7],
    ['The answer is 15.', 15],
    ['answer = **8**', 8],
    ['Answer: 3\nWait, no.\nAnswer: 9', 9],
    ['Answer: 4 apples, because 2 + 2 = 4 and 9 is wrong', 4],
    ['3 + 4 = 7', 7],
    ['He has 1,234 coins', 1234],
    ['12.0 apples', 12],
    ['Answer: -3', -3],
    ['Each gets 2.5 cookies', undefined],
    ['I do not know.', undefined],
    ['', undefined],
  ])('%j → %p', (text, want) => {
    expect(parseNumericAnswer(text)).toBe(want);
  });
});

describe('gradeSolver', () => {
  const p = { seed: 0, text: 'Sam has 3 apples. Sam gets 2 more apples. How many apples does Sam have now?', answer: 5 };
  it('pays 1 for the exact answer, the format bonus for a tagged wrong one, else 0', () => {
    expect(gradeSolver(p, '3 + 2 = 5\nAnswer: 5')).toEqual({ reward: 1, correct: true, answer: 5 });
    expect(gradeSolver(p, 'Sam has 5 apples now.')).toEqual({ reward: 1, correct: true, answer: 5 });
    expect(gradeSolver(p, 'Answer: 6', 0.1)).toEqual({ reward: 0.1, correct: false, answer: 6 });
    expect(gradeSolver(p, 'Sam has 6 apples.', 0.1)).toEqual({ reward: 0, correct: false, answer: 6 });
    expect(gradeSolver(p, 'Answer: 6')).toEqual({ reward: 0, correct: false, answer: 6 });
    // The tagged answer wins over a later stray number.
    expect(gradeSolver(p, 'Answer: 5 (from 3 and 2)').correct).toBe(true);
    expect(() => gradeSolver(p, 'x', 1)).toThrow(/formatBonus/);
  });
});

describe('parseVerdict and gradeVerifier', () => {
  it.each([
    ['Verdict: correct', true],
    ['Verdict: incorrect', false],
    ['The answer is wrong.\nVerdict: Correct', true],
    ['Verdict: **incorrect**', false],
    ['Yes, 5 is right.', true],
    ['No. 3 + 2 is 5, not 6.', false],
    ['The proposed answer is incorrect.', false],
    ['That is not correct.', false],
    ['The proposed answer is correct.', true],
    ['Let me think about it.', undefined],
  ])('%j → %p', (text, want) => {
    expect(parseVerdict(text)).toBe(want);
  });

  const p = { seed: 0, text: 'x', answer: 5 };
  it('pays 1 for the right verdict on the proposed answer, 0 for a wrong or missing one', () => {
    expect(gradeVerifier(p, 5, 'Verdict: correct')).toEqual({ reward: 1, verdict: true, truth: true });
    expect(gradeVerifier(p, 6, 'Verdict: incorrect')).toEqual({ reward: 1, verdict: false, truth: false });
    expect(gradeVerifier(p, 6, 'Verdict: correct')).toEqual({ reward: 0, verdict: true, truth: false });
    expect(gradeVerifier(p, undefined, 'Verdict: incorrect')).toEqual({ reward: 1, verdict: false, truth: false });
    expect(gradeVerifier(p, 5, 'hmm')).toEqual({ reward: 0, verdict: undefined, truth: true });
  });
});
