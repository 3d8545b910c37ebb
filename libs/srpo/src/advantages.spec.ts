import { ValidationError } from '@srpo/core';
import { advantage, groupAdvantages, groupMean, groupStd, progressCoverage } from './advantages';
import type { AdvantageInput } from './advantages';
import { DEFAULT_OBJECTIVE_CONFIG } from './config';
import type { ObjectiveConfig } from './config';

function cfg(overrides: Partial<ObjectiveConfig> = {}, progress: Partial<ObjectiveConfig['progress']> = {}): ObjectiveConfig {
  return { ...DEFAULT_OBJECTIVE_CONFIG, ...overrides, progress: { ...DEFAULT_OBJECTIVE_CONFIG.progress, ...progress } };
}

const sets = (groupKey: string, rewards: number[], progress?: (number | undefined)[]): AdvantageInput[] =>
  rewards.map((reward, i) => ({ setId: `${groupKey}-${i}`, groupKey, reward, ...(progress?.[i] === undefined ? {} : { progress: progress[i] }) }));

describe('groupMean / groupStd / advantage', () => {
  it('match hand values', () => {
    // [1, 0, 0, 1]: μ = 0.5, Σ(x − μ)² = 4·0.25 = 1 → sample σ = √(1/3) = 0.577350, population σ = √(1/4) = 0.5
    expect(groupMean([1, 0, 0, 1])).toBe(0.5);
    expect(groupStd([1, 0, 0, 1], 'sample')).toBeCloseTo(0.57735027, 8);
    expect(groupStd([1, 0, 0, 1], 'population')).toBe(0.5);
    expect(groupStd([3], 'sample')).toBe(0);
    // (1 − 0.5)/(0.5 + 0.5) = 0.5
    expect(advantage(1, 0.5, 0.5, 0.5)).toBe(0.5);
  });
});

