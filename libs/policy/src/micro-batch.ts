import * as tf from '@tensorflow/tfjs';
import { ValidationError } from '@srpo/core';
import { objectiveOutputTensors, type ObjectiveConfig, type ObjectiveOutput, type PaddedSetBatch } from '@srpo/srpo';
import { learnerObjectiveLoss } from '@srpo/kernels';
import type { CausalLm } from './causal-lm';
import { disposePacked, packedLogProbs, packedToTensors, packPairs, type SequencePair } from './log-probs';

/**
 * Called between the blocking pieces of an update (micro-batches, passes, epochs) and awaited:
 * the caller's chance to let the event loop run (timers, I/O: a Kafka consumer's heartbeats)
 * while native TensorFlow, which computes synchronously, is between two pieces. It must not
 * touch the model or the optimizer; nothing computed depends on it.
 */
export type YieldPoint = () => Promise<void>;

/**
 * Splits rows (sequences) into consecutive chunks whose padded input, rows × longest row,
 * stays within `maxTokens` positions; a row longer than the budget gets a chunk of its own.
 * `lengths[i]` is row i's model input length (context kept + response − 1).
 */
export function microBatchRows(lengths: readonly number[], maxTokens: number): number[][] {
  if (!Number.isInteger(maxTokens) || maxTokens < 1) throw new ValidationError('microBatchTokens', `must be a positive integer, got ${maxTokens}`);
  const chunks: number[][] = [];
  let current: number[] = [];
  let longest = 0;
  lengths.forEach((n, i) => {
    const wider = Math.max(longest, n);
    if (current.length > 0 && wider * (current.length + 1) > maxTokens) {
      chunks.push(current);
      current = [];
      longest = 0;
    }
    current.push(i);
    longest = Math.max(longest, n);
  });
  if (current.length > 0) chunks.push(current);
  return chunks;
}

export interface AccumulatedStep {
  /** dLoss/dw by canonical weight name, summed over micro-batches. The caller disposes them. */
  grads: Map<string, tf.Tensor>;
  /** The objective on the whole mini-batch (the caller reads diagnostics and disposes it). */
  out: ObjectiveOutput;
  /** Largest `tf.memory().numBytes` seen with one micro-batch's activations alive. */
  peakBytes: number;
  microBatches: number;
}

/**
 * The gradient of the objective on a whole mini-batch, computed one micro-batch of
 * sequences at a time, so that only one micro-batch's activations are ever alive:
 *
 *   1. forward every micro-batch without a tape → logπ for all rows `[M, T]`;
 *   2. the objective on the whole mini-batch (every set ratio sees all its members, so
 *      loss and diagnostics are exactly the single-pass ones) and G = ∂loss/∂logπ `[M, T]`;
 *   3. per micro-batch b, forward again with a tape and backpropagate Σ G_b ⊙ logπ_b:
 *      by the chain rule ∂loss/∂w = Σ_b Σ_rows G ⊙ ∂logπ/∂w, one model gradient per b, summed.
 *
 * Step 3 recomputes the activations step 1 threw away (activation recomputation at the
 * micro-batch boundary): about one extra forward pass for a memory bound of one
 * micro-batch. Rows, not sets, are split: G already carries each set's coupling. Equal to
 * the single-pass gradient up to float32 summation order.
 *
 * `penalty` (the learner's KL term, a function of the log-probs alone) is added to the loss in
 * step 2, so G carries its gradient too; `out.loss` stays the objective's alone.
 *
 * `yieldPoint` is awaited after every micro-batch of steps 1 and 3: one micro-batch is the
 * longest the event loop waits. The tensors and operations are the same with or without it.
 *
 * `logpNow`, when given, is step 1's result already computed: the log-probs `[M, T]` of every row
 * at the current weights, scored in the same micro-batches (the proximal pass of a corrected
 * first epoch is exactly that, corrected-batch.ts). Step 1 is then skipped, one forward pass of
 * the mini-batch saved; the tensor is read, not disposed.
 */
