import * as tf from '@tensorflow/tfjs';
import { ValidationError } from '@srpo/core';
import type { CausalLm } from './causal-lm';
import { type AdamStepScalars, adamUpdateFused } from '@srpo/kernels';

export interface AdamConfig {
  /** Default 0.9. */
  beta1?: number;
  /** Default 0.999. */
  beta2?: number;
  /** Default 1e-8. */
  epsilon?: number;
  /** Decoupled (AdamW) weight decay on every weight; default 0. */
  weightDecay?: number;
}

export type ResolvedAdamConfig = Required<AdamConfig>;

export function resolveAdamConfig(c: AdamConfig = {}, field = 'adam'): ResolvedAdamConfig {
  const r: ResolvedAdamConfig = { beta1: c.beta1 ?? 0.9, beta2: c.beta2 ?? 0.999, epsilon: c.epsilon ?? 1e-8, weightDecay: c.weightDecay ?? 0 };
  for (const k of ['beta1', 'beta2'] as const) {
    if (!(r[k] >= 0 && r[k] < 1)) throw new ValidationError(`${field}.${k}`, `must be in [0, 1), got ${r[k]}`);
  }
  if (!(r.epsilon > 0) || !Number.isFinite(r.epsilon)) throw new ValidationError(`${field}.epsilon`, `must be a finite number > 0, got ${r.epsilon}`);
  if (!(r.weightDecay >= 0) || !Number.isFinite(r.weightDecay))
    throw new ValidationError(`${field}.weightDecay`, `must be a finite number >= 0, got ${r.weightDecay}`);
  return r;
}

/** Optimizer state in canonical form: per-weight moments keyed by the weight's canonical name. */
export interface AdamState {
  /** Optimizer steps applied so far (drives bias correction and the LR schedule). */
  step: number;
  m: Map<string, Float32Array>;
  v: Map<string, Float32Array>;
}

/**
 * Adam over all weights of one model, with global-norm gradient clipping.
 *
 * The moments live in two flat variables (all weights concatenated in
 * canonical order) so an update is a dozen ops on one vector instead of a
 * dozen per weight: tfjs dispatches every op separately, so op count, not
 * arithmetic, dominates for small models. On tfjs-node with the project's
 * native kernels the whole step is one kernel, SrpoAdam, which takes the
 * gradients and weights as lists and returns the new moments and weights
 * (no concat, split or per-weight op around it). Outwardly the state is per
 * weight ({@link AdamState}) so checkpoints do not depend on this layout.
 */
export class AdamOptimizer {
  readonly config: ResolvedAdamConfig;
  private readonly names: string[];
  private readonly sizes: number[];
  private readonly shapes: number[][];
  private readonly total: number;
  private readonly m: tf.Variable;
  private readonly v: tf.Variable;
  private steps = 0;

  constructor(
    private readonly model: CausalLm,
    config: AdamConfig = {},
  ) {
    this.config = resolveAdamConfig(config);
    this.names = model.weightNames();
    this.shapes = this.names.map((n) => model.weight(n).shape);
    this.sizes = this.names.map((n) => model.weight(n).size);
    this.total = this.sizes.reduce((a, b) => a + b, 0);
    // tidy frees the zero tensors; the variables keep their own reference to the data.
    [this.m, this.v] = tf.tidy(() => [tf.variable(tf.zeros([this.total]), false), tf.variable(tf.zeros([this.total]), false)]);
  }

  get step(): number {
    return this.steps;
  }

  /**
   * Clips the gradients to a global L2 norm of `maxGradNorm` (≤ 0 or Infinity:
   * no clipping) and applies one Adam step at learning rate `lr`.
   *
   * @param grads gradient per canonical weight name; every weight must be present.
   * @returns the pre-clipping global gradient norm as a scalar tensor (caller disposes),
   *   so the caller can read it together with other diagnostics in one sync.
   */
  apply(grads: ReadonlyMap<string, tf.Tensor>, lr: number, maxGradNorm: number): tf.Scalar {
    const { beta1, beta2, epsilon, weightDecay } = this.config;
    const t = this.steps + 1;
    const bc1 = 1 - beta1 ** t;
    const bc2 = 1 - beta2 ** t;
    // Same arithmetic as torch.optim.Adam: lr/bc1 · m / (√v/√bc2 + ε), rearranged to one scale and one ε.
    const stepSize = (lr * Math.sqrt(bc2)) / bc1;
    const epsHat = epsilon * Math.sqrt(bc2);
    const scalars: AdamStepScalars = { maxGradNorm, beta1, beta2, stepSize, epsHat, decay: weightDecay > 0 ? lr * weightDecay : 0 };
    const norm = tf.tidy(() => {
      const gs = this.names.map((n) => {
        const g = grads.get(n);
        if (!g) throw new ValidationError('grads', `missing gradient for ${n}`);
        return g;
      });
      // tfjs-node with the project's kernels: the whole step (clip, moments, weights, decay) in
      // one native kernel (SrpoAdam, the same formula), the gradients and weights passed as lists.
      const weights = this.names.map((n) => this.model.weight(n));
      const fusedStep = adamUpdateFused(
        // A gradient of another shape but the weight's size (the composite path accepts one) is
        // reshaped; the gradients of tf.variableGrads have the weights' shapes, so no op here.
        gs.map((g, i) => (tf.util.arraysEqual(g.shape, this.shapes[i]) ? g : g.reshape(this.shapes[i]))),
        weights,
        this.m as tf.Tensor1D,
        this.v as tf.Tensor1D,
        scalars,
      );
      if (fusedStep) {
        this.m.assign(fusedStep.m);
        this.v.assign(fusedStep.v);
        weights.forEach((w, i) => w.assign(fusedStep.weights[i]));
        return fusedStep.norm;
      }
      const flat = tf.concat(
        // tfjs-node runs even a same-shape reshape as a native op: skip the 1-D ones.
        gs.map((g) => (g.rank === 1 ? g : g.reshape([-1]))),
      ) as tf.Tensor1D;
      const { m, v, delta, norm: gNorm } = this.compositeUpdate(flat, scalars);
      this.m.assign(m);
      this.v.assign(v);
      const parts = tf.split(delta, this.sizes);
      this.names.forEach((n, i) => {
        const w = this.model.weight(n);
        let next = tf.sub(w, this.shapes[i].length === 1 ? parts[i] : parts[i].reshape(this.shapes[i]));
        // Decoupled decay (AdamW) uses the pre-update weight, as torch.optim.AdamW does.
        if (weightDecay > 0) next = tf.sub(next, tf.mul(w, lr * weightDecay));
        w.assign(next);
      });
      return gNorm;
    });
    this.steps = t;
    return norm;
  }

