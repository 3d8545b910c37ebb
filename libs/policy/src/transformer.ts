import * as tf from '@tensorflow/tfjs';
import { ValidationError } from '@srpo/core';
import { CausalMasks } from './causal-mask';
import { SeededRng } from './rng';
import { causalAttention, embed, gelu, normConstants, normLinear, residualLinear, type NormConstants } from './transformer-ops';
import { gatherRows, transpose2d } from '@srpo/kernels';

/** Shape of a causal transformer language model. */
export interface TransformerConfig {
  /** Number of token ids; ids are in [0, vocabSize). */
  vocabSize: number;
  /** Residual stream width. */
  dModel: number;
  /** Number of transformer blocks. */
  nLayers: number;
  /** Attention heads per block; must divide `dModel`. */
  nHeads: number;
  /** Longest input the model accepts (number of learned positions). */
  maxSeqLen: number;
  /** Hidden width of the MLP; default `4 * dModel`. */
  dMlp?: number;
  /** Output head shares the token embedding matrix (logits = h · Eᵀ); default true. */
  tiedEmbeddings?: boolean;
  /** Layer-norm epsilon; default 1e-5. */
  layerNormEps?: number;
}

export type ResolvedTransformerConfig = Required<TransformerConfig>;

/** Fills defaults and validates every field; throws `ValidationError` naming the field. */
export function resolveTransformerConfig(config: TransformerConfig): ResolvedTransformerConfig {
  const positiveInt = (field: keyof TransformerConfig, v: unknown): number => {
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 1) {
      throw new ValidationError(`config.${field}`, `must be a positive integer, got ${String(v)}`);
    }
    return v;
  };
  const resolved: ResolvedTransformerConfig = {
    vocabSize: positiveInt('vocabSize', config.vocabSize),
    dModel: positiveInt('dModel', config.dModel),
    nLayers: positiveInt('nLayers', config.nLayers),
    nHeads: positiveInt('nHeads', config.nHeads),
    maxSeqLen: positiveInt('maxSeqLen', config.maxSeqLen),
    dMlp: positiveInt('dMlp', config.dMlp ?? 4 * config.dModel),
    tiedEmbeddings: config.tiedEmbeddings ?? true,
    layerNormEps: config.layerNormEps ?? 1e-5,
  };
  if (resolved.dModel % resolved.nHeads !== 0) {
    throw new ValidationError('config.nHeads', `must divide dModel (${resolved.dModel}), got ${resolved.nHeads}`);
  }
  if (typeof resolved.tiedEmbeddings !== 'boolean') {
    throw new ValidationError('config.tiedEmbeddings', `must be a boolean, got ${String(resolved.tiedEmbeddings)}`);
  }
  if (!(resolved.layerNormEps > 0) || !Number.isFinite(resolved.layerNormEps)) {
    throw new ValidationError('config.layerNormEps', `must be a positive number, got ${resolved.layerNormEps}`);
  }
  return resolved;
}

/** Spec of one weight: canonical name, shape and init. */
export interface WeightSpec {
  name: string;
  shape: number[];
  init: { kind: 'normal'; std: number } | { kind: 'zeros' } | { kind: 'ones' };
}

/**
 * Canonical weight layout for a config, in initialisation order. Names are
 * stable across processes (they key checkpoints and the weights hash).
 *
 * GPT-2 initialisation: N(0, 0.02) matrices, residual output projections
 * scaled by 1/√(2·nLayers) so the residual stream variance stays flat with depth.
 */
export function weightSpecs(config: ResolvedTransformerConfig): WeightSpec[] {
  const { vocabSize: v, dModel: d, dMlp: f, maxSeqLen: t, nLayers: l } = config;
  const std = 0.02;
  const resid = std / Math.sqrt(2 * l);
  const specs: WeightSpec[] = [
    { name: 'tok_emb', shape: [v, d], init: { kind: 'normal', std } },
    { name: 'pos_emb', shape: [t, d], init: { kind: 'normal', std: 0.01 } },
  ];
  for (let i = 0; i < l; i++) {
    const p = `blocks.${i}.`;
    specs.push(
      { name: `${p}ln1.g`, shape: [d], init: { kind: 'ones' } },
      { name: `${p}ln1.b`, shape: [d], init: { kind: 'zeros' } },
      { name: `${p}attn.wqkv`, shape: [d, 3 * d], init: { kind: 'normal', std } },
      { name: `${p}attn.bqkv`, shape: [3 * d], init: { kind: 'zeros' } },
      { name: `${p}attn.wo`, shape: [d, d], init: { kind: 'normal', std: resid } },
      { name: `${p}attn.bo`, shape: [d], init: { kind: 'zeros' } },
      { name: `${p}ln2.g`, shape: [d], init: { kind: 'ones' } },
      { name: `${p}ln2.b`, shape: [d], init: { kind: 'zeros' } },
      { name: `${p}mlp.w1`, shape: [d, f], init: { kind: 'normal', std } },
      { name: `${p}mlp.b1`, shape: [f], init: { kind: 'zeros' } },
      { name: `${p}mlp.w2`, shape: [f, d], init: { kind: 'normal', std: resid } },
      { name: `${p}mlp.b2`, shape: [d], init: { kind: 'zeros' } },
    );
  }
  specs.push({ name: 'ln_f.g', shape: [d], init: { kind: 'ones' } }, { name: 'ln_f.b', shape: [d], init: { kind: 'zeros' } });
  if (!config.tiedEmbeddings) specs.push({ name: 'head', shape: [d, v], init: { kind: 'normal', std } });
  return specs;
}

