import * as path from 'path';
import * as tf from '@tensorflow/tfjs';
import { ErrorCode, repoRoot } from '@srpo/core';
import { SeededRng } from '@srpo/policy';
import { configureSrpoKernels, srpoKernelAvailable, srpoMatMulRouted } from '@srpo/kernels';
import { nativeBackend, seededValues } from './test/fixtures';
import { loadHfModel } from './hf-model-dir';
import { LlamaModel } from './llama-model';
import { attachLora, type LoraAdapter } from './lora';
import { KvCacheBudgetError, prefill, prefillMany, rotateRows } from './llama-decode';
import { LlamaDecodeBatch } from './llama-decode-batch';

const FIXTURES = path.join(repoRoot(), 'libs', 'hf', 'fixtures');

/** Every LoRA factor set to seeded N(0, 0.1²), so the adapter changes the model (fresh ones add zero). */
function randomize(adapter: LoraAdapter, seed: number): void {
  const rng = new SeededRng(seed);
  for (const v of adapter.weights.values()) tf.tidy(() => v.assign(tf.tensor(rng.normalArray(v.size, 0.1), v.shape)));
}

/** The full forward's next-token logits after the last position of `seq` (the reference: no cache). */
async function fullLogits(model: LlamaModel, seq: readonly number[]): Promise<Float32Array> {
  const l = tf.tidy(() => model.logits2d(tf.tensor2d(Array.from(seq), [1, seq.length], 'int32'), 1, tf.tensor1d([seq.length - 1], 'int32')));
  const data = (await l.data()) as Float32Array;
  l.dispose();
  return data;
}

async function rows(logits: tf.Tensor2D): Promise<Float32Array[]> {
  const [b, v] = logits.shape;
  const data = (await logits.data()) as Float32Array;
  logits.dispose();
  return Array.from({ length: b }, (_, i) => data.slice(i * v, (i + 1) * v));
}

/**
 * Largest difference from the reference logits, relative to their scale (max |b|, at least 1). With
 * the default products the two sides sum in other orders (decode steps of few rows take TensorFlow's
 * MatMul, the full forward SrpoMatMul; without the decode-attention kernel, attention over a cache
 * in TensorFlow's order): on these random models, whose logits reach |x| ≈ 5, that moves a logit by
 * up to ~1e-5 absolute, a few float32 ulps. With products `learner` routed to SrpoMatMul (each
 * element one FMA chain over k, whatever the rows) and SrpoDecodeAttention (SrpoAttention's order
 * for the same position), a step sums exactly as the full forward: the bound is 0 (`bound` below).
 */
const maxDiff = (a: Float32Array, b: Float32Array): number =>
  a.reduce((m, x, i) => Math.max(m, Math.abs(x - b[i])), 0) /
  Math.max(
    1,
    b.reduce((m, x) => Math.max(m, Math.abs(x)), 0),
  );
const argmax = (a: Float32Array): number => a.reduce((best, x, i) => (x > a[best] ? i : best), 0);

/** Prompts of different lengths from seeded ids in [0, vocab). */
function prompts(vocab: number, lengths: number[], seed: number): number[][] {
  return lengths.map((n, j) => Array.from(seededValues(n, seed + j, 1), (x) => Math.floor(((x + 1) / 2) * vocab)));
}

