import * as path from 'path';
import { initTfBackend, repoRoot } from '@srpo/core';
import { Policy, PolicyRegistry, tokenLogProbs } from '@srpo/policy';
import { hfDirectoryHash, loadHfModel } from '@srpo/hf';
import { policyShapeProblem, requiredSeqLen } from './policy-shape';
import { DEFAULT_ARITHMETIC } from './envs/arithmetic.env';
import { checkpointDirOf } from '@srpo/serving';
import { PolicySampler } from './policy-sampler';
import { VOCAB_SIZE } from './tokenizer';

const MODEL = { vocabSize: VOCAB_SIZE, dModel: 8, nLayers: 1, nHeads: 2, maxSeqLen: 16 };

describe('policy sampler', () => {
  const registry = new PolicyRegistry();
  // The agents sample on native TensorFlow, like every app.
  beforeAll(async () => {
    await initTfBackend('tensorflow');
  });
  afterAll(() => registry.dispose());

  it('stamps each draw with the policy and version the role uses, and behaviour log-probs the learner recomputes', async () => {
    registry.add(new Policy('actor', Policy.create('actor', MODEL, 3).model, 7));
    registry.assignRole('worker', 'actor');
    const sampler = new PolicySampler(registry, { seed: 1, temperature: 1 });
    const contexts = [
      [0, 15, 19, 3, 1],
      [0, 15, 20, 12, 1],
    ];
    const draws = await sampler.sample('worker', contexts, 2);
    expect(draws).toHaveLength(2);
    for (const [i, d] of draws.entries()) {
      expect([d.policyId, d.policyVersion, d.temperature, d.maxNewTokens]).toEqual(['actor', 7, 1, 2]);
      expect(d.contextTokens).toEqual(contexts[i]);
      expect(d.tokens).toHaveLength(2);
      expect(d.logProbs.every((lp) => lp <= 0 && Number.isFinite(lp))).toBe(true);
      const { logProbs, mask } = tokenLogProbs(registry.get('actor').model, [{ contextTokens: d.contextTokens, responseTokens: d.tokens }], { temperature: 1 });
      const again = Array.from(await logProbs.data()).slice(0, 2);
      logProbs.dispose();
      mask.dispose();
      again.forEach((lp, j) => expect(lp).toBeCloseTo(d.logProbs[j], 4));
    }
  });

  it('is reproducible for a seed', async () => {
    const a = await new PolicySampler(registry, { seed: 5, temperature: 1 }).sample('worker', [[0, 15, 19, 3, 1]], 3);
    const b = await new PolicySampler(registry, { seed: 5, temperature: 1 }).sample('worker', [[0, 15, 19, 3, 1]], 3);
    expect(a[0].tokens).toEqual(b[0].tokens);
  });

  it('refuses a non-positive temperature', () => {
    expect(() => new PolicySampler(registry, { seed: 1, temperature: 0 })).toThrow(/temperature/);
  });
});

describe('agents helpers', () => {
  it('sizes the model context the workflows need', () => {
    const search = { modulus: 4, docs: 4, turns: 3 };
    expect(requiredSeqLen({ workflows: ['fixed', 'joint', 'routed'], arithmetic: DEFAULT_ARITHMETIC, search })).toBe(6);
    expect(requiredSeqLen({ workflows: ['search'], arithmetic: DEFAULT_ARITHMETIC, search })).toBe(10);
  });

  it('reads checkpoint locations from file:// URIs or paths, and refuses other schemes', () => {
    expect(checkpointDirOf('file:///tmp/ck/actor/v3')).toBe('/tmp/ck/actor/v3');
    expect(checkpointDirOf('/tmp/ck/actor/v3')).toBe('/tmp/ck/actor/v3');
    expect(() => checkpointDirOf('s3://bucket/actor/v3')).toThrow(/only file:\/\//);
  });

  it('refuses policies the workflows cannot sample with: too short, too small a vocabulary, or the wrong kind of model for SRPO_MODEL_DIR', () => {
    const qwen2 = path.join(repoRoot(), 'libs', 'hf', 'fixtures', 'qwen2');
    const base = { dir: qwen2, hash: hfDirectoryHash(qwen2) };
    const small = Policy.create('p', MODEL, 1);
    const hf = new Policy('h', loadHfModel(qwen2).model, 0);
    try {
      expect(policyShapeProblem(small, 6, undefined)).toBeUndefined();
      expect(policyShapeProblem(small, 17, undefined)).toMatch(/accepts 16 positions; the agents' workflows need 17/);
      const tiny = Policy.create('t', { ...MODEL, vocabSize: 20 }, 1);
      expect(policyShapeProblem(tiny, 6, undefined)).toMatch(/vocabSize 20 is below the workflows' 32 symbols/);
      tiny.dispose();
      expect(policyShapeProblem(small, 6, base)).toMatch(/project's transformer, but the agents' SRPO_MODEL_DIR names/);
      expect(policyShapeProblem(hf, 6, undefined)).toMatch(/Hugging Face model on .*qwen2; set the agents' SRPO_MODEL_DIR/);
      expect(policyShapeProblem(hf, 6, base)).toBeUndefined();
      expect(policyShapeProblem(hf, 6, { dir: '/other', hash: 'ab' })).toMatch(/is not the agents' SRPO_MODEL_DIR \/other \(hash ab\)/);
    } finally {
      small.dispose();
      hf.dispose();
    }
  });
});