describe('groupAdvantages', () => {
  it('normalises each group with the sample std by default, keeping input order across interleaved groups', () => {
    const input: AdvantageInput[] = [
      { setId: 'g1', groupKey: 'g', reward: 1 },
      { setId: 'h1', groupKey: 'h', reward: 2 },
      { setId: 'g2', groupKey: 'g', reward: 0 },
      { setId: 'g3', groupKey: 'g', reward: 0 },
      { setId: 'h2', groupKey: 'h', reward: 4 },
      { setId: 'g4', groupKey: 'g', reward: 1 },
    ];
    const out = groupAdvantages(input, cfg());
    expect(out.map((a) => a.setId)).toEqual(['g1', 'h1', 'g2', 'g3', 'h2', 'g4']);
    expect(out.map((a) => a.groupKey)).toEqual(['g', 'h', 'g', 'g', 'h', 'g']);
    // g: ±0.5/(0.577350 + 1e-6) = ±0.866024
    // h: μ = 3, sample σ = √((1 + 1)/1) = √2 = 1.414214 → ∓1/(1.414214 + 1e-6) = ∓0.707106
    const expected = [0.8660239, -0.7071064, -0.8660239, -0.8660239, 0.7071064, 0.8660239];
    out.forEach((a, i) => expect(a.advantage).toBeCloseTo(expected[i], 6));
    expect(out.every((a) => !a.fromProgress && !a.degenerateGroup)).toBe(true);
  });

  it('divides by n with advantageStd "population"', () => {
    // [1, 0, 0, 1]: σ = 0.5 → ±0.5/(0.5 + 1e-6) = ±0.999998
    const out = groupAdvantages(sets('g', [1, 0, 0, 1]), cfg({ advantageStd: 'population' }));
    expect(out.map((a) => a.advantage)).toEqual([0.999998000004, -0.999998000004, -0.999998000004, 0.999998000004].map((x): unknown => expect.closeTo(x, 10)));
  });

  it('honours advantageEps', () => {
    // [1, 0]: μ = 0.5, sample σ = √0.5 = 0.707107; eps 0.292893 makes the denominator 1 → ±0.5
    const out = groupAdvantages(sets('g', [1, 0]), cfg({ advantageEps: 1 - Math.SQRT1_2 }));
    expect(out[0].advantage).toBeCloseTo(0.5, 12);
    expect(out[1].advantage).toBeCloseTo(-0.5, 12);
  });

  it('gives A = 0 to a singleton group and marks it degenerate', () => {
    const out = groupAdvantages([{ setId: 'solo', groupKey: 'alone', reward: 0.9, progress: 0.7 }], cfg({}, { enabled: true }));
    expect(out).toEqual([{ setId: 'solo', groupKey: 'alone', advantage: 0, fromProgress: false, degenerateGroup: true }]);
  });

  it('gives exactly A = 0 to a zero-std group even when the float mean is off by an ulp', () => {
    // (0.1 + 0.1 + 0.1)/3 = 0.10000000000000002 ≠ 0.1, so (R − μ)/(0 + ε) would be ≈ −1.4e−11, not 0.
    expect(groupMean([0.1, 0.1, 0.1])).not.toBe(0.1);
    const out = groupAdvantages(sets('g', [0.1, 0.1, 0.1]), cfg());
    expect(out.map((a) => a.advantage)).toEqual([0, 0, 0]);
    expect(out.every((a) => a.degenerateGroup && !a.fromProgress)).toBe(true);
  });

  describe('ProGPO progress fallback', () => {
    it('all-zero rewards with usable progress: advantages come from progress', () => {
      // progress [0.5, 0.25, 0]: μ = 0.25, sample σ = √((0.0625 + 0 + 0.0625)/2) = 0.25
      // A = [0.25, 0, −0.25]/(0.25 + 1e-6) = [0.999996, 0, −0.999996]
      const out = groupAdvantages(sets('g', [0, 0, 0], [0.5, 0.25, 0]), cfg({}, { enabled: true }));
      expect(out[0].advantage).toBeCloseTo(0.999996000016, 10);
      expect(out[1].advantage).toBe(0);
      expect(out[2].advantage).toBeCloseTo(-0.999996000016, 10);
      expect(out.every((a) => a.fromProgress && !a.degenerateGroup)).toBe(true);
    });

    it('all-zero rewards without usable progress (all equal): reward-based, degenerate, A = 0', () => {
      const out = groupAdvantages(sets('g', [0, 0, 0], [0.2, 0.2, 0.2]), cfg({}, { enabled: true }));
      expect(out.map((a) => [a.advantage, a.fromProgress, a.degenerateGroup])).toEqual([
        [0, false, true],
        [0, false, true],
        [0, false, true],
      ]);
    });

    it('progress spread below stdThreshold is not used', () => {
      // progress [0.2, 0.20001, 0.2]: sample σ = 5.77e−6 < 1e−4
      const out = groupAdvantages(sets('g', [0, 0, 0], [0.2, 0.20001, 0.2]), cfg({}, { enabled: true }));
      expect(out.every((a) => !a.fromProgress && a.degenerateGroup && a.advantage === 0)).toBe(true);
      // ... but is with a lower threshold.
      const low = groupAdvantages(sets('g', [0, 0, 0], [0.2, 0.20001, 0.2]), cfg({}, { enabled: true, stdThreshold: 1e-6 }));
      expect(low.every((a) => a.fromProgress)).toBe(true);
    });

    it('is off unless enabled', () => {
      const out = groupAdvantages(sets('g', [0, 0, 0], [0.5, 0.25, 0]), cfg());
      expect(out.every((a) => !a.fromProgress && a.advantage === 0 && a.degenerateGroup)).toBe(true);
    });

    it('needs every reward strictly below rewardThreshold', () => {
      // 0.001 is not below 0.001 → rewards [0, 0.001]: μ = 0.0005, σ = 0.000707107 → ±0.0005/(0.000707107 + 1e-6) = ±0.706108
      const out = groupAdvantages(sets('g', [0, 0.001], [0.9, 0.1]), cfg({}, { enabled: true }));
      expect(out.every((a) => !a.fromProgress)).toBe(true);
      expect(out[0].advantage).toBeCloseTo(-0.7061082, 6);
      // Rewards below the threshold but not all zero still switch to progress.
      const below = groupAdvantages(sets('g', [0, 0.0005], [0.9, 0.1]), cfg({}, { enabled: true }));
      expect(below.every((a) => a.fromProgress)).toBe(true);
      expect(below[0].advantage).toBeGreaterThan(0);
    });

    it('needs progress on every set of the group', () => {
      const out = groupAdvantages(sets('g', [0, 0, 0], [0.5, undefined, 0]), cfg({}, { enabled: true }));
      expect(out.every((a) => !a.fromProgress && a.degenerateGroup)).toBe(true);
    });

    it('applies per group', () => {
      const input = [...sets('zero', [0, 0], [0.4, 0.1]), ...sets('win', [1, 0], [0.4, 0.1])];
      const out = groupAdvantages(input, cfg({}, { enabled: true }));
      expect(out.map((a) => a.fromProgress)).toEqual([true, true, false, false]);
    });
  });

  it('refuses bad input naming the set and field', () => {
    const bad =
      (input: unknown[]): (() => unknown) =>
      () =>
        groupAdvantages(input as AdvantageInput[], cfg());
    expect(bad([{ setId: 't-1', groupKey: 'g', reward: Number.NaN }])).toThrow(ValidationError);
    expect(bad([{ setId: 't-1', groupKey: 'g', reward: Number.NaN }])).toThrow('sets[0] (t-1).reward: expected a finite number, got NaN');
    expect(bad([{ setId: 't-1', groupKey: 'g', reward: 1, progress: Infinity }])).toThrow('sets[0] (t-1).progress: expected a finite number, got Infinity');
    expect(bad([{ setId: 't-1', reward: 1 }])).toThrow('sets[0] (t-1).groupKey: missing; expected a non-empty string');
    expect(bad([{ groupKey: 'g', reward: 1 }])).toThrow('sets[0].setId: missing; expected a non-empty string');
    expect(
      bad([
        { setId: 'x', groupKey: 'g', reward: 1 },
        { setId: 'x', groupKey: 'g', reward: 0 },
      ]),
    ).toThrow('sets[1] (x).setId: duplicate of sets[0]');
  });
});

describe('progressCoverage', () => {
  it('is (distinct observations − 1) / turns', () => {
    // a, b, a, c: 3 distinct → (3 − 1)/3
    expect(progressCoverage(['a', 'b', 'a', 'c'], 3)).toBeCloseTo(2 / 3, 15);
    // Going in circles earns nothing.
    expect(progressCoverage(['a', 'a', 'a'], 2)).toBe(0);
    expect(progressCoverage(['a', 'b', 'c', 'd', 'e'], 4)).toBe(1);
    expect(progressCoverage([], 2)).toBe(0);
    expect(progressCoverage(['a'], 0)).toBe(0);
  });

  it('refuses negative or fractional turns and non-string digests', () => {
    expect(() => progressCoverage(['a'], -1)).toThrow('turns: expected a non-negative integer, got -1');
    expect(() => progressCoverage(['a'], 1.5)).toThrow('turns: expected a non-negative integer, got 1.5');
    expect(() => progressCoverage(['a', 3 as unknown as string], 1)).toThrow('observationDigests[1]: expected a string, got 3');
  });
});
