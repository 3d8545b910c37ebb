import { microBatchRows } from './micro-batch';

describe('microBatchRows', () => {
  it('packs consecutive rows while rows × longest stays within the budget', () => {
    // Worked by hand: [3,3] → 2×3 = 6 ≤ 8; adding 5 → 3×5 = 15 > 8; [5] alone; [5,2] → 10 > 8; [2,2,2] → 6; [2,2,2,2] = 8.
    expect(microBatchRows([3, 3, 5, 2, 2, 2, 2], 8)).toEqual([[0, 1], [2], [3, 4, 5, 6]]);
    expect(microBatchRows([20, 1], 8)).toEqual([[0], [1]]);
    expect(() => microBatchRows([1], 0)).toThrow(/microBatchTokens: must be a positive integer/);
  });
});

// The micro-batched update on the Hugging Face fixtures: libs/hf/src/hf-micro-batch.spec.ts.
