import { SeededRng } from '@srpo/policy';
import { Tok } from '../tokenizer';
import {
  aggregatorReward,
  checkArithmeticSettings,
  checkerReward,
  gradeTokens,
  isWellFormedAnswer,
  jointReward,
  reverseAnswer,
  sampleRoutedTask,
  slotsAnswer,
  solverContext,
  solverReward,
  verdictOf,
  workerContext,
  workerReward,
  type ArithmeticSettings,
} from './arithmetic.env';

const s: ArithmeticSettings = { modulus: 4, workers: 2, reverseLength: 2, formatBonus: 0.1, blankProbability: 0.5 };
const D = (d: number) => Tok.DIGIT0 + d;

describe('fixed workflow task (reverse and decrement mod k, then check)', () => {
  it('answers [2 0] with [3 1] for k = 4 (0 − 1 wraps to 3)', () => {
    expect(reverseAnswer({ digits: [2, 0] }, s)).toEqual([D(3), D(1)]);
    expect(solverContext({ digits: [2, 0] })).toEqual([Tok.BOS, Tok.SOLVE, D(2), D(0), Tok.SEP]);
  });

  it('grades position by position: right = 1, in-range wrong digit = bonus, anything else = 0', () => {
    expect(solverReward({ digits: [2, 0] }, [D(3), D(1)], s)).toEqual({ reward: 1, correct: true });
    // first right, second a wrong in-range digit: (1 + 0.1) / 2
    expect(solverReward({ digits: [2, 0] }, [D(3), D(2)], s).reward).toBeCloseTo(0.55, 12);
    // digit 5 is a digit token but out of range for k = 4: no bonus
    expect(solverReward({ digits: [2, 0] }, [D(5), Tok.YES], s)).toEqual({ reward: 0, correct: false });
    expect(solverReward({ digits: [2, 0] }, [D(3)], s).correct).toBe(false);
  });

  it('the checker is right exactly when it accepts well-formed answers and rejects the rest', () => {
    expect(isWellFormedAnswer([D(0), D(3)], s)).toBe(true);
    expect(isWellFormedAnswer([D(0), D(4)], s)).toBe(false);
    expect(verdictOf(Tok.YES)).toBe('accept');
    expect(verdictOf(Tok.NO)).toBe('reject');
    expect(verdictOf(D(1))).toBe('invalid');
    expect(checkerReward([D(0), D(3)], 'accept', s)).toEqual({ reward: 1, correct: true });
    expect(checkerReward([D(0), D(3)], 'reject', s)).toEqual({ reward: 0.1, correct: false });
    expect(checkerReward([Tok.BLANK, D(3)], 'reject', s)).toEqual({ reward: 1, correct: true });
    expect(checkerReward([D(0), D(3)], 'invalid', s)).toEqual({ reward: 0, correct: false });
  });
});

describe('joint and routed tasks (workers increment their slot, the aggregator copies)', () => {
  it('worker i sees only its slot and answers digit + 1 mod k; an empty slot stays BLANK', () => {
    const t = { slots: [3, null] };
    expect(workerContext(t, 0)).toEqual([Tok.BOS, Tok.WORK, Tok.SLOT0, D(3), Tok.SEP]);
    expect(workerContext(t, 1)).toEqual([Tok.BOS, Tok.WORK, Tok.SLOT0 + 1, Tok.BLANK, Tok.SEP]);
    expect(workerReward(t, 0, [D(0)], s)).toEqual({ reward: 1, correct: true });
    expect(workerReward(t, 0, [D(3)], s)).toEqual({ reward: 0.1, correct: false });
    expect(workerReward(t, 1, [Tok.BLANK], s)).toEqual({ reward: 1, correct: true });
    expect(workerReward(t, 1, [Tok.YES], s)).toEqual({ reward: 0, correct: false });
    expect(() => workerContext(t, 2)).toThrow(/worker/);
  });

  it('the final answer is every slot answered right, in order', () => {
    expect(slotsAnswer({ slots: [1, 3] }, s)).toEqual([D(2), D(0)]);
    expect(slotsAnswer({ slots: [null, 2] }, s)).toEqual([Tok.BLANK, D(3)]);
  });

  it('one reward per joint set: the mean of its members', () => {
    expect(jointReward([1, 0.1])).toBeCloseTo(0.55, 12);
    expect(jointReward([1])).toBe(1);
    expect(() => jointReward([])).toThrow(/at least one/);
  });

  it('the aggregator is graded on copying what it was given, not on the true answer', () => {
    // workers answered [2, 2] (the second one wrongly): copying them is the aggregator's job.
    expect(aggregatorReward([D(2), D(2)], [D(2), D(2)], s)).toEqual({ reward: 1, correct: true });
    expect(aggregatorReward([D(2), Tok.BLANK], [D(2), D(0)], s).reward).toBeCloseTo(0.55, 12);
  });

  it('routed tasks never have every slot empty', () => {
    const rng = new SeededRng(5);
    for (let i = 0; i < 500; i++) expect(sampleRoutedTask(rng, { ...s, blankProbability: 0.9 }).slots.some((v) => v !== null)).toBe(true);
  });

  it('grading needs an expected answer and settings in range', () => {
    expect(() => gradeTokens([], [1], () => true, s)).toThrow(/expected/);
    expect(() => checkArithmeticSettings({ ...s, modulus: 9 })).toThrow(/modulus/);
    expect(() => checkArithmeticSettings({ ...s, workers: 5 })).toThrow(/workers/);
    expect(() => checkArithmeticSettings({ ...s, formatBonus: 1 })).toThrow(/formatBonus/);
  });
});
