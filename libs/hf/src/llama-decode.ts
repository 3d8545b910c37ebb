import * as tf from '@tensorflow/tfjs';
import { ErrorCode, SrpoError, ValidationError } from '@srpo/core';
import { batchMatMul, configureSrpoKernels, gatherRows, ropeFused } from '@srpo/kernels';
import { linear, rmsNorm, ropeAttention, swiGlu, type RopeTables } from './llama-ops';
import type { LlamaModel } from './llama-model';

/**
 * Incremental decoding of a {@link LlamaModel} with a key/value cache, for serving (no gradients):
 * a prompt is run once ({@link prefill}), after which each step runs one position per row and
 * attends to the rows' cached keys and values. The projections go through the model's own
 * adapter-aware `linear`, so an attached LoRA adapter's term is part of every step, and the
 * numbers are the full forward's up to float32 summation order (specs check 1e-5).
 *
 * Keys are cached after RoPE, so a cached position never needs its rotation again; only the
 * new query and key of each step are rotated, each at its row's own position.
 */

/** Refusal to grow the cache past its token budget ({@link LlamaDecodeBatch}). Retriable: memory frees as rows finish. */
export class KvCacheBudgetError extends SrpoError {
  constructor(needed: number, budget: number) {
    super(ErrorCode.UNAVAILABLE, `the KV cache would hold ${needed} token slots, over its budget of ${budget}; retry later`, {
      retriable: true,
      details: { needed, budget },
    });
  }
}

/**
 * One sequence's cached keys and values, per layer `[1, H_kv, L, d]` (keys after RoPE): what
 * {@link prefill} returns and {@link LlamaDecodeBatch.add} takes. Owns its tensors.
 */
export class LlamaKvCache {
  private disposed = false;

  constructor(
    readonly keys: tf.Tensor4D[],
    readonly values: tf.Tensor4D[],
  ) {}

  /** Positions cached (the next token goes at this position). */
  get length(): number {
    return this.keys[0].shape[2];
  }

  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    tf.dispose([...this.keys, ...this.values]);
  }
}

/** Result of {@link prefill}: the prompt's cache and the next-token logits `[1, V]` after its last position. */
export interface Prefill {
  cache: LlamaKvCache;
  logits: tf.Tensor2D;
}

/** A weight as the rank llama-ops takes (the variables are rank-erased). */
function w1(model: LlamaModel, name: string): tf.Tensor1D {
  return model.weight(name) as unknown as tf.Tensor1D;
}
function w2(model: LlamaModel, name: string): tf.Tensor2D {
  return model.weight(name) as unknown as tf.Tensor2D;
}

/**
 * With `products: 'tensorflow'` (the default), decode steps with at most this many rows run their 2-D products on TensorFlow's `MatMul` (see
 * {@link withTensorflowMatMul}). Measured on SmolLM2-135M's shapes (Xeon, AVX-512, 2 threads):
 * at 1 row `MatMul` took 0.04–0.23 ms per layer product against `SrpoMatMul`'s 0.13–0.32 (a
 * matrix–vector product reads the weight once; `SrpoMatMul` packs it first); at 16 rows
 * `SrpoMatMul` was as fast or faster (0.42 against 0.47–0.61 ms on the MLP's).
 */
const TENSORFLOW_MATMUL_ROWS = 4;

/**
 * Runs `fn` with the 2-D products on TensorFlow's `MatMul` instead of `SrpoMatMul`, and restores
 * the process-wide choice after. `fn` is synchronous (tfjs-node runs ops eagerly), so no other
 * code runs while the switch is flipped. Used for products with few rows, and for the
 * vocabulary head at any row count (SmolLM2's `[49152, 576]` head: 4.9 ms against 16.7 at 1 row,
 * 12.3 against 19.8 at 16 rows, same machine and run).
 */
