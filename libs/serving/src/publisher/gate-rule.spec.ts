import { ValidationError } from '@srpo/core';
import { differenceInterval, gateVerdict, wilsonInterval } from './gate-rule';

const round4 = (xs: number[]) => xs.map((x) => Math.round(x * 1e4) / 1e4);

describe('the publishing gate rule', () => {
  // Newcombe (1998a), "Two-sided confidence intervals for the single proportion", Table I, method 3 (Wilson score).
  it.each([
    [81, 263, 0.2553, 0.3662],
    [15, 148, 0.0624, 0.1605],
    [0, 20, 0, 0.1611],
    [1, 29, 0.0061, 0.1718],
  ])("Wilson's interval of %i/%i is Newcombe's published [%f, %f]", (x, n, lo, hi) => {
    expect(round4(wilsonInterval({ successes: x, trials: n }))).toEqual([lo, hi]);
  });

  // Newcombe (1998b), "Interval estimation for the difference between independent proportions", Table II, method 10.
  it.each([
    [56, 70, 48, 80, 0.0524, 0.3339],
    [9, 10, 3, 10, 0.1705, 0.809],
    [5, 56, 0, 29, -0.0381, 0.1926],
  ])('the difference %i/%i − %i/%i has the published hybrid score interval [%f, %f]', (a, n1, b, n2, lo, hi) => {
    expect(round4(differenceInterval({ successes: a, trials: n1 }, { successes: b, trials: n2 }))).toEqual([lo, hi]);
  });

  it('no trials: Wilson says nothing is known, and the gate refuses', () => {
    expect(wilsonInterval({ successes: 0, trials: 0 })).toEqual([0, 1]);
    expect(gateVerdict({ successes: 0, trials: 0 }, { successes: 3, trials: 10 }, 0.5, 'point').accepted).toBe(false);
  });

  it('point: accepted iff p_candidate − p_serving ≥ −margin, ties included', () => {
    // 45/50 = 0.90 vs 47/50 = 0.94: d = −0.04.
    const c = { successes: 45, trials: 50 };
    const s = { successes: 47, trials: 50 };
    expect(gateVerdict(c, s, 0.05, 'point')).toMatchObject({ accepted: true, candidateRate: 0.9, servingRate: 0.94 });
    expect(gateVerdict(c, s, 0.04, 'point').accepted).toBe(true); // on the bound
    expect(gateVerdict(c, s, 0.03, 'point').accepted).toBe(false);
    expect(gateVerdict(c, s, 0.05, 'point').difference).toBeCloseTo(-0.04, 12);
    // equal rates pass with no margin
    expect(gateVerdict({ successes: 3, trials: 10 }, { successes: 3, trials: 10 }, 0, 'point').accepted).toBe(true);
  });

  it("lower: accepted iff the interval's lower bound ≥ −margin", () => {
    // 9/10 vs 3/10: L = 0.1705 > 0, passes with no margin.
    expect(gateVerdict({ successes: 9, trials: 10 }, { successes: 3, trials: 10 }, 0, 'lower').accepted).toBe(true);
    // 48/80 vs 56/70: d = −0.2333, interval [−0.3339, −0.0524]: refused at margin 0.3, accepted at 0.34.
    const v = gateVerdict({ successes: 48, trials: 80 }, { successes: 56, trials: 70 }, 0.3, 'lower');
    expect(round4(v.interval)).toEqual([-0.3339, -0.0524]);
    expect(v.accepted).toBe(false);
    expect(gateVerdict({ successes: 48, trials: 80 }, { successes: 56, trials: 70 }, 0.34, 'lower').accepted).toBe(true);
    // equal rates on 10 items: d = 0 passes `point` but the interval reaches far below 0, so `lower` refuses at margin 0.1.
    expect(gateVerdict({ successes: 5, trials: 10 }, { successes: 5, trials: 10 }, 0.1, 'lower').accepted).toBe(false);
  });

  it.each([
    [{ successes: 3, trials: 2 }, { successes: 1, trials: 2 }, 0.1, 'candidate.successes'],
    [{ successes: 1, trials: 2 }, { successes: 1, trials: 1.5 }, 0.1, 'serving.trials'],
    [{ successes: 1, trials: 2 }, { successes: 1, trials: 2 }, -0.1, 'margin'],
  ])('bad figures fail naming the field (%j, %j, margin %f)', (c, s, m, field) => {
    let error: unknown;
    try {
      gateVerdict(c, s, m, 'point');
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ValidationError);
    expect((error as ValidationError).field).toBe(field);
  });
});
