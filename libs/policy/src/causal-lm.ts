import type * as tf from '@tensorflow/tfjs';

/**
 * What scoring, sampling and the update step need from a language model: the project's own
 * `TransformerModel` and the Hugging Face `LlamaModel` both provide it.
 */
export interface CausalLm {
  readonly config: { readonly vocabSize: number; readonly maxSeqLen: number };
  /**
   * Next-token logits for every position: int32 `[B, T]` → float32 `[B·T, V]`, divided by
   * `temperature` (default 1); row `b·T + t` predicts the token after position t of row b.
   */
  logits2d(tokens: tf.Tensor2D, temperature?: number): tf.Tensor2D;
  /** Trainable weights by canonical name. */
  readonly weights: ReadonlyMap<string, tf.Variable>;
  /** Canonical names in sorted order: the order of hashes, checkpoints and gradients. */
  weightNames(): string[];
  trainableVariables(): tf.Variable[];
  parameterCount(): number;
  dispose(): void;
  readonly isDisposed: boolean;
}
