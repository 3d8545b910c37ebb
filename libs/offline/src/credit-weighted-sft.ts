import * as tf from '@tensorflow/tfjs';
import { ValidationError } from '@srpo/core';
import { AdamOptimizer, disposePacked, packedLogProbs, packedToTensors, packPairs, SeededRng, type AdamConfig, type Policy } from '@srpo/policy';

/** One supervised example: the action's tokens under its (relabelled) prompt, with a weight in [0, 1]. */
export interface WeightedExample {
  contextTokens: number[];
  responseTokens: number[];
  weight: number;
}

/**
 * Credit-weighted negative log-likelihood of a mini-batch of M examples:
 *
 *   loss = −(1/M) Σ_i w_i · (1/|y_i|) Σ_t log π(y_{i,t} | x_i, y_{i,<t})
 *
 * Dividing by M (not Σ w) keeps the step size of an example independent of
 * the weights of the others in its batch, so uniform weights (w = 1) are plain SFT.
 *
 * @param logProbs [M, T] per-token log-probs, 0 at padding
 * @param mask     [M, T] 1 on response tokens, 0 at padding
 * @param weights  [M]
 */
export function weightedNll(logProbs: tf.Tensor2D, mask: tf.Tensor2D, weights: tf.Tensor1D): tf.Scalar {
  return tf.tidy(() => {
    const perExample = tf.div(tf.sum(tf.mul(logProbs, mask), 1), tf.maximum(tf.sum(mask, 1), 1));
    return tf.neg(tf.mean(tf.mul(perExample, weights))) as tf.Scalar;
  });
}

export interface SftConfig {
  /** Adam learning rate (default 5e-4, the demo's). */
  lr?: number;
  /** Global gradient-norm clip; 0 disables (default 1). */
  maxGradNorm?: number;
  adam?: AdamConfig;
  /**
   * Accept any finite weight, negative ones included (default false: weights in [0, 1]).
   * A negative weight pushes an example's likelihood down, without bound; it is there to
   * train on signed credits as they are (bench/studies/agentbrew), not for production.
   */
  signedWeights?: boolean;
}

export interface SftStepResult {
  loss: number;
  gradNorm: number;
}

/** Adam steps on {@link weightedNll} for one policy, with the policy library's hand-written gradients. */
export class CreditWeightedSftTrainer {
  readonly optimizer: AdamOptimizer;
  readonly lr: number;
  readonly maxGradNorm: number;
  readonly signedWeights: boolean;

  constructor(
    readonly policy: Policy,
    config: SftConfig = {},
  ) {
    this.signedWeights = config.signedWeights ?? false;
    this.lr = config.lr ?? 5e-4;
    if (!(this.lr > 0) || !Number.isFinite(this.lr)) throw new ValidationError('lr', `must be a finite number > 0, got ${this.lr}`);
    this.maxGradNorm = config.maxGradNorm ?? 1;
    if (!(this.maxGradNorm >= 0)) throw new ValidationError('maxGradNorm', `must be >= 0 (0 disables), got ${this.maxGradNorm}`);
    this.optimizer = new AdamOptimizer(policy.model, config.adam);
  }

  async step(batch: readonly WeightedExample[]): Promise<SftStepResult> {
    if (batch.length === 0) throw new ValidationError('batch', 'must hold at least one example');
    batch.forEach((e, i) => {
      if (this.signedWeights ? !Number.isFinite(e.weight) : !(e.weight >= 0 && e.weight <= 1)) {
        throw new ValidationError(`batch[${i}].weight`, `must be ${this.signedWeights ? 'a finite number' : 'in [0, 1]'}, got ${e.weight}`);
      }
    });
    const model = this.policy.model;
    const packed = packPairs(
      batch.map((e) => ({ contextTokens: e.contextTokens, responseTokens: e.responseTokens })),
      model,
      (i) => `batch[${i}]`,
    );
    const t = packedToTensors(packed);
    const weights = tf.tensor1d(
      batch.map((e) => e.weight),
      'float32',
    );
    const vars = model.trainableVariables();
    const names = model.weightNames();
    try {
      const { value, grads } = tf.variableGrads(() => weightedNll(packedLogProbs(model, t, 1), t.mask, weights), vars);
      const byName = new Map<string, tf.Tensor>(names.map((n, i) => [n, grads[vars[i].name]]));
      let norm: tf.Scalar;
      try {
        norm = this.optimizer.apply(byName, this.lr, this.maxGradNorm);
      } finally {
        tf.dispose(Object.values(grads));
      }
      const [loss, gradNorm] = await Promise.all([value.data(), norm.data()]);
      value.dispose();
      norm.dispose();
      return { loss: loss[0], gradNorm: gradNorm[0] };
    } finally {
      disposePacked(t);
      weights.dispose();
    }
  }

  dispose(): void {
    this.optimizer.dispose();
  }
}

export interface SftBudget {
  /** Optimizer steps. */
  steps: number;
  /** Examples per step. */
  batchSize: number;
  /** Shuffling seed. */
  seed: number;
}

export interface SftRunResult {
  steps: number;
  /** Examples with a weight other than 0 (the others cannot move the weights and are not drawn). */
  examples: number;
  meanLoss: number;
  firstLoss: number;
  lastLoss: number;
  meanGradNorm: number;
}

/**
 * Runs a fixed budget of steps: mini-batches are drawn without replacement from
 * a seeded shuffle of the examples with weight ≠ 0, reshuffled at every pass,
 * so two runs with the same budget see the same number of examples.
 */
export async function trainWeighted(
  trainer: CreditWeightedSftTrainer,
  examples: readonly WeightedExample[],
  budget: SftBudget,
  onStep?: (done: number, total: number) => void,
): Promise<SftRunResult> {
  if (!Number.isInteger(budget.steps) || budget.steps < 1) throw new ValidationError('steps', `must be a positive integer, got ${budget.steps}`);
  if (!Number.isInteger(budget.batchSize) || budget.batchSize < 1)
    throw new ValidationError('batchSize', `must be a positive integer, got ${budget.batchSize}`);
  // Weight-0 examples cannot move the weights; negative ones (signed weights) can.
  const pool = examples.filter((e) => e.weight !== 0);
  if (pool.length === 0) throw new ValidationError('examples', 'no example has a weight other than 0; nothing to train on');
  const rng = new SeededRng(budget.seed >>> 0);
  let order: number[] = [];
  let cursor = 0;
  const losses: number[] = [];
  const norms: number[] = [];
  for (let s = 0; s < budget.steps; s++) {
    const batch: WeightedExample[] = [];
    while (batch.length < Math.min(budget.batchSize, pool.length)) {
      if (cursor >= order.length) {
        order = shuffled(pool.length, rng);
        cursor = 0;
      }
      batch.push(pool[order[cursor++]]);
    }
    const r = await trainer.step(batch);
    losses.push(r.loss);
    norms.push(r.gradNorm);
    onStep?.(s + 1, budget.steps);
  }
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  return {
    steps: budget.steps,
    examples: pool.length,
    meanLoss: mean(losses),
    firstLoss: losses[0],
    lastLoss: losses[losses.length - 1],
    meanGradNorm: mean(norms),
  };
}

function shuffled(n: number, rng: SeededRng): number[] {
  const a = Array.from({ length: n }, (_, i) => i);
  for (let i = n - 1; i > 0; i--) {
    const j = rng.nextInt(i + 1);
    [a[i], a[j]] = [a[j], a[i]];
  }
  return a;
}
