import { ropeInverseFrequencies, ropeTables } from './rope';

// Expected values worked by hand: head_dim 8, θ = 10⁴ gives inv_freq = 10^(−i/2·… ) = [1, 0.1, 0.01, 0.001].
describe('ropeInverseFrequencies', () => {
  const close = (got: Float32Array, want: number[]): void => {
    expect(got.length).toBe(want.length);
    want.forEach((w, i) => expect(Math.abs(got[i] - w)).toBeLessThanOrEqual(1e-6 * Math.abs(w) + 1e-12));
  };

  it('default: 1 / θ^(2i/d)', () => {
    close(ropeInverseFrequencies(8, 10000, { type: 'none' }), [1, 0.1, 0.01, 0.001]);
  });

  it('linear: every frequency divided by the factor', () => {
    close(ropeInverseFrequencies(8, 10000, { type: 'linear', factor: 2 }), [0.5, 0.05, 0.005, 0.0005]);
  });

  it('llama3: high band kept, low band divided by the factor, the middle band interpolated', () => {
    // L = 64, low = 1, high = 4, factor 8: wavelengths 2π/f = 6.28 (< 16: kept), 62.8 (between 16 and 64:
    // s = (64/62.832 − 1)/3 = 0.00619721, (1 − s)·0.1/8 + s·0.1 = 0.01304226), 628 and 6283 (> 64: / 8).
    const got = ropeInverseFrequencies(8, 10000, { type: 'llama3', factor: 8, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPositionEmbeddings: 64 });
    close(got, [1, 0.01304226, 0.00125, 0.000125]);
  });
});

describe('ropeTables', () => {
  it('rotate-half layout: column j and j + d/2 share the angle pos · inv_freq_j', () => {
    const { cos, sin } = ropeTables({ headDim: 4, ropeTheta: 100, ropeScaling: { type: 'none' } }, 3);
    // inv_freq = [1, 0.1]; position 2 → angles [2, 0.2].
    const row = 2 * 4;
    expect(cos[row]).toBeCloseTo(Math.cos(2), 6);
    expect(cos[row + 2]).toBeCloseTo(Math.cos(2), 6);
    expect(sin[row + 1]).toBeCloseTo(Math.sin(0.2), 6);
    expect(sin[row + 3]).toBeCloseTo(Math.sin(0.2), 6);
    expect([cos[0], sin[0]]).toEqual([1, 0]);
  });
});