function withTensorflowMatMul<T>(on: boolean, fn: () => T): T {
  if (!on) return fn();
  const previous = configureSrpoKernels({}).matMul;
  if (previous === 'tensorflow') return fn();
  configureSrpoKernels({ matMul: 'tensorflow' });
  try {
    return fn();
  } finally {
    configureSrpoKernels({ matMul: previous });
  }
}

/** The vocabulary head on the final hidden rows `[N, D]` → logits `[N, V]` (the forward's last lines). */
function head(model: LlamaModel, h: tf.Tensor2D, tensorflowMatMul = false): tf.Tensor2D {
  const c = model.config;
  const wHead = w2(model, c.tieWordEmbeddings ? 'model.embed_tokens.weight' : 'lm_head.weight');
  const n = rmsNorm(h, w1(model, 'model.norm.weight'), c.rmsNormEps);
  return withTensorflowMatMul(tensorflowMatMul, () => linear(n, wHead));
}

/** A layer's MLP block and residual on `h` `[N, D]`, as the forward computes it. */
function mlp(model: LlamaModel, h: tf.Tensor2D, p: string): tf.Tensor2D {
  const c = model.config;
  const n2 = rmsNorm(h, w1(model, `${p}post_attention_layernorm.weight`), c.rmsNormEps);
  const gate = model.linear(n2, `${p}mlp.gate_proj`, c.mlpBias);
  const up = model.linear(n2, `${p}mlp.up_proj`, c.mlpBias);
  return tf.add<tf.Tensor2D>(h, model.linear(swiGlu(gate, up), `${p}mlp.down_proj`, c.mlpBias));
}

function checkTokens(model: LlamaModel, tokens: readonly number[], field: string): void {
  const { vocabSize } = model.config;
  tokens.forEach((t, i) => {
    if (!Number.isInteger(t) || t < 0 || t >= vocabSize)
      throw new ValidationError(`${field}[${i}]`, `token id must be an integer in [0, ${vocabSize}), got ${t}`);
  });
}

/**
 * The additive causal mask `[r·T, T]` that llama-ops' ropeAttention takes (0 on and below the
 * diagonal, −1e9 above). Made per prefill, not cached: one per prompt length would grow without
 * bound in a server (r·T² values each), and it is small beside the prefill's own work.
 */
function causalMask(model: LlamaModel, t: number): tf.Tensor2D {
  const r = model.config.numHeads / model.config.numKvHeads;
  const data = new Float32Array(r * t * t);
  for (let g = 0; g < r; g++) for (let i = 0; i < t; i++) for (let j = i + 1; j < t; j++) data[(g * t + i) * t + j] = -1e9;
  return tf.tensor2d(data, [r * t, t]);
}

/**
 * RoPE tables for positions 0..t−1, sliced from the model's tables for the next power of two, so
 * that a server's many lengths make few cached tables (the model caches one set per length asked).
 */
function ropeFor(model: LlamaModel, t: number): RopeTables {
  const full = model.rope(Math.min(model.config.maxSeqLen, 2 ** Math.ceil(Math.log2(t))));
  if (full.cos.shape[0] === t) return full;
  const cut = (x: tf.Tensor2D): tf.Tensor2D => x.slice([0, 0], [t, -1]);
  return { cos: cut(full.cos), sin: cut(full.sin), negSin: cut(full.negSin) };
}

/**
 * Runs a prompt through the model once: its cache (keys after RoPE and values of every layer)
 * and the logits for the token after it. The attention is the full forward's (llama-ops'
 * ropeAttention), so the logits are those of `model.logits2d` at the last position.
 *
 * @param prompt token ids, `1 ≤ L ≤ maxSeqLen`
 */
export function prefill(model: LlamaModel, prompt: readonly number[]): Prefill {
  const { caches, logits } = prefillMany(model, [prompt]);
  return { cache: caches[0], logits };
}

/**
 * {@link prefill} for several prompts in one forward (right-padded to the longest; attention is
 * causal, so the padding never reaches a prompt's own positions): one cache per prompt, and the
 * logits `[G, V]` after each prompt's last token (row g for prompt g).
 */
