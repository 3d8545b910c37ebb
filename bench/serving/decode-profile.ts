/**
 * Where a cached decode step's time goes (not a timed test): one model, one batch, learner or
 * tensorflow products. Times whole steps (step + logSoftmax + host copy, as the engine's sampler),
 * then the step's kernels by name (tf.profile), then the few-row products of each shape alone.
 *
 *   npm run build:bench && node dist-bench/bench/serving/decode-profile.js [--model DIR] [--batch 1] [--steps 30] [--products learner|tensorflow]
 */
import * as os from 'node:os';
import * as path from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { initTfBackend } from '@srpo/core';
import { LlamaDecodeBatch, loadHfModel, prefillMany, type DecodeProducts } from '@srpo/hf';
import { matMul2d } from '@srpo/kernels';

function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && process.argv[i + 1] !== undefined ? process.argv[i + 1] : fallback;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

/** Median ms of `fn` over `reps` calls after 3 warm-up calls (tfjs-node runs ops eagerly, so the wall time is the ops'). */
function timeIt(reps: number, fn: () => void): number {
  for (let i = 0; i < 3; i++) fn();
  const ts: number[] = [];
  for (let i = 0; i < reps; i++) {
    const t0 = performance.now();
    fn();
    ts.push(performance.now() - t0);
  }
  return median(ts);
}

async function main(): Promise<void> {
  await initTfBackend('tensorflow');
  const model = arg('model', path.join(os.homedir(), '.cache', 'srpo', 'models', 'smollm2-135m-instruct'));
  const b = Number(arg('batch', '1'));
  const steps = Number(arg('steps', '30'));
  const products = arg('products', 'learner') as DecodeProducts;
  const hf = loadHfModel(model);
  const m = hf.model;
  const prompt = Array.from({ length: 40 }, (_, i) => 100 + i * 7);
  const { caches, logits } = prefillMany(m, [prompt]);
  logits.dispose();
  const batch = new LlamaDecodeBatch(m, { tokenBudget: 1 << 20, products });
  batch.add(caches[0], b);
  caches.forEach((c) => c.dispose());
  const tokens = Array.from({ length: b }, (_, i) => 200 + i);
  const sampleStep = (): void => {
    const l = batch.step(tokens);
    const lp = tf.tidy(() => tf.logSoftmax(l));
    lp.dataSync();
    tf.dispose([l, lp]);
  };
  const stepOnly = (): void => batch.step(tokens).dispose();
  for (let i = 0; i < 5; i++) sampleStep();
  const full = timeIt(steps, sampleStep);
  const bare = timeIt(steps, stepOnly);
  console.log(`batch ${b}, ${products} products, cache ~${batch.rowLengths[0]}: step+sample ${full.toFixed(2)} ms, step ${bare.toFixed(2)} ms`);
  const prof = await tf.profile(() => {
    stepOnly();
  });
  const byName = new Map<string, { n: number; ms: number }>();
  for (const k of prof.kernels) {
    const e = byName.get(k.name) ?? { n: 0, ms: 0 };
    e.n++;
    e.ms += typeof k.kernelTimeMs === 'number' ? k.kernelTimeMs : 0;
    byName.set(k.name, e);
  }
  console.log(`kernels per step: ${prof.kernels.length}`);
  for (const [name, e] of [...byName].sort((x, y) => y[1].ms - x[1].ms)) console.log(`  ${name.padEnd(28)} ${String(e.n).padStart(4)}  ${e.ms.toFixed(2)} ms`);
  const c = m.config;
  // The step's products alone, on the model's own weights layer after layer (so they stream as in a step).
  const names = ['self_attn.q_proj', 'self_attn.k_proj', 'self_attn.v_proj', 'self_attn.o_proj', 'mlp.gate_proj', 'mlp.up_proj', 'mlp.down_proj'];
  const xs = new Map<number, tf.Tensor2D>();
  const xOf = (k: number): tf.Tensor2D => xs.get(k) ?? (xs.set(k, tf.randomNormal<tf.Rank.R2>([b, k])), xs.get(k) as tf.Tensor2D);
  const productsMs = timeIt(steps, () => {
    for (let i = 0; i < c.numLayers; i++)
      for (const n of names) {
        const w = m.weight(`model.layers.${i}.${n}.weight`) as unknown as tf.Tensor2D;
        matMul2d(xOf(w.shape[1]), w, false, true).dispose();
      }
    matMul2d(xOf(c.hiddenSize), m.weight('model.embed_tokens.weight') as unknown as tf.Tensor2D, false, true).dispose();
  });
  console.log(`  the step's ${c.numLayers * names.length + 1} products alone, on the model's weights: ${productsMs.toFixed(2)} ms`);
  const shapes: [string, number, number][] = [
    ['q/o', c.numHeads * c.headDim, c.hiddenSize],
    ['k/v', c.numKvHeads * c.headDim, c.hiddenSize],
    ['gate/up', c.intermediateSize, c.hiddenSize],
    ['down', c.hiddenSize, c.intermediateSize],
    ['head', c.vocabSize, c.hiddenSize],
  ];
  for (const [name, n, k] of shapes) {
    const w = tf.randomNormal<tf.Rank.R2>([n, k]);
    const x = tf.randomNormal<tf.Rank.R2>([b, k]);
    const ms = timeIt(50, () => matMul2d(x, w, false, true).dispose());
    console.log(`  product ${name.padEnd(8)} [${b}, ${k}]·[${n}, ${k}]ᵀ ${ms.toFixed(3)} ms (${((n * k * 4) / (ms * 1e6)).toFixed(1)} GB/s of weight)`);
    tf.dispose([w, x]);
  }
  const a = tf.ones<tf.Rank.R2>([b, c.hiddenSize]);
  console.log(`  tf.add [${b}, ${c.hiddenSize}] ${(timeIt(200, () => tf.add(a, a).dispose()) * 1000).toFixed(1)} µs`);
  batch.dispose();
  m.dispose();
}

void main();
