import * as tf from '@tensorflow/tfjs';
import { ValidationError } from '@srpo/core';
import type { HfModelConfig } from './hf-config';
import { linear, ropeAttention, rmsNorm, swiGlu, type RopeTables } from './llama-ops';
import { ropeTables } from './rope';
import { gatherRows } from '@srpo/kernels';
import { CausalMasks } from '@srpo/policy';

/** Where a Hugging Face model came from: its directory and the SHA-256 of its files. */
export interface HfModelSource {
  dir: string;
  hash: string;
}

/** One weight of a Llama-family checkpoint: its Hugging Face name and `[out, in]` shape. */
export interface HfWeightSpec {
  name: string;
  shape: number[];
}

/**
 * The tensors a config needs, under transformers' names (`model.layers.0.self_attn.q_proj.weight`)
 * and shapes (linear weights `[out, in]`, as `nn.Linear` stores them). The same list is what
 * a checkpoint must hold and what export writes.
 */
export function hfWeightSpecs(c: HfModelConfig): HfWeightSpec[] {
  const d = c.hiddenSize;
  const q = c.numHeads * c.headDim;
  const kv = c.numKvHeads * c.headDim;
  const f = c.intermediateSize;
  const specs: HfWeightSpec[] = [{ name: 'model.embed_tokens.weight', shape: [c.vocabSize, d] }];
  const linear = (name: string, out: number, inp: number, bias: boolean): void => {
    specs.push({ name: `${name}.weight`, shape: [out, inp] });
    if (bias) specs.push({ name: `${name}.bias`, shape: [out] });
  };
  for (let i = 0; i < c.numLayers; i++) {
    const p = `model.layers.${i}.`;
    specs.push({ name: `${p}input_layernorm.weight`, shape: [d] });
    linear(`${p}self_attn.q_proj`, q, d, c.qkvBias);
    linear(`${p}self_attn.k_proj`, kv, d, c.qkvBias);
    linear(`${p}self_attn.v_proj`, kv, d, c.qkvBias);
    linear(`${p}self_attn.o_proj`, d, q, c.oBias);
    specs.push({ name: `${p}post_attention_layernorm.weight`, shape: [d] });
    linear(`${p}mlp.gate_proj`, f, d, c.mlpBias);
    linear(`${p}mlp.up_proj`, f, d, c.mlpBias);
    linear(`${p}mlp.down_proj`, d, f, c.mlpBias);
  }
  specs.push({ name: 'model.norm.weight', shape: [d] });
  if (!c.tieWordEmbeddings) specs.push({ name: 'lm_head.weight', shape: [c.vocabSize, d] });
  return specs;
}

/**
 * A trainable addition to the model's linear layers (LoRA, see `lora.ts`). While one is
 * attached ({@link LlamaModel.setAdapter}) the forward adds {@link delta} to each linear's
 * output, the base weights are frozen, and the adapter's weights are what the model reports
 * as trainable: parameter-efficient fine-tuning trains the small adapter, never the base.
 */
export interface LinearAdapter {
  /** The term added to the output of linear `name` (`model.layers.0.self_attn.q_proj`) at input x `[N, in]`, or null where this adapter adds nothing. */
  delta(x: tf.Tensor2D, name: string): tf.Tensor2D | null;
  /** The adapter's own variables by canonical name (disjoint from the base names). */
  readonly weights: ReadonlyMap<string, tf.Variable>;
  dispose(): void;
}

/** Tensors some checkpoints carry that the forward pass does not read (old Llama files saved the rotary buffer). */
const IGNORED = /\.rotary_emb\.inv_freq$/;

/**
 * A Llama-family decoder (Llama, Qwen2, Mistral) in tfjs ops, computing in float32:
 *
 *   h₀ = E[x]
 *   h  = h + o_proj(Attn(RoPE(q_proj(n)), RoPE(k_proj(n)), v_proj(n))),  n = RMSNorm(h)
 *   h  = h + down_proj(SiLU(gate_proj(n)) ⊙ up_proj(n)),                  n = RMSNorm(h)
 *   logits = RMSNorm(h) · Wₕᵀ / τ,  Wₕ = E when embeddings are tied
 *
 * with causal grouped-query attention (query head i reads key/value head ⌊i / (H / H_kv)⌋,
 * transformers' `repeat_kv`) and RMSNorm(x) = w ⊙ x / √(mean(x²) + ε). Mirrors transformers'
 * `modeling_llama.py` eager path step for step; Qwen2 adds q/k/v biases, Mistral is Llama
 * without a sliding window (the loader refuses one).
 *
 * Each piece (linear, RMSNorm, the SwiGLU gate, attention with RoPE) is one tape entry with a
 * hand-written gradient and, on tfjs-node, the project's fused kernels (llama-ops.ts).
 *
 * Owns its variables; {@link dispose} when done. Same surface as the project's own
 * `TransformerModel` where the log-prob, sampling and update code needs it.
 */
