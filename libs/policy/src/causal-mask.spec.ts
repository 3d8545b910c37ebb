import * as tf from '@tensorflow/tfjs';
import { CACHED_MASK_MAX_LENGTH, causalMask, CausalMasks, MASKED_SCORE } from './causal-mask';
import { TransformerModel } from './transformer';
import { nativeBackend, TINY } from './test/fixtures';

/** The mask written out by hand: row i may see columns 0..i. */
function byHand(t: number, repeat: number): number[][] {
  const rows: number[][] = [];
  for (let g = 0; g < repeat; g++) for (let i = 0; i < t; i++) rows.push(Array.from({ length: t }, (_, j) => (j > i ? -1e9 : 0)));
  return rows;
}

describe('causalMask', () => {
  beforeAll(nativeBackend);

  it('is 0 on and below the diagonal and −1e9 above, stacked `repeat` times', async () => {
    for (const [t, repeat] of [
      [1, 1],
      [2, 1],
      [5, 1],
      [3, 3],
      [4, 7],
    ]) {
      const m = causalMask(t, repeat);
      expect(m.shape).toEqual([t * repeat, t]);
      expect(await m.array()).toEqual(byHand(t, repeat));
      m.dispose();
    }
    expect(MASKED_SCORE).toBe(-1e9);
  });

  it('leaves nothing behind but its result', () => {
    const before = tf.memory().numTensors;
    const m = causalMask(9, 3);
    expect(tf.memory().numTensors).toBe(before + 1);
    m.dispose();
    expect(tf.memory().numTensors).toBe(before);
  });
});

describe('CausalMasks', () => {
  beforeAll(nativeBackend);

  it('caches the short lengths only, and gives the same masks as causalMask', async () => {
    const masks = new CausalMasks(2);
    try {
      const before = tf.memory().numTensors;
      for (let t = 1; t <= 100; t++) tf.tidy(() => void masks.get(t));
      expect(masks.cachedLengths).toHaveLength(CACHED_MASK_MAX_LENGTH);
      expect(Math.max(...masks.cachedLengths)).toBe(CACHED_MASK_MAX_LENGTH);
      expect(tf.memory().numTensors - before).toBe(CACHED_MASK_MAX_LENGTH);
      expect(await masks.get(5).array()).toEqual(byHand(5, 2));
      expect(await tf.tidy(() => masks.get(70)).array()).toEqual(byHand(70, 2));
    } finally {
      masks.dispose();
    }
  });
});

describe('TransformerModel keeps a bounded number of tensors across sequence lengths', () => {
  beforeAll(nativeBackend);

  it('runs every length 1..maxSeqLen holding masks for the short lengths only', () => {
    const model = TransformerModel.create({ ...TINY, maxSeqLen: 200 }, 3);
    try {
      const tokens = (t: number) =>
        tf.tensor2d(
          Array.from({ length: t }, (_, i) => i % TINY.vocabSize),
          [1, t],
          'int32',
        );
      const forward = (t: number) => tf.tidy(() => void model.logits2d(tokens(t)));
      forward(1);
      const settled = tf.memory().numTensors;
      for (let t = 1; t <= 200; t++) forward(t);
      // A cache per length kept a [T, T] mask for each of the 200 lengths (2.7 M values); now the first 64 only.
      expect(tf.memory().numTensors - settled).toBe(CACHED_MASK_MAX_LENGTH - 1);
    } finally {
      model.dispose();
    }
  });
});