export function prefillMany(model: LlamaModel, prompts: readonly (readonly number[])[]): { caches: LlamaKvCache[]; logits: tf.Tensor2D } {
  const c = model.config;
  if (prompts.length < 1) throw new ValidationError('prompts', 'must hold at least one prompt');
  prompts.forEach((p, g) => {
    const field = prompts.length === 1 ? 'prompt' : `prompts[${g}]`;
    if (p.length < 1 || p.length > c.maxSeqLen) throw new ValidationError(field, `length must be in [1, ${c.maxSeqLen}], got ${p.length}`);
    checkTokens(model, p, field);
  });
  const b = prompts.length;
  const t = Math.max(...prompts.map((p) => p.length));
  const { numHeads: heads, numKvHeads: kvHeads, headDim: d, qkvBias } = c;
  const keys: tf.Tensor4D[][] = prompts.map(() => []);
  const values: tf.Tensor4D[][] = prompts.map(() => []);
  const ids = new Int32Array(b * t);
  prompts.forEach((p, g) => ids.set(p, g * t));
  try {
    const logits = tf.tidy(() => {
      const rope = ropeFor(model, t);
      const mask = causalMask(model, t);
      // [G·T, H_kv·d] rows → prompt g's [1, H_kv, L_g, d], the cache's layout (kept: the caller owns it).
      const toCache = (x: tf.Tensor2D, into: tf.Tensor4D[][]): void => {
        const all = tf.transpose(x.reshape([b, t, kvHeads, d]), [0, 2, 1, 3]) as tf.Tensor4D;
        prompts.forEach((p, g) => into[g].push(tf.keep(b === 1 && p.length === t ? all : all.slice([g, 0, 0, 0], [1, -1, p.length, -1]))));
      };
      let h = gatherRows(w2(model, 'model.embed_tokens.weight'), tf.tensor1d(ids, 'int32'));
      for (let i = 0; i < c.numLayers; i++) {
        const p = `model.layers.${i}.`;
        const n1 = rmsNorm(h, w1(model, `${p}input_layernorm.weight`), c.rmsNormEps);
        const q = model.linear(n1, `${p}self_attn.q_proj`, qkvBias);
        const k = model.linear(n1, `${p}self_attn.k_proj`, qkvBias);
        const v = model.linear(n1, `${p}self_attn.v_proj`, qkvBias);
        const attn = ropeAttention(q, k, v, { b, t, heads, kvHeads, headDim: d }, rope, mask);
        const [cos, sin] = b === 1 ? [rope.cos, rope.sin] : [tf.tile(rope.cos, [b, 1]), tf.tile(rope.sin, [b, 1])];
        toCache(rotateRows(k, kvHeads, cos, sin, 1), keys);
        toCache(v, values);
        h = tf.add<tf.Tensor2D>(h, model.linear(attn, `${p}self_attn.o_proj`, c.oBias));
        h = mlp(model, h, p);
      }
      const last = tf.tensor1d(
        prompts.map((p, g) => g * t + p.length - 1),
        'int32',
      );
      return head(model, gatherRows(h, last));
    });
    return { caches: prompts.map((_, g) => new LlamaKvCache(keys[g], values[g])), logits };
  } catch (e) {
    tf.dispose([...keys.flat(), ...values.flat()]);
    throw e;
  }
}

/**
 * RoPE on projection rows `[N, heads·d]` where row n is at the position whose tables are row n
 * of `cos`, `sin` `[N, d]`, times `scale`: the project's `SrpoRope` (one sequence of N positions)
 * where available, else the composite rotate-half form.
 */