// split: the cache grows in two parts from the first step on, the recent part joining the older every 3 steps.
// kernel false: the decode-attention kernel switched off, so steps take the composite attention (as on WebGPU).
// LoRA false with products learner: the step's projections, rotations and appends as one SrpoDecodeQkv per layer (the
// adapter's terms, and qwen2's biases, keep them apart).
describe.each([
  ['llama', false, 'learner', false, true],
  ['llama', false, 'learner', true, true],
  ['llama', true, 'learner', false, true],
  ['qwen2', true, 'learner', true, true],
  ['qwen2', true, 'tensorflow', false, true],
  ['llama', true, 'tensorflow', true, true],
  ['llama', true, 'learner', true, false],
  ['qwen2', false, 'learner', false, false],
] as const)('incremental decoding with a KV cache (%s, LoRA %s, products %s, split %s, attention kernel %s)', (fixture, lora, products, split, kernel) => {
  const options = { tokenBudget: 1000, products, ...(split ? { splitSlots: 1, recentColumns: 3 } : {}) };
  // Evaluated in the tests: the addon loads with the backend (beforeAll).
  const bound = (): number => (kernel && products === 'learner' && srpoKernelAvailable('SrpoDecodeAttention') && srpoMatMulRouted() ? 0 : 1e-5);
  let model: LlamaModel;

  beforeAll(async () => {
    await nativeBackend();
    configureSrpoKernels({ except: kernel ? [] : ['SrpoDecodeAttention'] });
    model = loadHfModel(path.join(FIXTURES, fixture)).model;
    if (lora) randomize(attachLora(model, { r: 4, targetModules: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'] }), 11);
  });
  afterAll(() => {
    configureSrpoKernels({ except: [] });
    model.dispose();
  });

  it('prefill gives the full forward last-position logits, and each cached step the full forward of the grown sequence', async () => {
    const [seq] = prompts(model.config.vocabSize, [6], 1);
    const { cache, logits } = prefill(model, seq);
    const batch = new LlamaDecodeBatch(model, options);
    try {
      let [next] = await rows(logits);
      expect(maxDiff(next, await fullLogits(model, seq))).toBeLessThanOrEqual(bound());
      batch.add(cache);
      for (let s = 0; s < 8; s++) {
        seq.push(argmax(next));
        [next] = await rows(batch.step([seq[seq.length - 1]]));
        expect(maxDiff(next, await fullLogits(model, seq))).toBeLessThanOrEqual(bound());
      }
      expect(batch.rowLengths).toEqual([seq.length]);
    } finally {
      cache.dispose();
      batch.dispose();
    }
  });

  it('decodes rows of different lengths together, with rows joining (n copies of one prefill) and leaving mid-way', async () => {
    const vocab = model.config.vocabSize;
    const seqs = prompts(vocab, [3, 9, 5], 20);
    const batch = new LlamaDecodeBatch(model, options);
    const pending: Float32Array[] = [];
    const join = async (prompt: number[], copies = 1): Promise<void> => {
      const { cache, logits } = prefill(model, prompt);
      const [l] = await rows(logits);
      batch.add(cache, copies);
      cache.dispose();
      for (let i = 0; i < copies; i++) pending.push(l);
    };
    try {
      for (const s of seqs) await join(s);
      // The next token of every row: a different rule per row, so rows diverge.
      const stepAll = async (): Promise<void> => {
        const tokens = seqs.map((_, i) => (argmax(pending[i]) + i) % vocab);
        tokens.forEach((t, i) => seqs[i].push(t));
        const out = await rows(batch.step(tokens));
        for (let i = 0; i < seqs.length; i++) {
          expect(maxDiff(out[i], await fullLogits(model, seqs[i]))).toBeLessThanOrEqual(bound());
          pending[i] = out[i];
        }
      };
      for (let s = 0; s < 3; s++) await stepAll();
      // The longest row leaves: the batch narrows to the longest remaining row.
      batch.remove([1]);
      seqs.splice(1, 1);
      pending.splice(1, 1);
      expect(batch.rowLengths).toEqual(seqs.map((s) => s.length));
      await stepAll();
      // A long prompt (two rows sharing its prefill: the batch widens) and a short one join, prefilled in one forward.
      const [long, short] = prompts(vocab, [14, 2], 40);
      const many = prefillMany(model, [long, short]);
      const [l0, l1] = await rows(many.logits);
      expect(maxDiff(l0, await fullLogits(model, long))).toBeLessThanOrEqual(bound());
      expect(maxDiff(l1, await fullLogits(model, short))).toBeLessThanOrEqual(bound());
      expect(many.caches.map((c) => c.length)).toEqual([14, 2]);
      expect(batch.addMany([{ cache: many.caches[0], copies: 2 }, { cache: many.caches[1] }])).toEqual([2, 3, 4]);
      for (const c of many.caches) c.dispose();
      pending.push(l0, l0, l1);
      seqs.push(long, [...long], short);
      expect(batch.size).toBe(5);
      for (let s = 0; s < 3; s++) await stepAll();
      expect(batch.rowLengths).toEqual(seqs.map((s) => s.length));
      expect(batch.slots).toBe(5 * Math.max(...seqs.map((s) => s.length)));
    } finally {
      batch.dispose();
    }
  });
});

describe('LlamaDecodeBatch limits', () => {
  let model: LlamaModel;

  beforeAll(async () => {
    await nativeBackend();
    model = loadHfModel(path.join(FIXTURES, 'llama')).model;
  });
  afterAll(() => model.dispose());

  it('refuses past its token budget (rows × width) with a retriable typed error, and changes nothing', async () => {
    const batch = new LlamaDecodeBatch(model, { tokenBudget: 12 });
    const a = prefill(model, [1, 2, 3, 4, 5]);
    const b = prefill(model, [7, 8]);
    try {
      batch.add(a.cache, 2); // 2 × 5 = 10 slots
      expect(() => batch.add(b.cache)).toThrow(KvCacheBudgetError); // 3 × 5 = 15
      batch.step([9, 9]).dispose(); // 2 × 6 = 12
      let err: unknown;
      try {
        batch.step([9, 9]); // 2 × 7 = 14
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(KvCacheBudgetError);
      expect(err).toMatchObject({ code: ErrorCode.UNAVAILABLE, retriable: true, details: { needed: 14, budget: 12 } });
      expect([batch.size, batch.slots, batch.rowLengths]).toEqual([2, 12, [6, 6]]);
      batch.remove([0]);
      batch.step([9]).dispose(); // 1 × 7: fits again once a row left
      expect(batch.rowLengths).toEqual([7]);
    } finally {
      tf.dispose([a.logits, b.logits]);
      a.cache.dispose();
      b.cache.dispose();
      batch.dispose();
    }
  });

  it('refuses bad input naming the field: a token outside the vocabulary, a wrong token count, an empty prompt', () => {
    const batch = new LlamaDecodeBatch(model, { tokenBudget: 100 });
    try {
      expect(() => prefill(model, [])).toThrow(/prompt: length must be in/);
      expect(() => prefill(model, [1, model.config.vocabSize])).toThrow(/prompt\[1\]: token id/);
      expect(() => batch.step([])).toThrow(/tokens: the batch has no rows/);
      expect(() => new LlamaDecodeBatch(model, { tokenBudget: 0 })).toThrow(/tokenBudget/);
    } finally {
      batch.dispose();
    }
  });

  it('frees its tensors: a prefill, steps, a removal and dispose leave the tensor count where it was', () => {
    const cycle = (): void => {
      const batch = new LlamaDecodeBatch(model, { tokenBudget: 100, splitSlots: 1, recentColumns: 2 });
      const { cache, logits } = prefill(model, [3, 4, 5]);
      logits.dispose();
      batch.add(cache, 3);
      cache.dispose();
      batch.step([1, 2, 3]).dispose();
      batch.remove([1]);
      batch.step([1, 2]).dispose();
      batch.step([1, 2]).dispose(); // the recent part (2 columns) joins the older one
      batch.dispose();
    };
    // The first cycle makes the model's rope tables (kept for the model's life).
    cycle();
    const before = tf.memory().numTensors;
    cycle();
    expect(tf.memory().numTensors).toBe(before);
  });
});

describe('prefill memory', () => {
  let base: LlamaModel;

  beforeAll(async () => {
    await nativeBackend();
    base = loadHfModel(path.join(FIXTURES, 'llama')).model;
  });
  afterAll(() => base.dispose());

  /** The fixture's weights stacked to `layers` layers (layer i is the fixture's layer i mod its count). */
  function deep(layers: number): LlamaModel {
    const n = base.config.numLayers;
    const source = (name: string) => name.replace(/^model\.layers\.(\d+)\./, (_, i: string) => `model.layers.${Number(i) % n}.`);
    const shapes = new Map<string, readonly number[]>();
    for (let i = 0; i < layers; i++)
      for (const name of base.weightNames().filter((w) => w.startsWith('model.layers.0.')))
        shapes.set(name.replace('layers.0.', `layers.${i}.`), base.weights.get(source(name.replace('layers.0.', `layers.${i}.`)))!.shape);
    for (const name of base.weightNames().filter((w) => !w.startsWith('model.layers.'))) shapes.set(name, base.weights.get(name)!.shape);
    return LlamaModel.fromSource({ ...base.config, numLayers: layers }, shapes, (name) => base.weights.get(source(name))!.dataSync() as Float32Array);
  }

  it("holds one layer's intermediates at a time: beyond the cache it returns, its peak does not grow with the layers", async () => {
    const batch = prompts(base.config.vocabSize, [60, 60, 60, 60], 7);
    const extraPeak = async (layers: number): Promise<{ extra: number; cache: number }> => {
      const model = deep(layers);
      try {
        const before = tf.memory().numBytes;
        let cacheBytes = 0;
        const info = await tf.profile(() => {
          const { caches, logits } = prefillMany(model, batch);
          cacheBytes = caches.reduce((a, c) => a + [...c.keys, ...c.values].reduce((b, t) => b + t.size * 4, 0), 0);
          for (const cache of caches) cache.dispose();
          logits.dispose();
        });
        return { extra: info.peakBytes - before - cacheBytes, cache: cacheBytes };
      } finally {
        model.dispose();
      }
    };
    const shallow = await extraPeak(2);
    const tall = await extraPeak(12);
    // The caches do grow with the layers (6×); what else is alive at the peak must not: with every
    // layer's intermediates kept to the end it would be about 6× too.
    expect(tall.cache).toBe(6 * shallow.cache);
    expect(shallow.extra).toBeGreaterThan(0);
    expect(tall.extra).toBeLessThan(1.5 * shallow.extra);
  });
});

describe('rotateRows', () => {
  beforeAll(nativeBackend);

  it('rotates each row at its own position: rotate-half by hand, and the fused kernel where present equals the composite', async () => {
    // One head of width 4 at positions with angles 0 and π/2 (cos, sin tables [2, 4]).
    const x = tf.tensor2d([1, 2, 3, 4, 1, 2, 3, 4], [2, 4]);
    const cos = tf.tensor2d([1, 1, 1, 1, 0, 0, 0, 0], [2, 4]);
    const sin = tf.tensor2d([0, 0, 0, 0, 1, 1, 1, 1], [2, 4]);
    // Row 1: x·cos + [−x₂, x₁]·sin = [−3, −4, 1, 2]; times 2.
    const composite = rotateRows(x, 1, cos, sin, 2, true);
    expect(Array.from(await composite.data())).toEqual([2, 4, 6, 8, -6, -8, 2, 4]);
    if (srpoKernelAvailable('SrpoRope')) {
      const fused = rotateRows(x, 1, cos, sin, 2);
      expect(Array.from(await fused.data())).toEqual([2, 4, 6, 8, -6, -8, 2, 4]);
      fused.dispose();
    } else {
      console.warn('rotateRows: SrpoRope not loaded here; the fused path is not compared (composite only)');
    }
    tf.dispose([x, cos, sin, composite]);
  });
});
