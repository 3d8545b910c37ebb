import * as tf from '@tensorflow/tfjs';
import { ValidationError } from '@srpo/core';
import {
  buildPaddedSetBatch,
  disposePaddedSetBatch,
  klPenalty,
  mismatchDiagnostics,
  needsProximal,
  setMismatches,
  weightedAdvantages,
  type CorrectionConfig,
  type PaddedSetBatch,
  type SetInput,
} from '@srpo/srpo';
import type { CausalLm } from './causal-lm';
import { disposePacked, packedLogProbs, packedToTensors, packPairs, type PackedTensors, type SequencePair } from './log-probs';
import { microBatchRows } from './micro-batch';

/*
 * The engine/learner mismatch correction and KL penalty as SrpoTrainer applies them
 * (docs/objective.md, section 7): the math is @srpo/srpo's (behaviour-correction.ts); this is
 * where the trainer's model scores the proximal and reference log-probs and builds the batch.
 */

/** Runs `score` with the KL penalty's reference weights in place of the policy's and returns its result. */
export type ReferenceScope = <T>(score: () => T) => T;

/** What the correction needs from the trainer. */
export interface CorrectionContext {
  model: CausalLm;
  temperature: number;
  /** The trainer's micro-batch budget: the proximal log-probs are scored in the same chunks as the step. */
  microBatchTokens: number;
  correction: CorrectionConfig;
  withReference?: ReferenceScope;
}

/** The batch one SrpoTrainer call trains on: the objective's inputs, the KL reference, the mismatch diagnostics. */
export interface CorrectedBatch {
  batch: PaddedSetBatch;
  /** [M, T] reference log-probs, with a KL penalty. */
  reference?: tf.Tensor2D;
  /** `mismatchDiagnostics` of @srpo/srpo; empty without a correction. */
  mismatch: Record<string, number>;
}

export function disposeCorrectedBatch(p: CorrectedBatch): void {
  disposePaddedSetBatch(p.batch);
  p.reference?.dispose();
}

/**
 * The batch the epochs train on. Without a correction: the recorded behaviour log-probs and
 * advantages. With one: `logpOld` replaced by the proximal log-probs (the model at the weights
 * the call starts from, scored as the step scores, no gradient) and each set's advantage by
 * `weightedAdvantages` (its behaviour weight folded in), plus the per-set mismatch diagnostics.
 * With a KL penalty: the reference log-probs too. Both stay fixed over the epochs, as π_old does.
 */
export async function prepareCorrectedBatch(
  ctx: CorrectionContext,
  setInputs: SetInput[],
  pairs: readonly SequencePair[],
  tensors: PackedTensors,
): Promise<CorrectedBatch> {
  const batch = buildPaddedSetBatch(setInputs);
  const prepared: CorrectedBatch = { batch, mismatch: {} };
  try {
    if (needsProximal(ctx.correction)) {
      const prox = scoreRows(ctx, pairs, tensors);
      const width = prox.shape[1];
      if (width !== batch.logpOld.shape[1]) {
        prox.dispose();
        throw new ValidationError('sets', `proximal log-probs are ${width} wide, the batch ${batch.logpOld.shape[1]}`);
      }
      tf.dispose(batch.logpOld);
      batch.logpOld = prox;
      const values = await prox.data();
      let row = 0;
      const perSet = setInputs.map((s) =>
        s.members.map((m) => {
          const at = row++ * width;
          return { logpProx: values.subarray(at, at + m.mask.length), logpBehaviour: m.logpOld, mask: m.mask };
        }),
      );
      const mismatches = setMismatches(perSet, ctx.correction);
      const advantages = weightedAdvantages(
        setInputs.map((s) => s.advantage),
        mismatches.map((m) => m.weight),
      );
      batch.advantage.dispose();
      batch.advantage = tf.tensor1d(Float32Array.from(advantages), 'float32');
      prepared.mismatch = mismatchDiagnostics(mismatches);
    }
    if (ctx.correction.klCoef > 0) {
      if (!ctx.withReference) throw new ValidationError('config.correction.klCoef', 'a KL penalty needs a reference policy (withReference)');
      prepared.reference = ctx.withReference(() => scoreRows(ctx, pairs, tensors));
    }
    return prepared;
  } catch (e) {
    disposeCorrectedBatch(prepared);
    throw e;
  }
}

/**
 * Log-probs `[M, T]` of every row at the model's current weights, without a tape: as the step's
 * own forward computes them (one pass, or the same micro-batches as `accumulatedGradients`), so
 * at the weights a call starts from they are the step's first log-probs, bit for bit.
 */
export function scoreRows(ctx: CorrectionContext, pairs: readonly SequencePair[], tensors: PackedTensors): tf.Tensor2D {
  const { model, temperature, microBatchTokens } = ctx;
  const packed = tensors.packed;
  if (!(microBatchTokens > 0 && packed.m * packed.inputLength > microBatchTokens)) {
    return tf.tidy(() => packedLogProbs(model, tensors, temperature));
  }
  const lengths = pairs.map((p, i) => packed.contextKept[i] + p.responseTokens.length - 1);
  const width = packed.responseLength;
  return tf.tidy(() =>
    tf.concat(
      microBatchRows(lengths, microBatchTokens).map((rows) => {
        const t = packedToTensors(
          packPairs(
            rows.map((i) => pairs[i]),
            model,
          ),
        );
        try {
          const lp = packedLogProbs(model, t, temperature);
          return lp.shape[1] === width
            ? lp
            : lp.pad([
                [0, 0],
                [0, width - lp.shape[1]],
              ]);
        } finally {
          disposePacked(t);
        }
      }),
      0,
    ),
  ) as tf.Tensor2D;
}

/**
 * `β · KL(logπ_θ, logπ_ref)` as a function of the step's log-probs (`klPenalty` of @srpo/srpo),
 * handing the unscaled KL to `keep` (kept out of the gradient scope) for the diagnostics.
 */
export function klTerm(reference: tf.Tensor2D, mask: tf.Tensor2D, klCoef: number, keep: (kl: tf.Scalar) => void): (logpNew: tf.Tensor2D) => tf.Scalar {
  return (logpNew) => {
    const kl = klPenalty(logpNew, reference, mask);
    keep(tf.keep(kl.clone()));
    return tf.mul<tf.Scalar>(kl, klCoef);
  };
}

/**
 * With a KL penalty, `losses/loss` is what the step minimised (surrogate + β·KL), next to
 * `losses/surrogate` and `losses/kl` (the unscaled token-mean k3); without one, nothing changes.
 */
export function lossParts(surrogate: number, kl: number | undefined, klCoef: number): Record<string, number> {
  if (kl === undefined) return {};
  return { 'losses/loss': surrogate + klCoef * kl, 'losses/surrogate': surrogate, 'losses/kl': kl };
}