export function rotateRows(x: tf.Tensor2D, heads: number, cos: tf.Tensor2D, sin: tf.Tensor2D, scale: number, composite = false): tf.Tensor2D {
  const fused = ropeFused(x, cos, sin, scale, false, composite);
  if (fused) return fused;
  return tf.tidy(() => {
    const [n, d] = [x.shape[0], cos.shape[1]];
    const x3 = x.reshape<tf.Tensor3D>([n, heads, d]);
    const [x1, x2] = tf.split(x3, [d / 2, d / 2], 2);
    const rotated = tf.concat([tf.neg(x2), x1], 2);
    const y = tf.add(tf.mul(x3, cos.reshape([n, 1, d])), tf.mul(rotated, sin.reshape([n, 1, d])));
    return (scale === 1 ? y : tf.mul(y, scale)).reshape<tf.Tensor2D>([n, heads * d]);
  });
}

/**
 * The 2-D product kernels of decode steps. `tensorflow` (default): TensorFlow's `MatMul` for the
 * vocabulary head, and for every product of steps of at most {@link TENSORFLOW_MATMUL_ROWS} rows,
 * where a matrix–vector product reads each weight once (SmolLM2-135M at batch 1, one thread: 14.9
 * tokens/s against 5.3 with `learner`). `learner`: the learner's forward's own (`SrpoMatMul` where
 * the kernels route it), which packs each weight first. Either way the sums run in another order
 * than the full forward's: served log-probs differed from the learner's recompute by up to 1.5e-5
 * (`tensorflow`) and 1.2e-5 (`learner`, attention's order alone) on SmolLM2.
 */
export type DecodeProducts = 'learner' | 'tensorflow';

/**
 * A large cache grows in two parts: the step appends its column to the last W_r ≤ RECENT_COLUMNS
 * columns, a small tensor, and the recent part joins the older one every RECENT_COLUMNS steps. A
 * step then copies B·W_r columns instead of B·W (SmolLM2 at batch 16 and 170 positions: the
 * per-step concats took 27 of 166 ms), for a few more ops per layer (two score and two value
 * products, a concat and a split), which is why small caches grow whole.
 */
const RECENT_COLUMNS = 32;
/** Default of {@link LlamaDecodeOptions.splitSlots}. */
const DEFAULT_SPLIT_SLOTS = 1024;

export interface LlamaDecodeOptions {
  /** Rows × width from which a step grows the cache in two parts (see {@link RECENT_COLUMNS}); default 1024. */
  splitSlots?: number;
  /** Columns the recent part reaches before it joins the older one; default {@link RECENT_COLUMNS} (32). */
  recentColumns?: number;
  /** See {@link DecodeProducts}; default `tensorflow`. */
  products?: DecodeProducts;
  /**
   * Most token slots the batch's cache may hold: rows × the widest row (rows are padded to one
   * width). One slot is `2 · layers · H_kv · d` float32 values (46 KB for SmolLM2-135M).
   */
  tokenBudget: number;
}

/**
 * The cache of a batch of sequences decoding together, one row each, of different lengths:
 * per layer keys and values `[B, H_kv, W, d]` with row b's `L_b` positions in its last `L_b`
 * columns (left-padded; the padding is masked out of attention with −1e9, whose exp is 0). Each
 * {@link step} appends one column to every row (a concat per layer and tensor; a large cache
 * keeps its last columns apart so that the concat stays small, see {@link RECENT_COLUMNS}); rows joining ({@link add}) or leaving
 * ({@link remove}) re-pad the batch once. Memory is bounded by {@link LlamaDecodeOptions.tokenBudget}
 * on B·W: a step or join past it throws {@link KvCacheBudgetError} and changes nothing.
 *
 * Owns its tensors; {@link dispose} when done. Rows are addressed by index, in order of joining,
 * and shift down when earlier rows leave.
 */
export class LlamaDecodeBatch {
  /** Per layer, the cache's older columns `[B, H_kv, W − W_r, d]`. */
  private keys: tf.Tensor4D[] = [];
  private values: tf.Tensor4D[] = [];
  /** Per layer, its last W_r columns (empty while W_r = 0): see {@link RECENT_COLUMNS}. */
  private recentKeys: tf.Tensor4D[] = [];
  private recentValues: tf.Tensor4D[] = [];
  private recentWidth = 0;
  private lengths: number[] = [];
  private width = 0;