export class LlamaModel {
  /** Discriminates the model families a policy can hold (checkpoints record it). */
  readonly kind = 'hf-llama' as const;
  readonly config: HfModelConfig;
  private readonly base: ReadonlyMap<string, tf.Variable>;
  private linearAdapter: LinearAdapter | undefined;
  /**
   * The Hugging Face directory the model was loaded from and the hash of its files
   * ({@link hfDirectoryHash}): checkpoints name it, export takes config and tokenizer from it.
   */
  source?: HfModelSource;
  private readonly ropeCache = new Map<number, RopeTables>();
  /** Causal masks stacked per key/value group, short lengths cached (bounded: @srpo/policy's causal-mask.ts). */
  private readonly masks: CausalMasks;
  private disposed = false;
  /** False for a view ({@link adapterView}): the base variables belong to another model. */
  private readonly ownsBase: boolean;

  private constructor(config: HfModelConfig, weights: ReadonlyMap<string, tf.Variable>, ownsBase = true) {
    this.config = config;
    this.base = weights;
    this.ownsBase = ownsBase;
    this.masks = new CausalMasks(config.numHeads / config.numKvHeads);
  }

  /**
   * A model over this one's base variables (the same objects, nothing copied) with its own
   * adapter, or none: a server keeps one base in memory and serves several LoRA versions as
   * views, each forwarding its own rows. A view never changes the base's `trainable` flags
   * (serving must not touch training state), and disposing it disposes its adapter and
   * caches, never the base; the base must outlive its views.
   */
  adapterView(adapter?: LinearAdapter): LlamaModel {
    if (this.disposed) throw new ValidationError('model', 'has been disposed');
    const view = new LlamaModel(this.config, this.base, false);
    view.source = this.source;
    if (adapter) view.setAdapter(adapter);
    return view;
  }

  /** The trainable weights by canonical name: the base weights, or an attached adapter's alone (the base is then frozen). */
  get weights(): ReadonlyMap<string, tf.Variable> {
    return this.linearAdapter?.weights ?? this.base;
  }

  /** The base checkpoint's weights under their HF names, adapter or not (what export writes). */
  get baseWeights(): ReadonlyMap<string, tf.Variable> {
    return this.base;
  }

  get adapter(): LinearAdapter | undefined {
    return this.linearAdapter;
  }

  /**
   * Attaches an adapter (or detaches with undefined; the caller then owns, and disposes, the
   * old one). Attaching freezes the base variables (`trainable = false`, so even
   * `tf.variableGrads` without a list leaves them alone) and detaching thaws them. The base
   * variables are the same objects throughout: nothing is copied.
   */
  setAdapter(adapter: LinearAdapter | undefined): void {
    if (this.disposed) throw new ValidationError('model', 'has been disposed');
    if (adapter && this.linearAdapter) throw new ValidationError('adapter', 'the model already has one attached; detach it first');
    for (const name of adapter?.weights.keys() ?? []) {
      if (this.base.has(name)) throw new ValidationError(`adapter.weights.${name}`, 'collides with a base weight name');
    }
    this.linearAdapter = adapter;
    if (this.ownsBase) for (const v of this.base.values()) v.trainable = adapter === undefined;
  }

  /**
   * Builds the model from float32 values keyed by Hugging Face name. Every tensor of
   * {@link hfWeightSpecs} must be present with its shape; a tied checkpoint may also carry
   * `lm_head.weight` (transformers ties it to the embedding and so does this), and the
   * rotary buffer of old files is skipped. Anything else is refused, naming the tensor.
   */
  static fromTensors(config: HfModelConfig, tensors: ReadonlyMap<string, { shape: readonly number[]; data: Float32Array }>): LlamaModel {
    const shapes = new Map([...tensors].map(([n, t]) => [n, t.shape] as const));
    return LlamaModel.fromSource(config, shapes, (name) => (tensors.get(name) as { data: Float32Array }).data);
  }

