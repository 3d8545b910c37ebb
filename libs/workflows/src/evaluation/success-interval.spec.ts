import { compareIntervals, successOf, wilsonInterval } from './success-interval';

describe('wilsonInterval', () => {
  // Hand values: the roots p of (p̂ − p)² = z²·p(1 − p)/n, solved as a quadratic (z = 1.96); the
  // 0/10 and 10/10 bounds are also z²/(n + z²) = 0.27754 and its mirror.
  it.each([
    [0, 10, 0, 0.27754],
    [10, 10, 0.72246, 1],
    [5, 10, 0.23659, 0.76341],
    [81, 263, 0.255288, 0.366211],
    [1, 200, 0.000883, 0.027774],
    [60, 200, 0.240746, 0.366792],
    [100, 200, 0.43136, 0.56864],
  ])('%i of %i → [%f, %f]', (k, n, low, high) => {
    const w = wilsonInterval(k, n);
    expect(w.rate).toBeCloseTo(k / n, 12);
    expect(w.low).toBeCloseTo(low, 5);
    expect(w.high).toBeCloseTo(high, 5);
  });

  it('knows nothing from no trials, and refuses impossible counts naming the field', () => {
    expect(wilsonInterval(0, 0)).toEqual({ successes: 0, trials: 0, rate: 0, low: 0, high: 1 });
    expect(() => wilsonInterval(3, 2)).toThrow(/successes/);
    expect(() => wilsonInterval(-1, 2)).toThrow(/successes/);
    expect(() => wilsonInterval(1, 2.5)).toThrow(/trials/);
    expect(() => wilsonInterval(1, 2, 0)).toThrow(/z/);
  });
});

describe('compareIntervals and successOf', () => {
  it('calls a gain only when the intervals do not overlap', () => {
    // 30/200 = [0.107, 0.206]; 60/200 = [0.241, 0.367]; 45/200 = [0.173, 0.288].
    expect(compareIntervals(wilsonInterval(30, 200), wilsonInterval(60, 200))).toBe('gain');
    expect(compareIntervals(wilsonInterval(60, 200), wilsonInterval(30, 200))).toBe('loss');
    expect(compareIntervals(wilsonInterval(30, 200), wilsonInterval(45, 200))).toBe('overlap');
  });

  it('counts the successes of a list of outcomes', () => {
    const s = successOf([true, false, true, true, false, false, false, false, false, true]);
    expect(s.successes).toBe(4);
    expect(s.trials).toBe(10);
  });
});
