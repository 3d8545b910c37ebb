import type * as tf from '@tensorflow/tfjs';

/**
 * What scoring, sampling and the update step need from a language model: the project's own
 * `TransformerModel` and the Hugging Face `LlamaModel` both provide it.
 */
export interface CausalLm {
  /** The model family: `causal-transformer` (the project's own) or `hf-llama` (Hugging Face Llama/Qwen2/Mistral). */
  readonly kind: string;
  readonly config: { readonly vocabSize: number; readonly maxSeqLen: number };
  /**
   * Next-token logits for every position: int32 `[B, T]` → float32 `[B·T, V]`, divided by
   * `temperature` (default 1); row `b·T + t` predicts the token after position t of row b.
   * With `rows` (int32 `[R]`, indices into those B·T positions) only those rows are computed,
   * `[R, V]`: the output projection, the costliest product for a large vocabulary, then runs
   * on the positions a caller reads (response tokens, the last position when sampling).
   */
  logits2d(tokens: tf.Tensor2D, temperature?: number, rows?: tf.Tensor1D): tf.Tensor2D;
  /** Next-token logits `[B, T, V]` at temperature 1. */
  logits(tokens: tf.Tensor2D): tf.Tensor3D;
  /** Trainable weights by canonical name. */
  readonly weights: ReadonlyMap<string, tf.Variable>;
  /** The live variable for a canonical name (throws naming it when unknown). */
  weight(name: string): tf.Variable;
  /** Canonical names in sorted order: the order of hashes, checkpoints and gradients. */
  weightNames(): string[];
  trainableVariables(): tf.Variable[];
  parameterCount(): number;
  dispose(): void;
  readonly isDisposed: boolean;
}