/**
 * A causal (decoder-only) transformer LM built directly from tfjs ops:
 * token embeddings + learned positions, pre-norm blocks
 * (x + Attn(LN(x)), x + MLP(LN(x)) with a tanh-approximated GELU), a final
 * layer norm and a tied or untied output head.
 *
 * Owns its `tf.Variable`s; call {@link dispose} when done. Not thread-safe in
 * the sense that forward passes read the live variables (an update step
 * running concurrently would be seen mid-way) — callers serialise updates.
 */
export class TransformerModel {
  /** Discriminates the model families a policy can hold (checkpoints record it). */
  readonly kind = 'causal-transformer' as const;
  readonly config: ResolvedTransformerConfig;
  /** Live weights by canonical name (`blocks.0.attn.wqkv`, ...). */
  readonly weights: ReadonlyMap<string, tf.Variable>;
  /** Causal masks, short lengths cached (bounded: causal-mask.ts). */
  private readonly masks = new CausalMasks();
  private qScale: tf.Tensor1D | undefined;
  private norm: NormConstants | undefined;
  private disposed = false;

  private constructor(config: ResolvedTransformerConfig, weights: Map<string, tf.Variable>) {
    this.config = config;
    this.weights = weights;
  }

  /**
   * Creates a model with weights drawn from a {@link SeededRng}: the same
   * config and seed give bit-identical weights on every backend.
   */
  static create(config: TransformerConfig, seed: number): TransformerModel {
    const resolved = resolveTransformerConfig(config);
    const rng = new SeededRng(seed);
    const values = new Map<string, Float32Array>();
    for (const spec of weightSpecs(resolved)) {
      const n = spec.shape.reduce((a, b) => a * b, 1);
      let data: Float32Array;
      if (spec.init.kind === 'normal') data = rng.normalArray(n, spec.init.std);
      else if (spec.init.kind === 'ones') data = new Float32Array(n).fill(1);
      else data = new Float32Array(n);
      values.set(spec.name, data);
    }
    return TransformerModel.fromValues(resolved, values);
  }

  /**
   * Builds a model from raw float32 values keyed by canonical name (checkpoint
   * restore). Every weight of the config must be present with the right size.
   */
  static fromValues(config: TransformerConfig, values: ReadonlyMap<string, Float32Array>): TransformerModel {
    const resolved = resolveTransformerConfig(config);
    const specs = weightSpecs(resolved);
    for (const spec of specs) {
      const data = values.get(spec.name);
      const n = spec.shape.reduce((a, b) => a * b, 1);
      if (!data) throw new ValidationError(`weights.${spec.name}`, 'is missing');
      if (data.length !== n) throw new ValidationError(`weights.${spec.name}`, `expected ${n} values for shape [${spec.shape.join(',')}], got ${data.length}`);
    }
    const extra = [...values.keys()].filter((k) => !specs.some((s) => s.name === k));
    if (extra.length > 0) throw new ValidationError('weights', `unexpected weights for this config: ${extra.join(', ')}`);
    // No explicit tfjs variable names: those are engine-global and must be unique, and the
    // engine's own ids are. Canonical names live in this map.
    const weights = new Map<string, tf.Variable>();
    for (const spec of specs) {
      const t = tf.tensor(values.get(spec.name) as Float32Array, spec.shape, 'float32');
      weights.set(spec.name, tf.variable(t, true));
      t.dispose();
    }
    return new TransformerModel(resolved, weights);
  }

  /** Canonical weight names in sorted (code-unit) order: the order used by hashes and checkpoints. */
  weightNames(): string[] {
    return [...this.weights.keys()].sort();
  }

  /** Trainable variables in canonical (sorted-name) order. */
  trainableVariables(): tf.Variable[] {
    return this.weightNames().map((n) => this.weight(n));
  }

  /** Total number of scalar parameters. */
  parameterCount(): number {
    let n = 0;
    for (const v of this.weights.values()) n += v.size;
    return n;
  }

