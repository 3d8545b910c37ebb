import * as tf from '@tensorflow/tfjs';
import { initTfBackend } from '@srpo/core';
import { Policy, tokenLogProbs, weightsHash, type TransformerConfig } from '@srpo/policy';
import { CreditWeightedSftTrainer, trainWeighted, weightedNll } from './credit-weighted-sft';

const TINY: TransformerConfig = { vocabSize: 16, dModel: 16, nLayers: 2, nHeads: 2, maxSeqLen: 16 };

/** Mean per-token NLL of an example's response under the policy's current weights. */
async function meanNll(policy: Policy, example: { contextTokens: number[]; responseTokens: number[] }): Promise<number> {
  const { logProbs, mask } = tokenLogProbs(policy.model, [example]);
  const v = -(await logProbs.sum().data())[0] / example.responseTokens.length;
  tf.dispose([logProbs, mask]);
  return v;
}

describe('credit-weighted SFT', () => {
  beforeAll(async () => {
    await initTfBackend('tensorflow');
  });

  it('weightedNll = -(1/M) sum_i w_i mean_t log p', async () => {
    // example 1: mean(-1, -3) = -2, w = 1; example 2: mean(-2) = -2 (second token padded), w = 0.5
    // loss = -(1*-2 + 0.5*-2) / 2 = 1.5
    const loss = weightedNll(
      tf.tensor2d([
        [-1, -3],
        [-2, 0],
      ]),
      tf.tensor2d([
        [1, 1],
        [1, 0],
      ]),
      tf.tensor1d([1, 0.5]),
    );
    expect((await loss.data())[0]).toBeCloseTo(1.5, 6);
    loss.dispose();
  });

  it('an example of weight 0 does not move the weights; weight 1 lowers its NLL', async () => {
    const policy = Policy.create('p', TINY, 7);
    const trainer = new CreditWeightedSftTrainer(policy, { lr: 1e-2 });
    const example = { contextTokens: [0, 3, 1], responseTokens: [5, 6], weight: 0 };
    const before = await weightsHash(policy);
    await trainer.step([example]);
    expect(await weightsHash(policy)).toBe(before);

    const nll = () => meanNll(policy, example);
    const start = await nll();
    for (let i = 0; i < 10; i++) await trainer.step([{ ...example, weight: 1 }]);
    expect(await nll()).toBeLessThan(start - 0.5);
    trainer.dispose();
    policy.dispose();
  });

  it('runs a fixed budget over the examples with positive weight and refuses when there are none', async () => {
    const policy = Policy.create('p', TINY, 8);
    const trainer = new CreditWeightedSftTrainer(policy);
    const examples = [
      { contextTokens: [0], responseTokens: [2], weight: 1 },
      { contextTokens: [0], responseTokens: [3], weight: 0.5 },
      { contextTokens: [0], responseTokens: [4], weight: 0 },
    ];
    const seen: number[] = [];
    const r = await trainWeighted(trainer, examples, { steps: 3, batchSize: 2, seed: 1 }, (d) => seen.push(d));
    expect(r.steps).toBe(3);
    expect(r.examples).toBe(2);
    expect(seen).toEqual([1, 2, 3]);
    await expect(trainWeighted(trainer, [examples[2]], { steps: 1, batchSize: 1, seed: 1 })).rejects.toThrow(/no example has a weight other than 0/);
    await expect(trainer.step([{ ...examples[0], weight: 2 }])).rejects.toThrow(/batch\[0\]\.weight: must be in \[0, 1\], got 2/);
    await expect(trainer.step([{ ...examples[0], weight: -0.5 }])).rejects.toThrow(/batch\[0\]\.weight/);
    trainer.dispose();
    policy.dispose();
  });

  it('signed weights: a negative weight raises the NLL of its example; non-finite ones are refused', async () => {
    const policy = Policy.create('p', TINY, 9);
    const trainer = new CreditWeightedSftTrainer(policy, { lr: 1e-2, signedWeights: true });
    const example = { contextTokens: [0, 3, 1], responseTokens: [5, 6], weight: -1 };
    const nll = () => meanNll(policy, example);
    const start = await nll();
    for (let i = 0; i < 10; i++) await trainer.step([example]);
    expect(await nll()).toBeGreaterThan(start + 0.5);
    await expect(trainer.step([{ ...example, weight: Number.NaN }])).rejects.toThrow(/batch\[0\]\.weight: must be a finite number, got NaN/);
    // trainWeighted draws negative-weight examples too (only weight 0 is left out).
    const r = await trainWeighted(trainer, [example, { ...example, weight: 0 }], { steps: 1, batchSize: 2, seed: 1 });
    expect(r.examples).toBe(1);
    trainer.dispose();
    policy.dispose();
  });
});