  /**
   * {@link fromTensors} with the values read one tensor at a time: names and shapes are
   * checked first (from file headers), then each weight is read, made a variable and its
   * host copy dropped, so loading peaks at the model plus its largest tensor instead of
   * twice the model. A read that fails disposes what was made.
   */
  static fromSource(config: HfModelConfig, shapes: ReadonlyMap<string, readonly number[]>, read: (name: string) => Float32Array): LlamaModel {
    const specs = hfWeightSpecs(config);
    const known = new Set(specs.map((s) => s.name));
    for (const spec of specs) {
      const shape = shapes.get(spec.name);
      if (!shape) throw new ValidationError(`weights.${spec.name}`, 'is missing from the checkpoint');
      if (shape.length !== spec.shape.length || shape.some((n, i) => n !== spec.shape[i])) {
        throw new ValidationError(`weights.${spec.name}`, `shape [${shape.join(',')}] does not match the config's [${spec.shape.join(',')}]`);
      }
    }
    for (const name of shapes.keys()) {
      if (known.has(name) || IGNORED.test(name) || (config.tieWordEmbeddings && name === 'lm_head.weight')) continue;
      throw new ValidationError(`weights.${name}`, 'is not part of this architecture (unexpected tensor)');
    }
    const weights = new Map<string, tf.Variable>();
    try {
      for (const spec of specs) {
        const value = tf.tensor(read(spec.name), spec.shape, 'float32');
        weights.set(spec.name, tf.variable(value, true));
        value.dispose();
      }
    } catch (e) {
      for (const v of weights.values()) v.dispose();
      throw e;
    }
    return new LlamaModel(config, weights);
  }

  /** Trainable names ({@link weights}) in sorted (code-unit) order: the order of hashes, checkpoints and gradients. */
  weightNames(): string[] {
    return [...this.weights.keys()].sort();
  }

  trainableVariables(): tf.Variable[] {
    return this.weightNames().map((n) => this.weight(n));
  }

  /** Every parameter the forward reads: base and adapter. */
  parameterCount(): number {
    let n = 0;
    for (const v of this.base.values()) n += v.size;
    for (const v of this.linearAdapter?.weights.values() ?? []) n += v.size;
    return n;
  }

  /** A base weight by HF name, or an attached adapter's weight by its name. */
  weight(name: string): tf.Variable {
    const w = this.base.get(name) ?? this.linearAdapter?.weights.get(name);
    if (!w) throw new ValidationError('weight', `no weight named ${name}`);
    return w;
  }

  /**
   * Next-token logits for every position.
   * @param tokens int32 `[B, T]`, `1 ≤ T ≤ maxSeqLen`; rows right-padded (causal attention
   *   keeps padding from reaching real positions).
   * @param temperature logits are divided by it; default 1.
   * @param rows int32 indices into the B·T positions: compute only those rows' logits.
   * @returns float32 `[B·T, V]` (or `[R, V]` with rows); row `b·T + t` predicts the token after position t of row b.
   */
  logits2d(tokens: tf.Tensor2D, temperature = 1, rows?: tf.Tensor1D): tf.Tensor2D {
    if (this.disposed) throw new ValidationError('model', 'has been disposed');
    const [b, t] = tokens.shape;
    const c = this.config;
    if (t < 1 || t > c.maxSeqLen) throw new ValidationError('tokens', `sequence length must be in [1, ${c.maxSeqLen}], got ${t}`);
    return tf.tidy((): tf.Tensor2D => {
      // Weights by rank: the variables are rank-erased, llama-ops takes them shaped.
      const w1 = (name: string): tf.Tensor1D => this.weight(name) as unknown as tf.Tensor1D;
      const w2 = (name: string): tf.Tensor2D => this.weight(name) as unknown as tf.Tensor2D;
      const eps = c.rmsNormEps;
      let h = gatherRows(w2('model.embed_tokens.weight'), tokens.reshape<tf.Tensor1D>([b * t]));
      const rope = this.rope(t);
      const mask = this.causalMask(t);
      for (let i = 0; i < c.numLayers; i++) {
        const p = `model.layers.${i}.`;
        const n1 = rmsNorm(h, w1(`${p}input_layernorm.weight`), eps);
        const attn = this.attention(n1, p, b, t, rope, mask);
        h = tf.add<tf.Tensor2D>(h, this.linear(attn, `${p}self_attn.o_proj`, c.oBias));
        const n2 = rmsNorm(h, w1(`${p}post_attention_layernorm.weight`), eps);
        const gate = this.linear(n2, `${p}mlp.gate_proj`, c.mlpBias);
        const up = this.linear(n2, `${p}mlp.up_proj`, c.mlpBias);
        h = tf.add<tf.Tensor2D>(h, this.linear(swiGlu(gate, up), `${p}mlp.down_proj`, c.mlpBias));
      }
      const head = w2(c.tieWordEmbeddings ? 'model.embed_tokens.weight' : 'lm_head.weight');
      // RMSNorm is per row: select the rows first, and norm and project only those.
      const last = rows ? gatherRows(h, rows) : h;
      const logits = linear(rmsNorm(last, w1('model.norm.weight'), eps), head);
      return temperature === 1 ? logits : tf.div<tf.Tensor2D>(logits, temperature);
    });
  }

