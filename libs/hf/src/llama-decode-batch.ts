import * as tf from '@tensorflow/tfjs';
import { ValidationError } from '@srpo/core';
import { batchMatMul, decodeAttentionFused, decodeQkvFused, gatherRows, kvAppendFused, srpoMatMulRouted } from '@srpo/kernels';
import type { LlamaModel } from './llama-model';
import { KvCacheBudgetError, type LlamaKvCache } from './llama-decode';
import { checkTokens, head, mlp, norm, project, projectResidual, rotateRows, TENSORFLOW_MATMUL_ROWS, w1, w2, withTensorflowMatMul } from './llama-decode-ops';

/**
 * The 2-D product kernels of decode steps. `tensorflow` (default): TensorFlow's `MatMul` for the
 * vocabulary head, and for every product of steps of at most {@link TENSORFLOW_MATMUL_ROWS} rows,
 * where a matrix–vector product reads each weight once. `learner`: the learner's forward's own
 * (`SrpoMatMul` where the kernels route it; its products of ≤ 4 rows of x·Wᵀ, ≤ 16 with AVX-512,
 * run unpacked, and each layer's q/k/v products with RoPE and the cache append are one
 * `SrpoDecodeQkv`, its gate and up one `SrpoGateUp`: SmolLM2-135M at batch 1 ran 1.5x the tokens/s
 * of `tensorflow`, at batch 16 1.02–1.04x; 2 threads, Intel Xeon). With `learner` on `SrpoMatMul` (each element
 * one FMA chain over k, whatever the rows) and the decode-attention kernel (`SrpoDecodeAttention`,
 * SrpoAttention's order), a step sums exactly as the full forward: identical log-probs on SmolLM2.
 * With `tensorflow` the products sum in oneDNN's order: up to 1.9e-5 from the learner's recompute.
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

/** What a step's layers share for attention (see `LlamaDecodeBatch.attend`). */
interface StepAttention {
  split: boolean;
  /** Columns after the append. */
  width: number;
  /** Row b's first valid column, `[B]` int32 (the kernel's form of the padding). */
  start: tf.Tensor1D;
  /** An empty recent part `[B, H_kv, 0, d]` for the kernel when the cache grows whole. */
  noRecent: tf.Tensor4D | undefined;
  /** Adds the −1e9 padding mask to scores (the composite's form). */
  masked: (scores: tf.Tensor4D) => tf.Tensor4D;
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
    const { numKvHeads: kvHeads, headDim: d } = c;
    const model = this.model;
    return tf.tidy(() => {
      // Rope tables for powers of two of positions, so the model caches few of them.
      const rope = model.ropeCovering(maxPos + 1);
      const pos = tf.tensor1d(this.lengths, 'int32');
      const cos = gatherRows(rope.cos, pos);
      const sin = gatherRows(rope.sin, pos);
      // Row b's valid columns after the append: the last L_b + 1.
      // No mask where no row is padded (one row, or a prompt's n samples): one op fewer per layer.
      const padded = this.lengths.some((len) => len + 1 < width);
      const maskData = new Float32Array(padded ? b * width : 0);
      if (padded) this.lengths.forEach((len, i) => maskData.fill(-1e9, i * width, i * width + width - len - 1));
      const mask = padded ? tf.tensor4d(maskData, [b, 1, 1, width]) : undefined;
      const masked = (scores: tf.Tensor4D): tf.Tensor4D => (mask ? tf.add(scores, mask) : scores);
      // For the native kernel (SrpoDecodeAttention): row b's first valid column, and an empty recent part when the cache grows whole.
      const start = tf.tensor1d(
        this.lengths.map((len) => width - len - 1),
        'int32',
      );
      const empty = tf.zeros<tf.Rank.R4>([b, kvHeads, 0, d]);
      const zeros = tf.zeros<tf.Rank.R1>([c.hiddenSize]); // the output projections' bias where they have none (projectResidual)
      const noRecent = split ? undefined : empty;
      let h = gatherRows(w2(model, 'model.embed_tokens.weight'), tf.tensor1d(Array.from(tokens), 'int32'));
      for (let i = 0; i < c.numLayers; i++) {
        const p = `model.layers.${i}.`;
        const n1 = norm(h, w1(model, `${p}input_layernorm.weight`), c.rmsNormEps);
        const grown = split ? [this.recentKeys[i], this.recentValues[i]] : [this.keys[i], this.values[i]];
        const [q, keys, values] = this.attentionInputs(n1, p, cos, sin, grown[0], grown[1], empty);
        newKeys.push(tf.keep(keys));
        newValues.push(tf.keep(values));
        const attn = this.attend(q, i, keys, values, { split, width, start, noRecent, masked });
        h = projectResidual(model, h, attn, `${p}self_attn.o_proj`, c.oBias, zeros);
        h = mlp(model, h, p, zeros);
      }
      return head(model, h, tensorflowHead);
    });
  }

  /**
   * Layer `p`'s query `[B, H·d]` (RoPE, scaled by 1/√d) and its cache grown by the step's keys (RoPE)
   * and values, from the normed rows `n1`: one `SrpoDecodeQkv` where the products run `SrpoMatMul`
   * and no adapter term or bias comes after them, else the products (with the adapter's terms),
   * `SrpoRope` and one `SrpoKvAppend` (or a reshape and a concat per tensor). The same bits either way.
   */
  private attentionInputs(
    n1: tf.Tensor2D,
    p: string,
    cos: tf.Tensor2D,
    sin: tf.Tensor2D,
    oldKeys: tf.Tensor4D | undefined,
    oldValues: tf.Tensor4D | undefined,
    empty: tf.Tensor4D,
  ): [tf.Tensor2D, tf.Tensor4D, tf.Tensor4D] {
    const model = this.model;
    const { numHeads: heads, numKvHeads: kvHeads, headDim: d, qkvBias } = model.config;
    const b = this.size;
    const names = ['q_proj', 'k_proj', 'v_proj'].map((n) => `${p}self_attn.${n}`);
    const [dq, dk, dv] = names.map((n) => model.adapter?.delta(n1, n));
    if (!qkvBias && !dq && !dk && !dv && srpoMatMulRouted()) {
      const [wq, wk, wv] = names.map((n) => w2(model, `${n}.weight`));
      const fused = decodeQkvFused(n1, wq, wk, wv, cos, sin, oldKeys ?? empty, oldValues ?? empty, 1 / Math.sqrt(d));
      if (fused) return fused;
    }
    const q = rotateRows(project(model, n1, names[0], qkvBias, dq), heads, cos, sin, 1 / Math.sqrt(d));
    const k = rotateRows(project(model, n1, names[1], qkvBias, dk), kvHeads, cos, sin, 1);
    const v = project(model, n1, names[2], qkvBias, dv);
    const appended = kvAppendFused(oldKeys ?? empty, oldValues ?? empty, k, v);
    if (appended) return [q, ...appended];
    const append = (x: tf.Tensor4D | undefined, col: tf.Tensor): tf.Tensor4D =>
      (x ? tf.concat([x, col.reshape([b, kvHeads, 1, d])], 2) : tf.clone(col.reshape([b, kvHeads, 1, d]))) as tf.Tensor4D;
    return [q, append(oldKeys, k), append(oldValues, v)];
  }

  /**
   * A step's attention in layer i, `[B, H·d]`: the new queries `q` against the cache, `keys`/`values`
   * being the grown whole cache, or with `split` the grown recent part after the older one. The
   * native kernel (`SrpoDecodeAttention`) sums in the full forward's order (SrpoAttention's), so
   * a cached step's numbers are the full forward's; elsewhere (WebGPU, no addon) the composite:
   * batched products, the −1e9 mask on the padding, TensorFlow's Softmax.
   */
  private attend(q: tf.Tensor2D, i: number, keys: tf.Tensor4D, values: tf.Tensor4D, at: StepAttention): tf.Tensor2D {
    const { numHeads: heads, numKvHeads: kvHeads, headDim: d } = this.model.config;
    const b = this.size;
    const fused = at.split
      ? decodeAttentionFused(q, this.keys[i], this.values[i], keys, values, at.start)
      : decodeAttentionFused(q, keys, values, at.noRecent as tf.Tensor4D, at.noRecent as tf.Tensor4D, at.start);
    if (fused) return fused;
    // Query head g·r + j reads key/value head g: [B, H·d] is [B, H_kv, r, d] as it lies.
    const q4 = q.reshape<tf.Tensor4D>([b, kvHeads, heads / kvHeads, d]);
    if (at.split) {
      const older = this.width - this.recentWidth;
      const scores = tf.concat([batchMatMul(q4, this.keys[i], false, true), batchMatMul(q4, keys, false, true)], 3);
      const probs = tf.softmax(at.masked(scores));
      const [pOld, pRecent] = tf.split(probs, [older, at.width - older], 3);
      return tf.add(batchMatMul(pOld, this.values[i]), batchMatMul(pRecent, values)).reshape<tf.Tensor2D>([b, heads * d]);
    }
    const probs = tf.softmax(at.masked(batchMatMul(q4, keys, false, true)));
    return batchMatMul(probs, values).reshape<tf.Tensor2D>([b, heads * d]);
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