  constructor(
    readonly model: LlamaModel,
    private readonly options: LlamaDecodeOptions,
  ) {
    if (!(Number.isInteger(options.tokenBudget) && options.tokenBudget >= 1))
      throw new ValidationError('tokenBudget', `must be an integer >= 1, got ${options.tokenBudget}`);
    if (options.products !== undefined && options.products !== 'learner' && options.products !== 'tensorflow')
      throw new ValidationError('products', `must be learner or tensorflow, got ${String(options.products)}`);
  }

  /** Rows in the batch. */
  get size(): number {
    return this.lengths.length;
  }

  /** Token slots held: rows × width. */
  get slots(): number {
    return this.size * this.width;
  }

  /** Each row's cached length (its next token's position). */
  get rowLengths(): readonly number[] {
    return this.lengths;
  }

  /**
   * Adds `copies` rows that continue `cache` (the n samples of one prompt share its prefill).
   * The cache is copied in; the caller still owns (and disposes) it.
   * @returns the new rows' indices
   */
  add(cache: LlamaKvCache, copies = 1): number[] {
    return this.addMany([{ cache, copies }]);
  }

  /** {@link add} for several caches at once: one re-pad of the batch for all of them. */
  addMany(entries: readonly { cache: LlamaKvCache; copies?: number }[]): number[] {
    for (const { copies = 1 } of entries)
      if (!(Number.isInteger(copies) && copies >= 1)) throw new ValidationError('copies', `must be an integer >= 1, got ${copies}`);
    if (entries.length === 0) return [];
    const added = entries.reduce((n, e) => n + (e.copies ?? 1), 0);
    const width = Math.max(this.width, ...entries.map((e) => e.cache.length));
    this.checkBudget((this.size + added) * width);
    this.mergeRecent();
    const first = this.size;
    // Every row left-padded to the new width, then one concat along the rows.
    const padTo = (x: tf.Tensor4D, len: number): tf.Tensor4D =>
      len < width
        ? tf.pad(x, [
            [0, 0],
            [0, 0],
            [width - len, 0],
            [0, 0],
          ])
        : x;
    const grow = (old: tf.Tensor4D | undefined, pick: (c: LlamaKvCache) => tf.Tensor4D): tf.Tensor4D =>
      tf.tidy(() => {
        const parts = old ? [padTo(old, this.width)] : [];
        for (const { cache, copies = 1 } of entries) {
          const row = pick(cache);
          parts.push(padTo(copies === 1 ? row : tf.tile(row, [copies, 1, 1, 1]), cache.length));
        }
        return parts.length === 1 ? tf.clone(parts[0]) : tf.concat(parts, 0);
      });
    const layers = entries[0].cache.keys.length;
    const nk = Array.from({ length: layers }, (_, i) => grow(this.keys[i], (c) => c.keys[i]));
    const nv = Array.from({ length: layers }, (_, i) => grow(this.values[i], (c) => c.values[i]));
    tf.dispose([...this.keys, ...this.values]);
    [this.keys, this.values, this.width] = [nk, nv, width];
    for (const { cache, copies = 1 } of entries) for (let i = 0; i < copies; i++) this.lengths.push(cache.length);
    return Array.from({ length: added }, (_, i) => first + i);
  }

  /** Removes rows by index (the later rows shift down), and the columns no remaining row uses. */
  remove(rows: readonly number[]): void {
    const drop = new Set(rows);
    for (const r of drop) if (!(Number.isInteger(r) && r >= 0 && r < this.size)) throw new ValidationError('rows', `no row ${r} in a batch of ${this.size}`);
    if (drop.size === 0) return;
    this.mergeRecent();
    const keep = this.lengths.map((_, i) => i).filter((i) => !drop.has(i));
    if (keep.length === 0) return this.clear();
    const lengths = keep.map((i) => this.lengths[i]);
    const width = Math.max(...lengths);
    const cut = (x: tf.Tensor4D): tf.Tensor4D =>
      tf.tidy(() => {
        const rowsKept = keep.length === this.size ? x : tf.gather(x, tf.tensor1d(keep, 'int32'), 0);
        const out = width < this.width ? rowsKept.slice([0, 0, this.width - width, 0], [-1, -1, width, -1]) : rowsKept;
        return out === x ? tf.clone(x) : out;
      });
    const nk = this.keys.map(cut);
    const nv = this.values.map(cut);
    tf.dispose([...this.keys, ...this.values]);
    [this.keys, this.values, this.lengths, this.width] = [nk, nv, lengths, width];
  }