  /**
   * Next-token logits for every position.
   *
   * @param tokens int32 `[B, T]` token ids, `1 <= T <= maxSeqLen`.
   * @param temperature logits are divided by it (folded into the output projection); default 1.
   * @param rows int32 indices into the B·T positions: compute only those rows' logits.
   * @returns float32 `[B·T, V]` logits (or `[R, V]` with rows), row `b·T + t` predicts the token after position t of row b.
   *   Kept 2-D because every consumer (log-softmax, sampling) works per row and it saves reshapes.
   */
  logits2d(tokens: tf.Tensor2D, temperature = 1, rows?: tf.Tensor1D): tf.Tensor2D {
    this.assertLive();
    const [b, t] = tokens.shape;
    if (t < 1 || t > this.config.maxSeqLen) {
      throw new ValidationError('tokens', `sequence length must be in [1, ${this.config.maxSeqLen}], got ${t}`);
    }
    return tf.tidy(() => {
      const { dModel: d, nHeads: nh, vocabSize: v, layerNormEps: eps } = this.config;
      const w = (name: string): tf.Tensor2D => this.weight(name) as unknown as tf.Tensor2D;
      const w1 = (name: string): tf.Tensor1D => this.weight(name) as unknown as tf.Tensor1D;
      const pos = t === this.config.maxSeqLen ? w('pos_emb') : w('pos_emb').slice<tf.Tensor2D>([0, 0], [t, d]);
      let h = embed(tokens.reshape([b * t]), w('tok_emb'), pos, b, v <= ONE_HOT_MAX_VOCAB);
      const mask = this.masks.get(t);
      const qScale = this.qkvColumnScale();
      const nc = this.normConsts();
      for (let i = 0; i < this.config.nLayers; i++) {
        const p = `blocks.${i}.`;
        const qkv = normLinear(h, w1(`${p}ln1.g`), w1(`${p}ln1.b`), w(`${p}attn.wqkv`), w1(`${p}attn.bqkv`), eps, nc, qScale);
        h = residualLinear(h, causalAttention(qkv, mask, b, nh), w(`${p}attn.wo`), w1(`${p}attn.bo`));
        const hidden = gelu(normLinear(h, w1(`${p}ln2.g`), w1(`${p}ln2.b`), w(`${p}mlp.w1`), w1(`${p}mlp.b1`), eps, nc));
        h = residualLinear(h, hidden, w(`${p}mlp.w2`), w1(`${p}mlp.b2`));
      }
      const head = this.config.tiedEmbeddings ? transpose2d(w('tok_emb')) : w('head');
      const outScale = temperature === 1 ? undefined : tf.fill<tf.Rank.R1>([v], 1 / temperature);
      // The final layer norm is per row: select the rows first, and norm and project only those.
      const last = rows ? gatherRows(h, rows) : h;
      return normLinear(last, w1('ln_f.g'), w1('ln_f.b'), head, undefined, eps, nc, outScale);
    });
  }

  /**
   * Next-token logits as `[B, T, V]`.
   * @param tokens int32 `[B, T]`.
   */
  logits(tokens: tf.Tensor2D): tf.Tensor3D {
    const [b, t] = tokens.shape;
    return tf.tidy(() => this.logits2d(tokens).reshape([b, t, this.config.vocabSize]));
  }

  /** Releases the variables and cached constants. Further use throws. */
  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    for (const v of this.weights.values()) v.dispose();
    this.masks.dispose();
    this.qScale?.dispose();
    this.norm?.meanCol.dispose();
  }

  get isDisposed(): boolean {
    return this.disposed;
  }

  /** The live variable for a canonical name. */
  weight(name: string): tf.Variable {
    const w = this.weights.get(name);
    if (!w) throw new ValidationError('weight', `no weight named ${name}`);
    return w;
  }

  private assertLive(): void {
    if (this.disposed) throw new ValidationError('model', 'has been disposed');
  }

  /** `[3·D]`: 1/√d_h on the q columns of the fused qkv projection, 1 on k and v. Cached. */
  private qkvColumnScale(): tf.Tensor1D {
    if (!this.qScale) {
      const d = this.config.dModel;
      const data = new Float32Array(3 * d).fill(1);
      data.fill(1 / Math.sqrt(d / this.config.nHeads), 0, d);
      this.qScale = tf.keep(tf.tensor1d(data));
    }
    return this.qScale;
  }

  private normConsts(): NormConstants {
    if (!this.norm) {
      const c = normConstants(this.config.dModel);
      this.norm = { meanCol: tf.keep(c.meanCol) };
    }
    return this.norm;
  }
}

/** Vocabularies up to this size embed by one-hot matmul where the project's row kernels are not loaded (see transformer-ops.ts' embed). */
const ONE_HOT_MAX_VOCAB = 512;

/** Creates a transformer with seeded initialisation; see {@link TransformerModel.create}. */
export function createTransformer(config: TransformerConfig, seed: number): TransformerModel {
  return TransformerModel.create(config, seed);
}
