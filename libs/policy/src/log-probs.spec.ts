import * as tf from '@tensorflow/tfjs';
import { ValidationError } from '@srpo/core';
import { packPairs, tokenLogProbs } from './log-probs';
import { nativeBackend, TINY } from './test/fixtures';
import { createTransformer, type TransformerModel } from './transformer';

describe('tokenLogProbs', () => {
  let model: TransformerModel;
  beforeAll(async () => {
    await nativeBackend();
    model = createTransformer(TINY, 31);
  });
  afterAll(() => model.dispose());

  /** Direct computation for one pair: log softmax of the logits at each predicting position. */
  async function direct(context: number[], response: number[], temperature = 1): Promise<number[]> {
    const seq = [...context, ...response];
    const logits = model.logits2d(tf.tensor2d([seq.slice(0, -1)], [1, seq.length - 1], 'int32'), temperature);
    const lsm = await tf.logSoftmax(logits).array();
    tf.dispose(logits);
    return response.map((tok, j) => lsm[context.length + j - 1][tok]);
  }

  it('returns [M, T] padded log-probs and mask, with masked and padded entries at 0', async () => {
    const pairs = [
      { contextTokens: [1, 2, 3], responseTokens: [4, 5, 6, 7], mask: [1, 0, 1, 1] },
      { contextTokens: [9], responseTokens: [8, 2] },
    ];
    const { logProbs, mask } = tokenLogProbs(model, pairs, { temperature: 0.8 });
    expect(logProbs.shape).toEqual([2, 4]);
    expect(mask.shape).toEqual([2, 4]);
    const lp = await logProbs.array();
    expect(Array.from(await mask.data())).toEqual([1, 0, 1, 1, 1, 1, 0, 0]);
    const d0 = await direct([1, 2, 3], [4, 5, 6, 7], 0.8);
    const d1 = await direct([9], [8, 2], 0.8);
    expect(Math.abs(lp[0][1])).toBe(0); // masked: ±0
    [0, 2, 3].forEach((j) => expect(lp[0][j]).toBeCloseTo(d0[j], 5));
    expect(lp[1][0]).toBeCloseTo(d1[0], 5);
    expect(lp[1][1]).toBeCloseTo(d1[1], 5);
    expect(lp[1].slice(2).map(Math.abs)).toEqual([0, 0]);
    tf.dispose([logProbs, mask]);
  });

  it('keeps the response whole and left-truncates the context to fit maxSeqLen', async () => {
    const context = Array.from({ length: 20 }, (_, i) => (i * 7) % TINY.vocabSize);
    const response = [3, 1, 4, 1, 5];
    const keep = TINY.maxSeqLen + 1 - response.length;
    const packed = packPairs([{ contextTokens: context, responseTokens: response }], model);
    expect(packed.contextKept).toEqual([keep]);
    expect(packed.inputLength).toBe(TINY.maxSeqLen);
    const { logProbs, mask } = tokenLogProbs(model, [{ contextTokens: context, responseTokens: response }]);
    const expected = await direct(context.slice(context.length - keep), response);
    Array.from(await logProbs.data()).forEach((v, j) => expect(v).toBeCloseTo(expected[j], 5));
    tf.dispose([logProbs, mask]);
  });

  it('does not depend on the other rows of the batch', async () => {
    const pair = { contextTokens: [2, 3], responseTokens: [4, 5, 6] };
    const alone = tokenLogProbs(model, [pair]);
    const batched = tokenLogProbs(model, [{ contextTokens: [1, 1, 1, 1, 1, 1, 1], responseTokens: [2, 2, 2, 2, 2, 2] }, pair]);
    const a = Array.from(await alone.logProbs.data());
    const b = (await batched.logProbs.array())[1].slice(0, 3);
    a.forEach((v, j) => expect(Math.abs(v - b[j])).toBeLessThan(1e-5));
    tf.dispose([alone.logProbs, alone.mask, batched.logProbs, batched.mask]);
  });

  it('refuses bad pairs and names the field', () => {
    expect(() => tokenLogProbs(model, [])).toThrow(/pairs: must contain/);
    expect(() => tokenLogProbs(model, [{ contextTokens: [], responseTokens: [1] }])).toThrow(/pairs\[0\].contextTokens/);
    expect(() => tokenLogProbs(model, [{ contextTokens: [1], responseTokens: [] }])).toThrow(/pairs\[0\].responseTokens/);
    expect(() => tokenLogProbs(model, [{ contextTokens: [1], responseTokens: new Array(TINY.maxSeqLen + 1).fill(0) }])).toThrow(
      /exceeds the model context length/,
    );
    expect(() => tokenLogProbs(model, [{ contextTokens: [1], responseTokens: [99] }])).toThrow(/pairs\[0\].responseTokens\[0\]/);
    expect(() => tokenLogProbs(model, [{ contextTokens: [1], responseTokens: [1, 2], mask: [1] }])).toThrow(/pairs\[0\].mask/);
    expect(() => tokenLogProbs(model, [{ contextTokens: [1], responseTokens: [1, 2], mask: [1, 2] }])).toThrow(ValidationError);
    expect(() => tokenLogProbs(model, [{ contextTokens: [1], responseTokens: [1] }], { temperature: -1 })).toThrow(/temperature/);
  });
});
