import * as tf from '@tensorflow/tfjs';
import { ErrorCode, SrpoError, ValidationError } from '@srpo/core';
import { weightsHash } from './checkpoint-store';
import { nativeKernelsActive } from '@srpo/kernels';
import { nativeBackend, TINY } from './test/fixtures';
import { TransformerModel, createTransformer, resolveTransformerConfig, weightSpecs } from './transformer';

/** Textbook forward pass with plain tfjs ops and autodiff, to check the fused/folded implementation against. */
function referenceLogits(model: TransformerModel, tokens: tf.Tensor2D, temperature = 1): tf.Tensor2D {
  const { dModel: d, nHeads: h, nLayers, layerNormEps: eps, tiedEmbeddings } = model.config;
  const [b, t] = tokens.shape;
  const w = (n: string): tf.Tensor => model.weight(n);
  const ln = (x: tf.Tensor, g: tf.Tensor, bb: tf.Tensor): tf.Tensor => {
    const { mean, variance } = tf.moments(x, -1, true);
    return tf.add(tf.mul(tf.div(tf.sub(x, mean), tf.sqrt(tf.add(variance, eps))), g), bb);
  };
  const gelu = (x: tf.Tensor): tf.Tensor =>
    tf.mul(tf.mul(x, 0.5), tf.add(1, tf.tanh(tf.mul(Math.sqrt(2 / Math.PI), tf.add(x, tf.mul(0.044715, tf.pow(x, 3)))))));
  const causal = tf.sub(1, tf.linalg.bandPart(tf.ones([t, t]), -1, 0)).mul(-1e9);
  let x: tf.Tensor = tf.add(tf.gather(w('tok_emb'), tokens.reshape([-1])).reshape([b, t, d]), w('pos_emb').slice([0, 0], [t, d]));
  for (let i = 0; i < nLayers; i++) {
    const p = `blocks.${i}.`;
    const qkv = tf.add(tf.matMul(ln(x, w(`${p}ln1.g`), w(`${p}ln1.b`)).reshape([b * t, d]), w(`${p}attn.wqkv`)), w(`${p}attn.bqkv`));
    const heads = (k: number): tf.Tensor =>
      qkv
        .slice([0, k * d], [b * t, d])
        .reshape([b, t, h, d / h])
        .transpose([0, 2, 1, 3]);
    const att = tf.softmax(tf.add(tf.div(tf.matMul(heads(0), heads(1), false, true), Math.sqrt(d / h)), causal));
    const o = tf
      .matMul(att, heads(2))
      .transpose([0, 2, 1, 3])
      .reshape([b * t, d]);
    x = tf.add(x, tf.add(tf.matMul(o, w(`${p}attn.wo`)), w(`${p}attn.bo`)).reshape([b, t, d]));
    const m = ln(x, w(`${p}ln2.g`), w(`${p}ln2.b`)).reshape([b * t, d]);
    const f = tf.add(tf.matMul(gelu(tf.add(tf.matMul(m, w(`${p}mlp.w1`)), w(`${p}mlp.b1`))), w(`${p}mlp.w2`)), w(`${p}mlp.b2`));
    x = tf.add(x, f.reshape([b, t, d]));
  }
  const hf = ln(x, w('ln_f.g'), w('ln_f.b')).reshape([b * t, d]);
  const logits = tiedEmbeddings ? tf.matMul(hf, w('tok_emb'), false, true) : tf.matMul(hf, w('head'));
  return tf.div<tf.Tensor2D>(logits, temperature);
}

async function maxAbsDiff(a: tf.Tensor, b: tf.Tensor): Promise<number> {
  expect(a.shape).toEqual(b.shape);
  return (await tf.max(tf.abs(tf.sub(a, b))).data())[0];
}