  /**
   * One token per row: `tokens[b]` goes at position `L_b` of row b, its keys and values join the
   * cache, and the result is the next-token logits `[B, V]` (row b predicts the token after it).
   */
  step(tokens: readonly number[]): tf.Tensor2D {
    const b = this.size;
    if (tokens.length !== b) throw new ValidationError('tokens', `one token per row: ${b} rows, got ${tokens.length}`);
    if (b === 0) throw new ValidationError('tokens', 'the batch has no rows');
    checkTokens(this.model, tokens, 'tokens');
    const c = this.model.config;
    const maxPos = Math.max(...this.lengths);
    if (maxPos >= c.maxSeqLen) throw new ValidationError('tokens', `a row is at the model's maximum length (${c.maxSeqLen})`);
    const width = this.width + 1;
    this.checkBudget(b * width);
    // A large cache takes the new column into its recent part (see RECENT_COLUMNS); a small one grows whole.
    const split = b * width >= (this.options.splitSlots ?? DEFAULT_SPLIT_SLOTS) && this.width > this.recentWidth;
    if (!split) this.mergeRecent();
    const newKeys: tf.Tensor4D[] = [];
    const newValues: tf.Tensor4D[] = [];
    let logits: tf.Tensor2D;
    try {
      const tensorflow = this.options.products !== 'learner';
      logits = withTensorflowMatMul(tensorflow && this.size <= TENSORFLOW_MATMUL_ROWS, () =>
        this.forward(tokens, width, split, newKeys, newValues, tensorflow),
      );
    } catch (e) {
      tf.dispose([...newKeys, ...newValues]);
      throw e;
    }
    if (split) {
      tf.dispose([...this.recentKeys, ...this.recentValues]);
      [this.recentKeys, this.recentValues, this.recentWidth] = [newKeys, newValues, this.recentWidth + 1];
    } else {
      tf.dispose([...this.keys, ...this.values]);
      [this.keys, this.values] = [newKeys, newValues];
    }
    this.width = width;
    this.lengths = this.lengths.map((l) => l + 1);
    if (this.recentWidth >= (this.options.recentColumns ?? RECENT_COLUMNS)) this.mergeRecent();
    return logits;
  }

  /** Moves the recent columns into the older part: one copy of the cache (a concat per layer and tensor). */
  private mergeRecent(): void {
    if (this.recentWidth === 0) return;
    const merge = (old: tf.Tensor4D[], recent: tf.Tensor4D[]): tf.Tensor4D[] => old.map((x, i) => tf.concat([x, recent[i]], 2));
    const [nk, nv] = [merge(this.keys, this.recentKeys), merge(this.values, this.recentValues)];
    tf.dispose([...this.keys, ...this.values, ...this.recentKeys, ...this.recentValues]);
    [this.keys, this.values, this.recentKeys, this.recentValues, this.recentWidth] = [nk, nv, [], [], 0];
  }

