import * as tf from '@tensorflow/tfjs';
import { ErrorCode, SrpoError, ValidationError } from '@srpo/core';
import { gatherRows } from '@srpo/kernels';
import { ropeAttention } from './llama-ops';
import type { LlamaModel } from './llama-model';
import { checkTokens, head, mlp, norm, project, projectResidual, rotateRows, w1, w2 } from './llama-decode-ops';

export { rotateRows } from './llama-decode-ops';

/**
 * Incremental decoding of a {@link LlamaModel} with a key/value cache, for serving (no gradients):
 * a prompt is run once ({@link prefill}), after which each step runs one position per row and
 * attends to the rows' cached keys and values. The projections are the model's adapter-aware
 * `linear`'s forward without its tape entry (llama-decode-ops' `project`), so an attached LoRA
 * adapter's term is part of every step, and the numbers are the full forward's up to float32
 * summation order (specs check 1e-5 of the logits' scale; bit for bit with `products: 'learner'`).
 * The batch of rows decoding together is `LlamaDecodeBatch` (llama-decode-batch.ts).
 *
 * Keys are cached after RoPE, so a cached position never needs its rotation again; only the
 * new query and key of each step are rotated, each at its row's own position.
 */

/** Refusal to grow the cache past its token budget (`LlamaDecodeBatch`, llama-decode-batch.ts). Retriable: memory frees as rows finish. */
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
      const rope = model.rope(t);
      const mask = model.causalMask(t);
      const zeros = tf.zeros<tf.Rank.R1>([c.hiddenSize]); // the output projections' bias where they have none (projectResidual)
      // [G·T, H_kv·d] rows → prompt g's [1, H_kv, L_g, d], the cache's layout (kept: the caller owns it).
      const toCache = (x: tf.Tensor2D, into: tf.Tensor4D[][]): void => {
        const all = tf.transpose(x.reshape([b, t, kvHeads, d]), [0, 2, 1, 3]) as tf.Tensor4D;
        prompts.forEach((p, g) => into[g].push(tf.keep(b === 1 && p.length === t ? all : all.slice([g, 0, 0, 0], [1, -1, p.length, -1]))));
      };
      const [cos, sin] = b === 1 ? [rope.cos, rope.sin] : [tf.tile(rope.cos, [b, 1]), tf.tile(rope.sin, [b, 1])];
      let h = gatherRows(w2(model, 'model.embed_tokens.weight'), tf.tensor1d(ids, 'int32'));
      for (let i = 0; i < c.numLayers; i++) {
        const p = `model.layers.${i}.`;
        // One scope per layer: without it every layer's intermediates (about 40 KB per token per
        // layer for SmolLM2) stay alive until the prefill ends, about 180 MB per 150-token prompt
        // over 30 layers, which made serve's memory grow by that much per prompt prefilled together.
        const input = h;
        h = tf.tidy(() => {
          const n1 = norm(input, w1(model, `${p}input_layernorm.weight`), c.rmsNormEps);
          const q = project(model, n1, `${p}self_attn.q_proj`, qkvBias);
          const k = project(model, n1, `${p}self_attn.k_proj`, qkvBias);
          const v = project(model, n1, `${p}self_attn.v_proj`, qkvBias);
          const attn = ropeAttention(q, k, v, { b, t, heads, kvHeads, headDim: d }, rope, mask);
          toCache(rotateRows(k, kvHeads, cos, sin, 1), keys);
          toCache(v, values);
          return mlp(model, projectResidual(model, input, attn, `${p}self_attn.o_proj`, c.oBias, zeros), p, zeros);
        });
        input.dispose();
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