  /** `[B, T, V]` logits; see {@link logits2d}. */
  logits(tokens: tf.Tensor2D): tf.Tensor3D {
    const [b, t] = tokens.shape;
    return tf.tidy(() => this.logits2d(tokens).reshape([b, t, this.config.vocabSize]));
  }

  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    if (this.ownsBase) for (const v of this.base.values()) v.dispose();
    this.linearAdapter?.dispose();
    this.linearAdapter = undefined;
    for (const r of this.ropeCache.values()) tf.dispose([r.cos, r.sin, r.negSin]);
    this.masks.dispose();
  }

  get isDisposed(): boolean {
    return this.disposed;
  }

  /**
   * `x · Wᵀ (+ b)` for a `[out, in]` weight, plus the attached adapter's term (added last, as peft's LoRA `Linear.forward` does).
   * Public for incremental decoding (llama-decode.ts), which must project exactly as the forward does.
   */
  linear(x: tf.Tensor2D, name: string, bias: boolean): tf.Tensor2D {
    const w = this.weight(`${name}.weight`) as unknown as tf.Tensor2D;
    const b = bias ? (this.weight(`${name}.bias`) as unknown as tf.Tensor1D) : undefined;
    const out = linear(x, w, b);
    const delta = this.linearAdapter?.delta(x, name);
    return delta ? tf.add<tf.Tensor2D>(out, delta) : out;
  }

  /** Causal grouped-query attention with RoPE on normed input `[B·T, D]` → `[B·T, H·d]` (llama-ops' {@link ropeAttention}). */
  private attention(n: tf.Tensor2D, p: string, b: number, t: number, rope: RopeTables, mask: tf.Tensor2D): tf.Tensor2D {
    const { numHeads: heads, numKvHeads: kvHeads, headDim, qkvBias } = this.config;
    const q = this.linear(n, `${p}self_attn.q_proj`, qkvBias);
    const k = this.linear(n, `${p}self_attn.k_proj`, qkvBias);
    const v = this.linear(n, `${p}self_attn.v_proj`, qkvBias);
    return ropeAttention(q, k, v, { b, t, heads, kvHeads, headDim }, rope, mask);
  }

  /**
   * RoPE tables for positions 0..t−1. Only powers of two (and `maxSeqLen`) are cached, so the cache
   * holds at most log2(maxSeqLen) + 2 sets whatever lengths come (one per length grew without bound
   * in a sampler or server); any other t is a slice of the next cached set, a new tensor: call
   * inside a `tf.tidy`.
   */
  rope(t: number): RopeTables {
    const r = this.ropeCovering(t);
    if (r.cos.shape[0] === t) return r;
    const cut = (x: tf.Tensor2D): tf.Tensor2D => x.slice([0, 0], [t, -1]);
    return { cos: cut(r.cos), sin: cut(r.sin), negSin: cut(r.negSin) };
  }

  /** The cached tables covering positions 0..t−1 (the next power of two, or `maxSeqLen`), kept by the model: llama-decode gathers rows of them by position. */
  ropeCovering(t: number): RopeTables {
    const size = Math.min(this.config.maxSeqLen, 2 ** Math.ceil(Math.log2(t)));
    let r = this.ropeCache.get(size);
    if (!r) {
      const { cos, sin } = ropeTables(this.config, size);
      const d = this.config.headDim;
      const neg = sin.map((x) => -x);
      r = { cos: tf.keep(tf.tensor2d(cos, [size, d])), sin: tf.keep(tf.tensor2d(sin, [size, d])), negSin: tf.keep(tf.tensor2d(neg, [size, d])) };
      this.ropeCache.set(size, r);
    }
    return r;
  }

  /** The additive causal mask `[r·T, T]` llama-ops' ropeAttention takes (short lengths cached, see CausalMasks): call inside a `tf.tidy`. */
  causalMask(t: number): tf.Tensor2D {
    return this.masks.get(t);
  }

  /** Tables cached now (for the spec that drives many lengths). */
  get cachedRopeLengths(): number[] {
    return [...this.ropeCache.keys()];
  }
}
