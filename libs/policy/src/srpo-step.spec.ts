import * as tf from '@tensorflow/tfjs';
import { ValidationError } from '@srpo/core';
import { weightsHash } from './checkpoint-store';
import { learningRateAt } from './lr-schedule';
import { Policy } from './policy';
import { packMiniBatches, SrpoTrainer, type ActiveSet } from './srpo-step';
import { makeSets, nativeBackend, TINY } from './test/fixtures';

describe('SrpoTrainer', () => {
  beforeAll(nativeBackend);

  it('lowers the SRPO loss on a fixed batch', async () => {
    const policy = Policy.create('p', TINY, 1);
    const trainer = new SrpoTrainer(policy, { schedule: { kind: 'constant', lr: 3e-3 }, epochs: 1 });
    try {
      const sets = await makeSets(policy, 2, 4);
      const first = await trainer.update(sets);
      // logpOld is the policy's own: every set ratio starts at 1 and the loss at −mean(A).
      expect(first.diagnostics['ratio/mean']).toBeCloseTo(1, 4);
      expect(first.loss).toBeCloseTo(-(1 - 1 + 1 - 1) / 4, 4);
      let last = first;
      for (let i = 0; i < 8; i++) last = await trainer.update(sets);
      expect(last.loss).toBeLessThan(first.loss - 0.05);
      expect(last.policyVersion).toBe(9);
      expect(last.optimizerStep).toBe(9);
      expect(first.gradNorm).toBeGreaterThan(0);
      expect(first.diagnostics['grad/norm']).toBe(first.gradNorm);
      expect(first.diagnostics['batch/sets']).toBe(4);
    } finally {
      trainer.dispose();
      policy.dispose();
    }
  });

  it('runs several epochs on one batch, one optimizer step and one version each, following the schedule', async () => {
    const policy = Policy.create('p', TINY, 3);
    const schedule = { kind: 'warmup-cosine' as const, peakLr: 5e-3, warmupSteps: 2, totalSteps: 10 };
    const trainer = new SrpoTrainer(policy, { schedule, epochs: 3 });
    try {
      const r = await trainer.update(await makeSets(policy, 4, 3));
      expect(r.epochs).toHaveLength(3);
      expect(r.epochs.map((e) => e.learningRate)).toEqual([0, 1, 2].map((t) => learningRateAt(schedule, t)));
      expect(r.epochs[2].loss).toBeLessThan(r.epochs[0].loss);
      expect(r.loss).toBe(r.epochs[0].loss);
      expect(r.policyVersion).toBe(3);
      expect(trainer.optimizer.step).toBe(3);
    } finally {
      trainer.dispose();
      policy.dispose();
    }
  });

  it('clips the global gradient norm before Adam sees it', async () => {
    const run = async (maxGradNorm: number): Promise<{ gradNorm: number; mNorm: number }> => {
      const policy = Policy.create('p', TINY, 5);
      const trainer = new SrpoTrainer(policy, { maxGradNorm, adam: { beta1: 0.9 } });
      try {
        const r = await trainer.update(await makeSets(policy, 6, 3));
        const state = await trainer.optimizer.getState();
        let sq = 0;
        for (const m of state.m.values()) for (const x of m) sq += x * x;
        return { gradNorm: r.gradNorm, mNorm: Math.sqrt(sq) };
      } finally {
        trainer.dispose();
        policy.dispose();
      }
    };
    const free = await run(0);
    const clipped = await run(free.gradNorm / 10);
    expect(clipped.gradNorm).toBeCloseTo(free.gradNorm, 4); // reported before clipping
    expect(free.mNorm / 0.1).toBeCloseTo(free.gradNorm, 3); // m₁ = (1 − β₁)·g
    expect(clipped.mNorm / 0.1).toBeCloseTo(free.gradNorm / 10, 3);
  });

  it('is deterministic: same seed and data give the same weights hash after N updates; another seed does not', async () => {
    const train = async (seed: number): Promise<string> => {
      const policy = Policy.create('p', TINY, seed);
      const trainer = new SrpoTrainer(policy, { schedule: { kind: 'constant', lr: 1e-3 } });
      try {
        const data = Policy.create('data', TINY, 100); // the batch comes from a fixed policy, not from `seed`
        const sets = await makeSets(data, 7, 4);
        data.dispose();
        for (let i = 0; i < 5; i++) await trainer.update(sets);
        return await weightsHash(policy);
      } finally {
        trainer.dispose();
        policy.dispose();
      }
    };
    const a = await train(11);
    const b = await train(11);
    const c = await train(12);
    expect(a).toMatch(/^[0-9a-f]{64}$/);
    expect(b).toBe(a);
    expect(c).not.toBe(a);
  });

  it("evaluate: the first epoch's loss and gradient norm, without a step (weights, Adam state and version unchanged)", async () => {
    const policy = Policy.create('p', TINY, 11);
    const trainer = new SrpoTrainer(policy, { maxGradNorm: 1 });
    try {
      const sets = await makeSets(policy, 3, 3);
      const hash = await weightsHash(policy);
      const before = tf.memory().numTensors;
      const e = await trainer.evaluate(sets);
      expect(tf.memory().numTensors).toBe(before);
      expect(await weightsHash(policy)).toBe(hash);
      expect(policy.version).toBe(0);
      expect(trainer.optimizer.step).toBe(0);
      const r = await trainer.update(sets);
      expect(e.loss).toBe(r.loss);
      expect(e.gradNorm).toBeCloseTo(r.gradNorm, 5);
      // A set whose gradient overflows float32's squared norm shows up alone (no dual clip, log-ratio just under 44.36).
      const hot: ActiveSet = {
        ...sets[0],
        advantage: -1,
        members: [{ ...sets[0].members[0], logpOld: sets[0].members[0].logpOld.map((x) => x - 44.1 / sets[0].members[0].logpOld.length) }],
      };
      const noDual = new SrpoTrainer(policy, { objective: { dualClip: false } });
      try {
        const bad = await noDual.evaluate([hot]);
        expect(Number.isFinite(bad.loss)).toBe(true);
        expect(Number.isFinite(bad.gradNorm)).toBe(false);
        expect(Number.isFinite((await noDual.evaluate([sets[1]])).gradNorm)).toBe(true);
      } finally {
        noDual.dispose();
      }
    } finally {
      trainer.dispose();
      policy.dispose();
    }
  });

  it('does not leak tensors over 100 steps', async () => {
    const policy = Policy.create('p', TINY, 8);
    const trainer = new SrpoTrainer(policy, { schedule: { kind: 'constant', lr: 1e-4 }, epochs: 1 });
    try {
      const sets = await makeSets(policy, 9, 3);
      await trainer.update(sets); // first call creates the cached causal mask and q scale
      const before = tf.memory().numTensors;
      for (let i = 0; i < 100; i++) await trainer.update(sets);
      expect(tf.memory().numTensors).toBe(before);
    } finally {
      trainer.dispose();
      policy.dispose();
    }
  });

  it('refuses malformed sets before touching the weights', async () => {
    const policy = Policy.create('p', TINY, 10);
    const trainer = new SrpoTrainer(policy);
    try {
      const sets = await makeSets(policy, 11, 2);
      const hash = await weightsHash(policy);
      const tensors = tf.memory().numTensors;
      const edit = (f: (m: { logpOld: number[]; responseTokens: number[]; mask?: number[] }[][]) => void): ActiveSet[] => {
        const copy = structuredClone(sets) as unknown as { members: { logpOld: number[]; responseTokens: number[]; mask?: number[] }[] }[];
        f(copy.map((s) => s.members));
        return copy as unknown as ActiveSet[];
      };
      const badLen = edit((m) => m[1][0].logpOld.pop());
      await expect(trainer.update(badLen)).rejects.toThrow(/sets\[1\].members\[0\].logpOld/);
      const badMask = edit((m) => (m[0][0].mask = m[0][0].responseTokens.map(() => 0)));
      await expect(trainer.update(badMask)).rejects.toThrow(ValidationError);
      const badToken = edit((m) => (m[1][1].responseTokens[0] = TINY.vocabSize));
      await expect(trainer.update(badToken)).rejects.toThrow(/sets\[1\].members\[1\].responseTokens\[0\]/);
      await expect(trainer.update([])).rejects.toThrow(/sets/);
      expect(await weightsHash(policy)).toBe(hash);
      expect(policy.version).toBe(0);
      expect(tf.memory().numTensors).toBe(tensors);
    } finally {
      trainer.dispose();
      policy.dispose();
    }
  });

  it('validates its config', () => {
    const policy = Policy.create('p', TINY, 12);
    try {
      expect(() => new SrpoTrainer(policy, { epochs: 0 })).toThrow(/config.epochs/);
      expect(() => new SrpoTrainer(policy, { temperature: 0 })).toThrow(/config.temperature/);
      expect(() => new SrpoTrainer(policy, { maxGradNorm: -1 })).toThrow(/config.maxGradNorm/);
      expect(() => new SrpoTrainer(policy, { objective: { clipLow: 2 } })).toThrow(/clipLow/);
      expect(() => new SrpoTrainer(policy, { adam: { beta1: 1 } })).toThrow(/adam.beta1/);
    } finally {
      policy.dispose();
    }
  });
});

describe('packMiniBatches', () => {
  it('never splits a set and keeps the order', () => {
    const sets = [3, 1, 4, 1, 5, 2].map((k, i) => ({ id: i, members: new Array(k).fill(0) }));
    const batches = packMiniBatches(sets, 5);
    expect(batches.map((b) => b.map((s) => s.id))).toEqual([[0, 1], [2, 3], [4], [5]]);
    expect(batches.flat().map((s) => s.id)).toEqual([0, 1, 2, 3, 4, 5]);
    for (const b of batches) expect(b.reduce((a, s) => a + s.members.length, 0) <= 5 || b.length === 1).toBe(true);
    expect(() => packMiniBatches(sets, 0)).toThrow(/maxSequences/);
  });
});
