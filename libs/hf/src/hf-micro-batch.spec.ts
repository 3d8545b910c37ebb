import * as path from 'path';
import * as tf from '@tensorflow/tfjs';
import { repoRoot } from '@srpo/core';
import { Policy, SeededRng, SrpoTrainer, type ActiveSet } from '@srpo/policy';
import { loadHfModel } from './hf-model-dir';
import { nativeBackend } from './test/fixtures';

/**
 * Micro-batching must not change the update: against the single-pass step (itself checked
 * against torch autograd in hf-gradients.spec.ts) on the llama fixture, with sets of 1-3
 * members split across micro-batches (rows of one set in different micro-batches).
 */
describe('SrpoTrainer with micro-batches', () => {
  beforeAll(nativeBackend);

  function sets(vocab: number): ActiveSet[] {
    const rng = new SeededRng(9);
    return Array.from({ length: 6 }, (_, s) => ({
      setId: `s${s}`,
      advantage: s % 2 === 0 ? 0.8 : -1.1,
      members: Array.from({ length: 1 + (s % 3) }, (_, j) => {
        const r = 3 + rng.nextInt(6);
        return {
          outputId: `s${s}-${j}`,
          contextTokens: Array.from({ length: 4 + rng.nextInt(20) }, () => rng.nextInt(vocab)),
          responseTokens: Array.from({ length: r }, () => rng.nextInt(vocab)),
          // Off-policy enough that some sets clip.
          logpOld: Array.from({ length: r }, () => -6 - rng.nextFloat()),
        };
      }),
    }));
  }

  it('gives the single-pass loss, diagnostics and weights within float32 rounding, with less memory', async () => {
    const dir = path.join(repoRoot(), 'libs', 'hf', 'fixtures', 'llama');
    const a = new Policy('a', loadHfModel(dir).model);
    const b = new Policy('b', loadHfModel(dir).model);
    const batch = sets(a.model.config.vocabSize);
    const single = new SrpoTrainer(a, { schedule: { kind: 'constant', lr: 1e-3 }, epochs: 2 });
    const micro = new SrpoTrainer(b, { schedule: { kind: 'constant', lr: 1e-3 }, epochs: 2, microBatchTokens: 64 });
    try {
      const r1 = await single.update(batch);
      const r2 = await micro.update(batch);
      expect(r1.diagnostics['memory/micro_batches']).toBe(1);
      expect(r2.diagnostics['memory/micro_batches']).toBeGreaterThanOrEqual(4);
      expect(r2.diagnostics['memory/peak_bytes']).toBeLessThan(r1.diagnostics['memory/peak_bytes']);
      for (let e = 0; e < 2; e++) {
        const d1 = r1.epochs[e].diagnostics;
        const d2 = r2.epochs[e].diagnostics;
        // The first epoch starts from equal weights: float32 summation order alone, 1e-5. The
        // second starts from weights that one Adam step left a few 1e-6 apart (checked below),
        // and its set ratios reach e^8 here, which multiplies that: 5e-5.
        const tolerance = e === 0 ? 1e-5 : 5e-5;
        for (const k of Object.keys(d1).filter((k) => !k.startsWith('memory/'))) {
          expect({ k, e, close: Math.abs(d1[k] - d2[k]) <= tolerance * Math.max(1, Math.abs(d1[k])) }).toEqual({ k, e, close: true });
        }
      }
      expect(r1.diagnostics['losses/clip_frac_low'] + r1.diagnostics['losses/clip_frac_high']).toBeGreaterThan(0);
      let worst = 0;
      for (const n of a.model.weightNames()) {
        const [x, y] = await Promise.all([a.model.weight(n).data(), b.model.weight(n).data()]);
        for (let i = 0; i < x.length; i++) worst = Math.max(worst, Math.abs(x[i] - y[i]));
      }
      // Two Adam steps of lr 1e-3 move a weight by up to 2e-3. Adam normalises each element's
      // step (m/√v), so an element whose gradient is small next to its float32 rounding (the
      // second epoch's, amplified by set ratios up to e^8, as above) steps a few percent
      // differently: measured 1.1e-5 on one element of 0.6e-3 with kernel set 5's attention.
      // 2e-5 is 1 % of the largest possible movement.
      expect(worst).toBeLessThan(2e-5);
      // And the weights did move (lr 1e-3, two Adam steps).
      const base = loadHfModel(dir).model;
      const moved = Math.max(
        ...(await Promise.all(
          base.weightNames().map(async (n) => {
            const [x, y] = await Promise.all([base.weight(n).data(), a.model.weight(n).data()]);
            return Math.max(...Array.from(x, (v, i) => Math.abs(v - y[i])));
          }),
        )),
      );
      base.dispose();
      expect(moved).toBeGreaterThan(1e-4);
    } finally {
      single.dispose();
      micro.dispose();
      a.dispose();
      b.dispose();
    }
  });

  it('leaks no tensors over a micro-batched update', async () => {
    const p = new Policy('p', loadHfModel(path.join(repoRoot(), 'libs', 'hf', 'fixtures', 'qwen2')).model);
    const t = new SrpoTrainer(p, { microBatchTokens: 40 });
    try {
      const batch = sets(p.model.config.vocabSize);
      await t.update(batch);
      const before = tf.memory().numTensors;
      await t.update(batch);
      expect(tf.memory().numTensors).toBe(before);
    } finally {
      t.dispose();
      p.dispose();
    }
  });
});