  /**
   * The step's forward: logits `[B, V]`, and each layer's grown keys and values pushed onto the two
   * lists (kept): the whole cache grown by one column, or with `split` the recent part grown, attention
   * then reading the older part and the recent part and softmax over both.
   */
  private forward(
    tokens: readonly number[],
    width: number,
    split: boolean,
    newKeys: tf.Tensor4D[],
    newValues: tf.Tensor4D[],
    tensorflowHead: boolean,
  ): tf.Tensor2D {
    const c = this.model.config;
    const b = this.size;
    const maxPos = Math.max(...this.lengths);
    const { numHeads: heads, numKvHeads: kvHeads, headDim: d, qkvBias } = c;
    const r = heads / kvHeads;
    const model = this.model;
    return tf.tidy(() => {
      // Rope tables for powers of two of positions, so the model caches few of them.
      const rope = model.rope(Math.min(c.maxSeqLen, 2 ** Math.ceil(Math.log2(maxPos + 1))));
      const pos = tf.tensor1d(this.lengths, 'int32');
      const cos = gatherRows(rope.cos, pos);
      const sin = gatherRows(rope.sin, pos);
      // Row b's valid columns after the append: the last L_b + 1.
      const maskData = new Float32Array(b * width);
      this.lengths.forEach((len, i) => maskData.fill(-1e9, i * width, i * width + width - len - 1));
      const mask = tf.tensor4d(maskData, [b, 1, 1, width]);
      let h = gatherRows(w2(model, 'model.embed_tokens.weight'), tf.tensor1d(Array.from(tokens), 'int32'));
      for (let i = 0; i < c.numLayers; i++) {
        const p = `model.layers.${i}.`;
        const n1 = rmsNorm(h, w1(model, `${p}input_layernorm.weight`), c.rmsNormEps);
        const q = rotateRows(model.linear(n1, `${p}self_attn.q_proj`, qkvBias), heads, cos, sin, 1 / Math.sqrt(d));
        const k = rotateRows(model.linear(n1, `${p}self_attn.k_proj`, qkvBias), kvHeads, cos, sin, 1);
        const v = model.linear(n1, `${p}self_attn.v_proj`, qkvBias);
        const grown = split ? [this.recentKeys[i], this.recentValues[i]] : [this.keys[i], this.values[i]];
        const append = (x: tf.Tensor4D | undefined, col: tf.Tensor): tf.Tensor4D =>
          tf.keep((x ? tf.concat([x, col.reshape([b, kvHeads, 1, d])], 2) : tf.clone(col.reshape([b, kvHeads, 1, d]))) as tf.Tensor4D);
        const keys = append(grown[0], k);
        const values = append(grown[1], v);
        newKeys.push(keys);
        newValues.push(values);
        // Query head g·r + j reads key/value head g: [B, H·d] is [B, H_kv, r, d] as it lies.
        const q4 = q.reshape<tf.Tensor4D>([b, kvHeads, r, d]);
        let attn: tf.Tensor2D;
        if (split) {
          const older = this.width - this.recentWidth;
          const scores = tf.concat([batchMatMul(q4, this.keys[i], false, true), batchMatMul(q4, keys, false, true)], 3);
          const probs = tf.softmax(tf.add(scores, mask)) as tf.Tensor4D;
          const [pOld, pRecent] = tf.split(probs, [older, width - older], 3);
          attn = tf.add(batchMatMul(pOld, this.values[i]), batchMatMul(pRecent, values)).reshape<tf.Tensor2D>([b, heads * d]);
        } else {
          const probs = tf.softmax(tf.add(batchMatMul(q4, keys, false, true), mask)) as tf.Tensor4D;
          attn = batchMatMul(probs, values).reshape<tf.Tensor2D>([b, heads * d]);
        }
        h = tf.add<tf.Tensor2D>(h, model.linear(attn, `${p}self_attn.o_proj`, c.oBias));
        h = mlp(model, h, p);
      }
      return head(model, h, tensorflowHead);
    });
  }

  /** Drops every row and frees the cache. */
  clear(): void {
    tf.dispose([...this.keys, ...this.values, ...this.recentKeys, ...this.recentValues]);
    [this.keys, this.values, this.recentKeys, this.recentValues, this.recentWidth, this.lengths, this.width] = [[], [], [], [], 0, [], 0];
  }

  dispose(): void {
    this.clear();
  }

  private checkBudget(slots: number): void {
    if (slots > this.options.tokenBudget) throw new KvCacheBudgetError(slots, this.options.tokenBudget);
  }
}
