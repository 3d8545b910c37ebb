import { blockMeans, ci95, excludesZero, normalisedAuc, pairedDiff, sampleStd, sampleVariance, tQuantile975 } from './stats';

describe('study statistics', () => {
  it('sample std and variance with n − 1, by hand', () => {
    // 2, 4, 4, 4, 5, 5, 7, 9: mean 5, squared deviations sum to 32; 32/7 = 4.571429
    expect(sampleVariance([2, 4, 4, 4, 5, 5, 7, 9])).toBeCloseTo(32 / 7, 12);
    expect(sampleStd([2, 4, 4, 4, 5, 5, 7, 9])).toBeCloseTo(Math.sqrt(32 / 7), 12);
    expect(sampleStd([3])).toBe(0);
    expect(sampleVariance([3])).toBeNaN();
  });

  it('t quantiles from the table', () => {
    expect(tQuantile975(1)).toBe(12.706);
    expect(tQuantile975(9)).toBe(2.262);
    expect(tQuantile975(29)).toBe(2.045);
    expect(tQuantile975(1000)).toBe(1.96);
    expect(() => tQuantile975(0)).toThrow('df must be a positive integer, got 0');
  });

  it('95 % interval: mean ± t·s/√n (n = 4 by hand)', () => {
    // 1, 2, 3, 4: mean 2.5, s = √(5/3) = 1.290994; t_{0.975,3} = 3.182 → 3.182·1.290994/2 = 2.054
    const i = ci95([1, 2, 3, 4]);
    expect(i.mean).toBe(2.5);
    expect(i.half).toBeCloseTo(2.05397, 4);
    expect(i.n).toBe(4);
    expect(ci95([5]).half).toBeNaN();
  });

  it('paired differences are taken per seed', () => {
    // a − b = 1, 1, 1, 2 → mean 1.25, s = 0.5, t_{0.975,3}·0.5/2 = 0.7955
    const d = pairedDiff([3, 4, 5, 7], [2, 3, 4, 5]);
    expect(d.mean).toBe(1.25);
    expect(d.half).toBeCloseTo(0.7955, 4);
    expect(excludesZero(d)).toBe(true);
    expect(excludesZero(pairedDiff([1, 2], [2, 1]))).toBe(false);
    expect(() => pairedDiff([1], [1, 2])).toThrow('paired samples need equal lengths');
  });

  it('normalised AUC by the trapezoid rule', () => {
    expect(normalisedAuc([0.3, 0.3, 0.3])).toBeCloseTo(0.3, 12);
    // 0 → 1 linearly: area 1/2
    expect(normalisedAuc([0, 0.25, 0.5, 0.75, 1])).toBeCloseTo(0.5, 12);
    // [0, 1, 0]: two triangles of width 1/2 and height 1 → 1/2
    expect(normalisedAuc([0, 1, 0])).toBeCloseTo(0.5, 12);
    expect(normalisedAuc([0.7])).toBe(0.7);
    expect(normalisedAuc([])).toBeNaN();
  });

  it('block means keep a short last block', () => {
    expect(blockMeans([1, 2, 3, 4, 5], 2)).toEqual([1.5, 3.5, 5]);
    expect(() => blockMeans([1], 0)).toThrow('size must be a positive integer');
  });
});