describe('TransformerModel', () => {
  beforeAll(nativeBackend);

  it('validates the config and names the field', () => {
    expect(() => resolveTransformerConfig({ ...TINY, nHeads: 3 })).toThrow(/config.nHeads/);
    expect(() => resolveTransformerConfig({ ...TINY, vocabSize: 0 })).toThrow(ValidationError);
    expect(() => resolveTransformerConfig({ ...TINY, maxSeqLen: 2.5 })).toThrow(/config.maxSeqLen/);
    const r = resolveTransformerConfig(TINY);
    expect(r.dMlp).toBe(4 * TINY.dModel);
    expect(r.tiedEmbeddings).toBe(true);
  });

  it('lays out the weights it documents, with a head only when untied', () => {
    const tied = createTransformer(TINY, 1);
    const untied = createTransformer({ ...TINY, tiedEmbeddings: false }, 1);
    try {
      expect(tied.weightNames()).toEqual(
        weightSpecs(tied.config)
          .map((s) => s.name)
          .sort(),
      );
      expect(tied.weightNames()).not.toContain('head');
      expect(untied.weightNames()).toContain('head');
      expect(untied.weight('head').shape).toEqual([TINY.dModel, TINY.vocabSize]);
      const { dModel: d, vocabSize: v, maxSeqLen: t } = TINY;
      const per = 2 * d + (3 * d * d + 3 * d) + (d * d + d) + 2 * d + (4 * d * d + 4 * d) + (4 * d * d + d);
      expect(tied.parameterCount()).toBe(v * d + t * d + 2 * per + 2 * d);
    } finally {
      tied.dispose();
      untied.dispose();
    }
  });

  it('initialises from the seed: same seed, same weights; another seed, other weights', async () => {
    const a = createTransformer(TINY, 7);
    const b = createTransformer(TINY, 7);
    const c = createTransformer(TINY, 8);
    try {
      expect(await weightsHash(a)).toBe(await weightsHash(b));
      expect(await weightsHash(a)).not.toBe(await weightsHash(c));
      expect(Array.from(await a.weight('blocks.0.ln1.g').data())).toEqual(new Array(TINY.dModel).fill(1));
    } finally {
      [a, b, c].forEach((m) => m.dispose());
    }
  });

  it('computes the same logits and weight gradients as a textbook implementation (tied, untied, gather embedding, temperature)', async () => {
    // vocabSize 600 takes the gather embedding path (one-hot matmul is used up to 512).
    for (const over of [{ tiedEmbeddings: true }, { tiedEmbeddings: false }, { vocabSize: 600, dModel: 8 }]) {
      const model = createTransformer({ ...TINY, ...over }, 3);
      try {
        const tokens = tf.tensor2d(
          [
            [1, 5, 9, 2, 0, 15, 3],
            [4, 4, 8, 1, 12, 7, 6],
          ],
          [2, 7],
          'int32',
        );
        const probe = tf.randomNormal([14, model.config.vocabSize], 0, 1, 'float32', 11);
        const ours = model.logits2d(tokens, 0.7);
        const ref = referenceLogits(model, tokens, 0.7);
        expect(await maxAbsDiff(ours, ref)).toBeLessThan(1e-5);
        const vars = model.trainableVariables();
        const g1 = tf.variableGrads(() => tf.sum<tf.Scalar>(tf.mul(model.logits2d(tokens, 0.7), probe)), vars).grads;
        const g2 = tf.variableGrads(() => tf.sum<tf.Scalar>(tf.mul(referenceLogits(model, tokens, 0.7), probe)), vars).grads;
        for (const v of vars) {
          const scale = (await tf.max(tf.abs(g2[v.name])).data())[0];
          const relErr = (await maxAbsDiff(g1[v.name], g2[v.name])) / Math.max(scale, 1e-3);
          expect([v.name, relErr < 2e-3]).toEqual([v.name, true]);
        }
        tf.dispose([tokens, probe, ours, ref, ...Object.values(g1), ...Object.values(g2)]);
      } finally {
        model.dispose();
      }
    }
  });

  it('gives the same logits and gradients on the pure-JS cpu backend (composite fallbacks of the native kernels)', async () => {
    const tokens = [
      [2, 7, 1, 8, 2],
      [8, 1, 8, 2, 8],
    ];
    const run = async (): Promise<{ logits: number[]; grads: Record<string, number[]> }> => {
      const model = createTransformer(TINY, 13);
      try {
        const t = tf.tensor2d(tokens, [2, 5], 'int32');
        const probe = tf.tensor2d(
          Array.from({ length: 10 * TINY.vocabSize }, (_, i) => Math.sin(i)),
          [10, TINY.vocabSize],
        );
        const vars = model.trainableVariables();
        const logits = Array.from(await model.logits2d(t, 1.3).data());
        const ref = Array.from(await referenceLogits(model, t, 1.3).data());
        logits.forEach((v, i) => expect(Math.abs(v - ref[i])).toBeLessThan(1e-5));
        const { grads } = tf.variableGrads(() => tf.sum<tf.Scalar>(tf.mul(model.logits2d(t, 1.3), probe)), vars);
        const out: Record<string, number[]> = {};
        for (const [i, n] of model.weightNames().entries()) out[n] = Array.from(await grads[vars[i].name].data());
        tf.dispose([t, probe, ...Object.values(grads)]);
        return { logits, grads: out };
      } finally {
        model.dispose();
      }
    };
    const native = await run();
    await tf.setBackend('cpu');
    let cpu: Awaited<ReturnType<typeof run>>;
    try {
      expect(nativeKernelsActive()).toBe(false);
      cpu = await run();
    } finally {
      await tf.setBackend('tensorflow');
    }
    expect(tf.getBackend()).toBe('tensorflow');
    native.logits.forEach((v, i) => expect(Math.abs(v - cpu.logits[i])).toBeLessThan(1e-4));
    for (const n of Object.keys(native.grads)) {
      const scale = Math.max(1e-3, ...native.grads[n].map(Math.abs));
      const err = Math.max(...native.grads[n].map((v, i) => Math.abs(v - cpu.grads[n][i])));
      expect([n, err / scale < 2e-3]).toEqual([n, true]);
    }
  });

  it('is causal: later tokens and right padding never change earlier outputs', async () => {
    const model = createTransformer(TINY, 4);
    try {
      const a = model.logits(tf.tensor2d([[3, 1, 4, 1, 5]], [1, 5], 'int32'));
      const b = model.logits(tf.tensor2d([[3, 1, 4, 9, 2]], [1, 5], 'int32'));
      const short = model.logits(tf.tensor2d([[3, 1, 4]], [1, 3], 'int32'));
      expect(await maxAbsDiff(a.slice([0, 0, 0], [1, 3, -1]), b.slice([0, 0, 0], [1, 3, -1]))).toBeLessThan(1e-5);
      expect(await maxAbsDiff(a.slice([0, 0, 0], [1, 3, -1]), short)).toBeLessThan(1e-5);
      // Positions 3 and 4 see the changed tokens, so their logits must differ.
      expect(await maxAbsDiff(a.slice([0, 3, 0], [1, 2, -1]), b.slice([0, 3, 0], [1, 2, -1]))).toBeGreaterThan(1e-4);
    } finally {
      model.dispose();
    }
  });

  it('refuses sequences longer than maxSeqLen and use after dispose', () => {
    const model = createTransformer(TINY, 5);
    const long = tf.zeros<tf.Rank.R2>([1, TINY.maxSeqLen + 1], 'int32');
    expect(() => model.logits2d(long)).toThrow(/sequence length/);
    model.dispose();
    expect(() => model.logits2d(tf.zeros<tf.Rank.R2>([1, 2], 'int32'))).toThrow(SrpoError);
    try {
      model.logits2d(tf.zeros<tf.Rank.R2>([1, 2], 'int32'));
    } catch (e) {
      expect((e as SrpoError).code).toBe(ErrorCode.VALIDATION_FAILED);
    }
  });

  it('rebuilds from values only when every weight fits', () => {
    const model = createTransformer(TINY, 6);
    const values = new Map(model.weightNames().map((n) => [n, model.weight(n).dataSync() as Float32Array] as const));
    try {
      const copy = TransformerModel.fromValues(TINY, values);
      copy.dispose();
      const missing = new Map(values);
      missing.delete('ln_f.b');
      expect(() => TransformerModel.fromValues(TINY, missing)).toThrow(/weights.ln_f.b: is missing/);
      const wrong = new Map(values);
      wrong.set('ln_f.b', new Float32Array(3));
      expect(() => TransformerModel.fromValues(TINY, wrong)).toThrow(/weights.ln_f.b/);
    } finally {
      model.dispose();
    }
  });
});
