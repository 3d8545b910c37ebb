import * as path from 'path';
import * as tf from '@tensorflow/tfjs';
import { repoRoot } from '@srpo/core';
import { CACHED_MASK_MAX_LENGTH } from '@srpo/policy';
import { nativeBackend } from './test/fixtures';
import { loadHfModel } from './hf-model-dir';
import type { LlamaModel } from './llama-model';

const FIXTURE = path.join(repoRoot(), 'libs', 'hf', 'fixtures', 'llama');

describe('LlamaModel across many sequence lengths', () => {
  let model: LlamaModel;

  beforeAll(async () => {
    await nativeBackend();
    model = loadHfModel(FIXTURE).model;
  });

  afterAll(() => model.dispose());

  const logits = (t: number, rows?: number[]) =>
    tf.tidy(() =>
      model.logits2d(
        tf.tensor2d(
          Array.from({ length: t }, (_, i) => (i * 7) % 400),
          [1, t],
          'int32',
        ),
        1,
        rows ? tf.tensor1d(rows, 'int32') : undefined,
      ),
    );

  it('keeps RoPE tables for powers of two only and masks for short lengths only, whatever lengths it runs', () => {
    const before = tf.memory().numTensors;
    for (let t = 1; t <= 200; t++) logits(t).dispose();
    // A cache per length held 3 RoPE tables and a mask for each of the 200 lengths (800 tensors, growing).
    expect(model.cachedRopeLengths.sort((a, b) => a - b)).toEqual([1, 2, 4, 8, 16, 32, 64, 128, 256]);
    expect(tf.memory().numTensors - before).toBe(9 * 3 + CACHED_MASK_MAX_LENGTH);
    for (let t = 1; t <= 200; t++) logits(t).dispose();
    expect(tf.memory().numTensors - before).toBe(9 * 3 + CACHED_MASK_MAX_LENGTH);
  });

  it('gives the same logits for a prefix whether its tables are cached or sliced', async () => {
    // Length 5 runs on a slice of the length-8 tables; its row 4 must equal the same row computed at
    // length 8 (causal: later tokens do not change earlier rows).
    const seq = [3, 17, 250, 9, 41, 77, 5, 120];
    const at = (t: number) => tf.tidy(() => model.logits2d(tf.tensor2d(seq.slice(0, t), [1, t], 'int32'), 1, tf.tensor1d([4], 'int32')));
    const [short, long] = [at(5), at(8)];
    const [a, b] = [(await short.data()) as Float32Array, (await long.data()) as Float32Array];
    tf.dispose([short, long]);
    let worst = 0;
    for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(a[i] - b[i]));
    expect(worst).toBeLessThan(1e-4);
  });
});
