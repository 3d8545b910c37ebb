import { compareSides, formatReport, type Row, type SideResult } from './smollm2-report';

const side = (tokensPerSecond: number, over: Partial<SideResult> = {}): SideResult => ({
  side: 's',
  steps: 1,
  msPerStep: 1000,
  firstStepMs: 1000,
  tokensPerStep: tokensPerSecond,
  tokensPerSecond,
  firstLoss: -0.5,
  firstGradNorm: 2,
  lastLoss: -0.6,
  lastGradNorm: 1,
  rssAfterLoadBytes: 2 ** 30,
  peakRssBytes: 2 * 2 ** 30,
  parameters: 460800,
  ...over,
});

describe('smollm2 bench report', () => {
  const rows: Row[] = [
    // Rounds 90, 100, 120 tokens/s: median 100, best 120.
    { mode: 'lora', side: 'tfjs-tensorflow', results: [side(100), side(90), side(120)] },
    { mode: 'lora', side: 'pytorch-eager+peft', results: [side(80, { firstLoss: -0.5001, firstGradNorm: 2.002, peakRssBytes: 2 ** 30 }), side(60), side(100)] },
  ];

  it('compares the tfjs median with each PyTorch side, by hand: speed, memory, agreement', () => {
    const c = compareSides(rows, ['lora']);
    expect(Object.keys(c)).toEqual(['lora: tfjs / pytorch-eager+peft']);
    const q = c['lora: tfjs / pytorch-eager+peft'];
    expect(q.medianTokensPerSecond).toBeCloseTo(100 / 80, 12);
    expect(q.bestTokensPerSecond).toBeCloseTo(120 / 100, 12);
    expect(q.peakRss).toBeCloseTo(2, 12);
    expect(q.firstLossDiff).toBeCloseTo(1e-4, 12);
    expect(q.firstGradNormRelDiff).toBeCloseTo(0.002 / 2.002, 12);
    expect(q.lastLossDiff).toBe(0);
  });

  it('prints one row per side and notes a mode whose last step is all clipped', () => {
    const clipped: Row[] = [
      { ...rows[0], mode: 'full', results: [side(100, { lastGradNorm: 0 })] },
      { ...rows[1], mode: 'full', side: 'pytorch-eager' },
    ];
    const lines = formatReport(
      'h',
      'm',
      { rounds: 3, steps: 1, warmup: 2, modes: ['lora', 'full'] },
      [...rows, ...clipped],
      compareSides([...rows, ...clipped], ['lora', 'full']),
    );
    expect(lines.filter((l) => /^(lora|full) {2}/.test(l))).toHaveLength(4);
    expect(lines).toContainEqual(expect.stringMatching(/^lora: tfjs \/ pytorch-eager\+peft tokens\/s: median 1\.25x, best 1\.20x/));
    expect(lines.filter((l) => l.startsWith('note:'))).toEqual([expect.stringMatching(/^note: full: every set is clipped.*--lr-full/)]);
  });
});
