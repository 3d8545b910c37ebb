import { ValidationError } from '@srpo/core';
import { adjacentCredits, bestPrefixCredits, creditsForActions, creditWeights, meanTokenNll, prefixCredits } from './credits';

describe('PMI credits', () => {
  // L_{-1} = 3.0, L_1 = 2.5, L_2 = 2.75, L_3 = 1.0
  const nll = [3.0, 2.5, 2.75, 1.0];

  describe('adjacent: c_k = L_{k-1} - L_k', () => {
    it('matches the hand-computed credits', () => {
      // c_1 = 3.0 - 2.5 = 0.5; c_2 = 2.5 - 2.75 = -0.25; c_3 = 2.75 - 1.0 = 1.75
      const { credit, baseline } = adjacentCredits(nll);
      expect(credit).toEqual([0.5, -0.25, 1.75]);
      expect(baseline).toEqual([3.0, 2.5, 2.75]);
    });

    it('telescopes: the credits add up to L_{-1} - L_K', () => {
      // 0.5 - 0.25 + 1.75 = 2.0 = 3.0 - 1.0
      expect(adjacentCredits(nll).credit.reduce((a, b) => a + b, 0)).toBeCloseTo(2.0, 12);
      // Another curve: [4, 1, 2, 0.5, 3] -> credits 3, -1, 1.5, -2.5; sum 1 = 4 - 3
      const c = adjacentCredits([4, 1, 2, 0.5, 3]).credit;
      expect(c).toEqual([3, -1, 1.5, -2.5]);
      expect(c.reduce((a, b) => a + b, 0)).toBeCloseTo(4 - 3, 12);
    });

    it('has no credit when no action is shown', () => {
      expect(adjacentCredits([2.0]).credit).toEqual([]);
    });
  });

  describe('best_prefix: c_k = B - L_k, B moves to L_k only when c_k >= 0', () => {
    it('matches the hand-computed credits and baselines', () => {
      // B = 3.0: c_1 = 3.0 - 2.5 = 0.5 >= 0 -> B = 2.5
      //          c_2 = 2.5 - 2.75 = -0.25 < 0 -> B stays 2.5
      //          c_3 = 2.5 - 1.0 = 1.5 >= 0 -> B = 1.0
      const { credit, baseline } = bestPrefixCredits(nll);
      expect(credit).toEqual([0.5, -0.25, 1.5]);
      expect(baseline).toEqual([3.0, 2.5, 2.5]);
    });

    it("does not reward an action for undoing an earlier one's damage (where adjacent does)", () => {
      // L = [2, 3, 2]: adjacent gives c_2 = 3 - 2 = 1; best_prefix keeps B = 2 after c_1 = -1, so c_2 = 2 - 2 = 0.
      expect(adjacentCredits([2, 3, 2]).credit).toEqual([-1, 1]);
      expect(bestPrefixCredits([2, 3, 2]).credit).toEqual([-1, 0]);
    });

    it('moves B on a credit of exactly 0', () => {
      // L = [2, 2, 1.5]: c_1 = 0 -> B = 2 (L_1); c_2 = 2 - 1.5 = 0.5, baseline 2
      const { credit, baseline } = bestPrefixCredits([2, 2, 1.5]);
      expect(credit).toEqual([0, 0.5]);
      expect(baseline).toEqual([2, 2]);
    });

    it('equals adjacent while every step lowers the NLL', () => {
      expect(bestPrefixCredits([5, 4, 2, 1.5]).credit).toEqual(adjacentCredits([5, 4, 2, 1.5]).credit);
    });
  });

  it('prefixCredits dispatches on the mode and refuses an unknown one', () => {
    expect(prefixCredits('adjacent', nll).credit[2]).toBe(1.75);
    expect(prefixCredits('best_prefix', nll).credit[2]).toBe(1.5);
    expect(() => prefixCredits('sum' as never, nll)).toThrow(/creditMode/);
  });

  it('refuses a non-finite NLL, naming the index', () => {
    expect(() => adjacentCredits([1, Number.NaN])).toThrow(ValidationError);
    expect(() => bestPrefixCredits([1, Number.POSITIVE_INFINITY])).toThrow(/nll\[1\]/);
    expect(() => adjacentCredits([])).toThrow(/nll/);
  });

  it('gives failed actions credit 0 and keeps the order of the successful ones', () => {
    // actions: ok, failed, ok, ok with successful credits 0.5, -0.25, 1.5
    expect(creditsForActions([true, false, true, true], [0.5, -0.25, 1.5])).toEqual([0.5, 0, -0.25, 1.5]);
    expect(creditsForActions([false, false], [])).toEqual([0, 0]);
    expect(() => creditsForActions([true, false], [1, 2])).toThrow(/one credit per successful action \(1\)/);
  });

  it('clips negative credits to 0 and max-normalises within the trajectory', () => {
    // max(0.5,0)=0.5, 0, max(-0.25,0)=0, 1.5 -> divided by 1.5: 1/3, 0, 0, 1
    const w = creditWeights([0.5, 0, -0.25, 1.5]);
    expect(w[0]).toBeCloseTo(1 / 3, 12);
    expect(w.slice(1)).toEqual([0, 0, 1]);
    expect(creditWeights([-1, -0.5])).toEqual([0, 0]);
    expect(creditWeights([0, 0])).toEqual([0, 0]);
  });

  it('meanTokenNll averages -log p over unmasked tokens', () => {
    // -( -1 + -2 ) / 2 = 1.5; the masked -9 is ignored
    expect(meanTokenNll([-1, -2, -9], [1, 1, 0])).toBe(1.5);
    expect(() => meanTokenNll([-1], [0])).toThrow(/no unmasked token/);
  });
});
