import { Tok } from './tokenizer';
import { decodeRouting, idealRouting, routerReward } from './routing';

const s = { modulus: 4, workers: 3, reverseLength: 1, formatBonus: 0.1, blankProbability: 0.5 };

describe('routing', () => {
  it('selects the slots the router said YES to, in slot order; K is their number', () => {
    expect(decodeRouting([Tok.YES, Tok.NO, Tok.YES], 3)).toEqual({ selected: [0, 2], fallback: false });
    expect(decodeRouting([Tok.NO, Tok.YES, Tok.NO], 3)).toEqual({ selected: [1], fallback: false });
    expect(decodeRouting([Tok.YES, Tok.YES, Tok.YES], 3).selected).toHaveLength(3);
  });

  it('a router that selects nobody sends worker 0, flagged, because a set needs K >= 1', () => {
    expect(decodeRouting([Tok.NO, Tok.NO, Tok.BLANK], 3)).toEqual({ selected: [0], fallback: true });
  });

  it('needs one token per worker', () => {
    expect(() => decodeRouting([Tok.YES], 3)).toThrow(/router.tokens/);
  });

  it('the ideal decision is YES for every non-empty slot', () => {
    expect(idealRouting({ slots: [2, null, 0] })).toEqual([Tok.YES, Tok.NO, Tok.YES]);
  });

  it('rewards the share of slots decided right, with the format bonus for a wrong YES/NO', () => {
    const t = { slots: [2, null, 0] };
    expect(routerReward(t, [Tok.YES, Tok.NO, Tok.YES], s)).toEqual({ reward: 1, correct: true });
    // second slot wrong (YES for an empty slot): (1 + 0.1 + 1) / 3
    expect(routerReward(t, [Tok.YES, Tok.YES, Tok.YES], s).reward).toBeCloseTo(2.1 / 3, 12);
    // a digit instead of YES/NO earns nothing for that slot: (0 + 1 + 1) / 3
    expect(routerReward(t, [Tok.DIGIT0, Tok.NO, Tok.YES], s)).toEqual({ reward: 2 / 3, correct: false });
  });
});
