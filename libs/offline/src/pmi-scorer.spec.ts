import * as tf from '@tensorflow/tfjs';
import { initTfBackend } from '@srpo/core';
import { Policy, type TransformerConfig } from '@srpo/policy';
import { InstructionScorer } from './pmi-scorer';
import { PolicyTaskInferrer } from './task-inferrer';

const TINY: TransformerConfig = { vocabSize: 16, dModel: 16, nLayers: 2, nHeads: 2, maxSeqLen: 16 };

describe('InstructionScorer', () => {
  let policy: Policy;
  beforeAll(async () => {
    await initTfBackend('tensorflow');
    policy = Policy.create('scorer', TINY, 3);
  });
  afterAll(() => policy.dispose());

  /** -mean_t log softmax(logits)[y_t] straight from the model's logits on context ++ y. */
  async function direct(context: number[], y: number[]): Promise<number> {
    const seq = [...context, ...y];
    const logits = policy.model.logits2d(tf.tensor2d([seq.slice(0, -1)], [1, seq.length - 1], 'int32'), 1);
    const lsm = await tf.logSoftmax(logits).array();
    logits.dispose();
    return -y.reduce((a, tok, j) => a + lsm[context.length + j - 1][tok], 0) / y.length;
  }

  it('L_{-1} conditions on the prefix only, L_k on the prefix and the first k actions', async () => {
    const scorer = new InstructionScorer(policy.model, { prefixTokens: [0] });
    const y = [4, 5, 1];
    const curve = await scorer.nllCurve(y, [[7], [8, 9]]);
    expect(curve).toHaveLength(3);
    expect(curve[0]).toBeCloseTo(await direct([0], y), 4);
    expect(curve[1]).toBeCloseTo(await direct([0, 7], y), 4);
    expect(curve[2]).toBeCloseTo(await direct([0, 7, 8, 9], y), 4);
  });

  it('refuses an empty instruction', async () => {
    await expect(new InstructionScorer(policy.model).nllCurve([], [])).rejects.toThrow(/instruction/);
  });
});

describe('PolicyTaskInferrer', () => {
  it('generates the instruction from the successful actions, repeatably per episode', async () => {
    await initTfBackend('tensorflow');
    const policy = Policy.create('writer', TINY, 5);
    const inferrer = new PolicyTaskInferrer(policy, { maxTokens: 3, seed: 9 });
    const at = { topic: 't', partition: 0, offset: 0 };
    const a = {
      outputId: 'o',
      step: 0,
      role: 'solver',
      agentId: 's',
      policyId: 'p',
      contextTokens: [0, 2],
      responseTokens: [3, 4],
      successful: true,
      source: at,
      transitionSource: at,
    };
    const t = { episodeId: 'e1', taskId: 'x', positions: ['solve'], actions: [a], outcome: { success: true, reward: 1, source: at }, sources: [] };
    const first = await inferrer.infer(t);
    expect(first?.tokens).toHaveLength(3);
    expect(first?.tokens.every((tok) => tok >= 0 && tok < 16)).toBe(true);
    expect(await inferrer.infer(t)).toEqual(first);
    expect(inferrer.name).toBe('policy:writer@v0');
    expect(inferrer.trainingContext(first as NonNullable<typeof first>, a)).toEqual([...(first?.tokens ?? []), 0, 2]);
    expect(await inferrer.infer({ ...t, actions: [] })).toBeNull();
    policy.dispose();
  });
});