export async function accumulatedGradients(
  model: CausalLm,
  pairs: readonly SequencePair[],
  batch: PaddedSetBatch,
  objective: ObjectiveConfig,
  temperature: number,
  maxTokens: number,
  penalty?: (logpNew: tf.Tensor2D) => tf.Scalar,
  yieldPoint?: YieldPoint,
  logpNow?: tf.Tensor2D,
): Promise<AccumulatedStep> {
  const full = packPairs(pairs, model);
  const lengths = pairs.map((p, i) => full.contextKept[i] + p.responseTokens.length - 1);
  const chunks = microBatchRows(lengths, maxTokens);
  const width = full.responseLength;
  const packs = chunks.map((rows) =>
    packedToTensors(
      packPairs(
        rows.map((i) => pairs[i]),
        model,
      ),
    ),
  );
  let peakBytes = tf.memory().numBytes;
  const vars = model.trainableVariables();
  const names = model.weightNames();
  try {
    // 1. Log-probs of every row, padded to the mini-batch's response width.
    if (logpNow && (logpNow.shape[0] !== pairs.length || logpNow.shape[1] !== width))
      throw new ValidationError('logpNow', `must be [${pairs.length}, ${width}], got [${logpNow.shape.join(', ')}]`);
    const logpNew = logpNow
      ? logpNow.clone()
      : await scoreChunks(
          packs.map((t) => () => {
            const lp = packedLogProbs(model, t, temperature);
            peakBytes = Math.max(peakBytes, tf.memory().numBytes);
            return lp;
          }),
          width,
          yieldPoint,
        );
    // 2. The objective on the whole mini-batch, and its gradient with respect to the log-probs.
    let out: ObjectiveOutput | undefined;
    const g = tf.grad((lp: tf.Tensor) => {
      const o = learnerObjectiveLoss(lp as tf.Tensor2D, batch, objective);
      for (const t of objectiveOutputTensors(o)) tf.keep(t);
      out = { ...o, loss: tf.keep(o.loss.clone()) };
      return penalty ? tf.add<tf.Scalar>(o.loss, penalty(lp as tf.Tensor2D)) : o.loss;
    })(logpNew);
    logpNew.dispose();
    // 3. One backward pass per micro-batch, accumulated.
    const grads = new Map<string, tf.Tensor>();
    let offset = 0;
    try {
      for (const t of packs) {
        const m = t.packed.m;
        const r = t.packed.responseLength;
        const gChunk = g.slice([offset, 0], [m, r]);
        offset += m;
        const { value, grads: gb } = tf.variableGrads(() => {
          const lp = packedLogProbs(model, t, temperature);
          peakBytes = Math.max(peakBytes, tf.memory().numBytes);
          return tf.sum<tf.Scalar>(tf.mul(lp, gChunk));
        }, vars);
        value.dispose();
        gChunk.dispose();
        names.forEach((n, i) => {
          const add = gb[vars[i].name];
          const prev = grads.get(n);
          if (prev) {
            grads.set(n, tf.add(prev, add));
            tf.dispose([prev, add]);
          } else {
            grads.set(n, add);
          }
        });
        await yieldPoint?.();
      }
    } catch (e) {
      tf.dispose([...grads.values()]);
      throw e;
    } finally {
      g.dispose();
    }
    return { grads, out: out as unknown as ObjectiveOutput, peakBytes, microBatches: chunks.length };
  } finally {
    for (const t of packs) disposePacked(t);
  }
}

/**
 * Log-probs `[M, width]` of consecutive row chunks, each scored by one `score` call (inside its
 * own `tf.tidy`), right-padded to `width` and concatenated in order; `yieldPoint` is awaited
 * after each chunk. The same operations as one `tidy` around them all, so the same values.
 */
export async function scoreChunks(score: readonly (() => tf.Tensor2D)[], width: number, yieldPoint?: YieldPoint): Promise<tf.Tensor2D> {
  const parts: tf.Tensor2D[] = [];
  try {
    for (const chunk of score) {
      parts.push(
        tf.tidy(() => {
          const lp = chunk();
          return lp.shape[1] === width
            ? lp
            : lp.pad([
                [0, 0],
                [0, width - lp.shape[1]],
              ]);
        }),
      );
      await yieldPoint?.();
    }
    return tf.concat(parts, 0);
  } finally {
    tf.dispose(parts);
  }
}
