import * as tf from '@tensorflow/tfjs';
import { ValidationError } from '@srpo/core';
import { tokenLogProbs } from './log-probs';
import { SeededRng } from './rng';
import { sample, sampleBatch } from './sampler';
import { nativeBackend, TINY } from './test/fixtures';
import { createTransformer, type TransformerModel } from './transformer';

describe('sampler', () => {
  let model: TransformerModel;
  beforeAll(async () => {
    await nativeBackend();
    model = createTransformer(TINY, 21);
  });
  afterAll(() => model.dispose());

  it('is reproducible for a seed and differs across seeds', async () => {
    const opts = { maxNewTokens: 10, temperature: 1.3 };
    const a = await sampleBatch(model, [[1, 2, 3], [4]], { ...opts, seed: 5 });
    const b = await sampleBatch(model, [[1, 2, 3], [4]], { ...opts, seed: 5 });
    const c = await sampleBatch(model, [[1, 2, 3], [4]], { ...opts, seed: 6 });
    expect(a).toEqual(b);
    expect(a.map((r) => r.tokens)).not.toEqual(c.map((r) => r.tokens));
    expect(a[0].tokens).toHaveLength(10);
    expect(a[0].stopReason).toBe('max-new-tokens');
  });

  it('returns behaviour log-probs equal to tokenLogProbs at the same temperature (with and without top-k)', async () => {
    for (const [temperature, topK] of [
      [1, 0],
      [0.6, 0],
      [1.5, 4],
    ] as const) {
      const results = await sampleBatch(model, [[3, 1, 4, 1, 5], [9]], { seed: 11, maxNewTokens: 8, temperature, topK });
      const { logProbs, mask } = tokenLogProbs(
        model,
        results.map((r) => ({ contextTokens: r.contextTokens, responseTokens: r.tokens })),
        { temperature },
      );
      const rows = await logProbs.array();
      results.forEach((r, i) => {
        r.logProbs.forEach((lp, j) => expect(Math.abs(lp - rows[i][j])).toBeLessThan(1e-5));
        r.logProbs.forEach((lp) => expect(lp).toBeLessThanOrEqual(0));
      });
      tf.dispose([logProbs, mask]);
    }
  });

  it('reports full-softmax log-probs even when top-k truncates, and only draws from the top k', async () => {
    const [r] = await sampleBatch(model, [[2, 7]], { seed: 3, maxNewTokens: 12, topK: 2 });
    const [full] = await sampleBatch(model, [[2, 7]], { seed: 3, maxNewTokens: 1 });
    // With k = 2 each drawn token has probability >= the second largest; its full-softmax log-prob is < 0.
    expect(r.logProbs.every((lp) => lp < 0)).toBe(true);
    const logits = model.logits2d(tf.tensor2d([[2, 7]], [1, 2], 'int32'));
    const lsm = Array.from(await tf.logSoftmax(logits.slice([1, 0], [1, -1])).data());
    const top2 = [...lsm.keys()].sort((a, b) => lsm[b] - lsm[a]).slice(0, 2);
    expect(top2).toContain(r.tokens[0]);
    expect(r.logProbs[0]).toBeCloseTo(lsm[r.tokens[0]], 5);
    expect(full.logProbs[0]).toBeCloseTo(lsm[full.tokens[0]], 5);
    tf.dispose(logits);
  });

  it('top-k = 1 is greedy decoding', async () => {
    const a = await sample(model, [5, 6], { seed: 1, maxNewTokens: 6, topK: 1 });
    const b = await sample(model, [5, 6], { seed: 999, maxNewTokens: 6, topK: 1 });
    expect(a.tokens).toEqual(b.tokens);
  });

  it('stops after a stop token and includes it', async () => {
    const free = await sample(model, [1], { seed: 4, maxNewTokens: 12 });
    const stop = free.tokens[3];
    const first = free.tokens.indexOf(stop);
    const r = await sample(model, [1], { seed: 4, maxNewTokens: 12, stopTokens: [stop] });
    expect(r.stopReason).toBe('stop-token');
    expect(r.tokens).toEqual(free.tokens.slice(0, first + 1));
    expect(r.logProbs).toHaveLength(r.tokens.length);
  });

  it('shares a caller RNG and advances it', async () => {
    const rng = new SeededRng(8);
    const a = await sample(model, [2], { rng, maxNewTokens: 5 });
    const b = await sample(model, [2], { rng, maxNewTokens: 5 });
    const fresh = await sample(model, [2], { seed: 8, maxNewTokens: 5 });
    expect(a.tokens).toEqual(fresh.tokens);
    expect(b.tokens).not.toEqual(a.tokens);
  });

  it('left-truncates a long context so context + maxNewTokens fits, and says so', async () => {
    const ctx = Array.from({ length: 30 }, (_, i) => i % TINY.vocabSize);
    const r = await sample(model, ctx, { seed: 2, maxNewTokens: 4 });
    expect(r.contextTokens).toEqual(ctx.slice(ctx.length - (TINY.maxSeqLen + 1 - 4)));
    const { logProbs, mask } = tokenLogProbs(model, [{ contextTokens: r.contextTokens, responseTokens: r.tokens }]);
    const row = (await logProbs.array())[0];
    r.logProbs.forEach((lp, j) => expect(Math.abs(lp - row[j])).toBeLessThan(1e-5));
    tf.dispose([logProbs, mask]);
  });

  it('validates its options and names the field', async () => {
    await expect(sample(model, [1], { maxNewTokens: 3 })).rejects.toThrow(/options.seed/);
    await expect(sample(model, [1], { seed: 1, maxNewTokens: 0 })).rejects.toThrow(/options.maxNewTokens/);
    await expect(sample(model, [1], { seed: 1, maxNewTokens: TINY.maxSeqLen + 1 })).rejects.toThrow(/options.maxNewTokens/);
    await expect(sample(model, [1], { seed: 1, maxNewTokens: 2, temperature: 0 })).rejects.toThrow(/options.temperature/);
    await expect(sample(model, [1], { seed: 1, maxNewTokens: 2, topK: -1 })).rejects.toThrow(/options.topK/);
    await expect(sample(model, [TINY.vocabSize], { seed: 1, maxNewTokens: 2 })).rejects.toThrow(ValidationError);
    await expect(sample(model, [], { seed: 1, maxNewTokens: 2 })).rejects.toThrow(/contexts\[0\]/);
  });

  it('leaves no tensors behind', async () => {
    await sample(model, [1, 2], { seed: 1, maxNewTokens: 3 });
    const before = tf.memory().numTensors;
    await sampleBatch(model, [[1, 2], [3]], { seed: 2, maxNewTokens: 6, topK: 3 });
    expect(tf.memory().numTensors).toBe(before);
  });
});