  /**
   * The clip and moment update from public tfjs ops (other backends, or the fused kernels off):
   * `norm = √Σg²`, `coef = min(1, maxGradNorm/(norm + 1e-6))` (with clipping), `m' = β1·m +
   * g·(coef·(1 − β1))`, `v' = β2·v + g²·(coef²·(1 − β2))`, `delta = m'·stepSize/(√v' + epsHat)`.
   */
  private compositeUpdate(flat: tf.Tensor1D, s: AdamStepScalars): { m: tf.Tensor1D; v: tf.Tensor1D; delta: tf.Tensor1D; norm: tf.Scalar } {
    const { beta1, beta2 } = s;
    const g2 = tf.square(flat); // shared by the norm and the second moment
    const norm = tf.sqrt(tf.sum(g2)) as tf.Scalar;
    // The clip coefficient min(1, max/(norm+1e-6)) stays a device scalar (no host read
    // inside the step) and is folded into the moment updates' scalar factors.
    const clip = s.maxGradNorm > 0 && Number.isFinite(s.maxGradNorm);
    const coef = clip ? tf.minimum(tf.div(s.maxGradNorm, tf.add(norm, 1e-6)), 1) : undefined;
    const k1 = coef ? tf.mul(coef, 1 - beta1) : 1 - beta1;
    const k2 = coef ? tf.mul(tf.square(coef), 1 - beta2) : 1 - beta2;
    const m = tf.add<tf.Tensor1D>(tf.mul(this.m, beta1), tf.mul(flat, k1));
    const v = tf.add<tf.Tensor1D>(tf.mul(this.v, beta2), tf.mul(g2, k2));
    const delta = tf.div<tf.Tensor1D>(tf.mul(m, s.stepSize), tf.add(tf.sqrt(v), s.epsHat));
    return { m, v, delta, norm };
  }

  /** Copies the state out to host memory. */
  async getState(): Promise<AdamState> {
    const [m, v] = await Promise.all([this.m.data(), this.v.data()]);
    const out: AdamState = { step: this.steps, m: new Map(), v: new Map() };
    let off = 0;
    this.names.forEach((n, i) => {
      out.m.set(n, Float32Array.from((m as Float32Array).subarray(off, off + this.sizes[i])));
      out.v.set(n, Float32Array.from((v as Float32Array).subarray(off, off + this.sizes[i])));
      off += this.sizes[i];
    });
    return out;
  }

  /** Replaces the state; validates names and sizes first so a bad state changes nothing. */
  setState(state: AdamState): void {
    if (!Number.isSafeInteger(state.step) || state.step < 0) throw new ValidationError('state.step', `must be a non-negative integer, got ${state.step}`);
    const m = new Float32Array(this.total);
    const v = new Float32Array(this.total);
    let off = 0;
    this.names.forEach((n, i) => {
      for (const [key, map, dst] of [
        ['m', state.m, m],
        ['v', state.v, v],
      ] as const) {
        const src = map.get(n);
        if (!src) throw new ValidationError(`state.${key}.${n}`, 'is missing');
        if (src.length !== this.sizes[i]) throw new ValidationError(`state.${key}.${n}`, `expected ${this.sizes[i]} values, got ${src.length}`);
        dst.set(src, off);
      }
      off += this.sizes[i];
    });
    if (state.m.size !== this.names.length || state.v.size !== this.names.length) {
      throw new ValidationError('state', 'holds moments for weights the model does not have');
    }
    tf.tidy(() => {
      this.m.assign(tf.tensor1d(m));
      this.v.assign(tf.tensor1d(v));
    });
    this.steps = state.step;
  }

  dispose(): void {
    this.m.dispose();
    this.v.dispose();
  }
}
