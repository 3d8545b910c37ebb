import * as tf from '@tensorflow/tfjs';
import { ValidationError } from '@srpo/core';
import {
  disposeObjectiveOutput,
  needsProximal,
  objectiveOutputTensors,
  readDiagnostics,
  resolveCorrectionConfig,
  resolveObjectiveConfig,
  type CorrectionConfig,
  type ObjectiveConfig,
  type ObjectiveOutput,
  type SetInput,
} from '@srpo/srpo';
import { AdamOptimizer, type AdamConfig } from './adam-optimizer';
import { learnerObjectiveLoss } from '@srpo/kernels';
import { checkTemperature, disposePacked, packPairs, packedLogProbs, packedToTensors, type SequencePair } from './log-probs';
import { learningRateAt, validateLrSchedule, type LrSchedule } from './lr-schedule';
import { accumulatedGradients, type YieldPoint } from './micro-batch';
import {
  disposeCorrectedBatch,
  klTerm,
  lossParts,
  prepareCorrectedBatch,
  type CorrectedBatch,
  type CorrectionContext,
  type ReferenceScope,
} from './corrected-batch';
import type { Policy } from './policy';

/** One agent output of an active set, with what the model needs to re-score it. */
export interface ActiveSetMember {
  outputId: string;
  /** Prompt tokens the output was generated from (≥ 1). */
  contextTokens: readonly number[];
  /** Generated tokens (≥ 1). */
  responseTokens: readonly number[];
  /** Behaviour log-probs, one per response token (same temperature as the trainer's). */
  logpOld: readonly number[];
  /** Loss mask over response tokens; default all ones. */
  mask?: readonly number[];
}

/** An active set: the K outputs that acted together, with one advantage. */
export interface ActiveSet {
  setId: string;
  advantage: number;
  members: readonly ActiveSetMember[];
}

export interface SrpoTrainerConfig {
  /** Objective settings for `@srpo/srpo`; missing fields take its defaults. */
  objective?: Partial<ObjectiveConfig>;
  /** Temperature of the log-probs in the ratio; must match the sampling temperature. Default 1. */
  temperature?: number;
  adam?: AdamConfig;
  /** Global L2 gradient-norm clip; 0 or Infinity disables. Default 1. */
  maxGradNorm?: number;
  /** Default `{ kind: 'constant', lr: 3e-4 }`. */
  schedule?: LrSchedule;
  /** Optimizer steps per call over the same mini-batch (PPO-style epochs). Default 1. */
  epochs?: number;
  /**
   * Largest padded model input (rows × longest row, in positions) one forward pass may
   * take. A mini-batch above it is processed in micro-batches with gradient accumulation
   * and activation recomputation (`accumulatedGradients`): still one optimizer step per
   * epoch, the same loss and diagnostics, the gradient up to float32 summation order.
   * Default 0: one pass, whatever the size.
   */
  microBatchTokens?: number;
  /**
   * Engine/learner mismatch correction and KL penalty (`@srpo/srpo`'s CorrectionConfig; missing
   * fields take its defaults: no correction, no penalty). With a correction, every output is
   * re-scored at the weights the call starts from (the proximal policy, no gradient) and the
   * set ratio uses those log-probs; each set's advantage carries its behaviour weight
   * (docs/objective.md, section 7).
   */
  correction?: Partial<CorrectionConfig>;
  /**
   * Runs `score` with the KL penalty's reference weights in place of the policy's and returns
   * its result (for a LoRA policy: the base model without its adapter). Required when
   * `correction.klCoef` > 0.
   */
  withReference?: ReferenceScope;
}

/** Per-call options of {@link SrpoTrainer.update} and {@link SrpoTrainer.evaluate}. */
export interface SrpoCallOptions {
  /**
   * Awaited between the blocking pieces of the call: after each micro-batch (of the proximal
   * pass, and of both passes of `accumulatedGradients`), after a single-pass forward/backward,
   * after the reference pass and after each epoch. Native TensorFlow computes synchronously, so
   * without it the event loop (a Kafka consumer's heartbeats) waits for the whole call; with it,
   * for one piece at most. The results are the same with or without it.
   */
  yieldPoint?: YieldPoint;
}

export interface SrpoEpochResult {
  /** Objective loss at the weights BEFORE this epoch's update. */
  loss: number;
  /** Global gradient norm before clipping. */
  gradNorm: number;
  learningRate: number;
  /** `readDiagnostics` of `@srpo/srpo` for this epoch's forward pass. */
  diagnostics: Record<string, number>;
}

export interface SrpoUpdateResult {
  /** First epoch's loss: the objective on this batch at the weights the call started from. */
  loss: number;
  /** First epoch's pre-clip gradient norm. */
  gradNorm: number;
  /** First epoch's learning rate. */
  learningRate: number;
  /** First epoch's diagnostics plus `grad/norm` and `optim/lr`. */
  diagnostics: Record<string, number>;
  /** Every epoch, in order. */
  epochs: SrpoEpochResult[];
  /** Policy version after the call (bumped once per epoch). */
  policyVersion: number;
  /** Optimizer steps taken so far, this call included. */
  optimizerStep: number;
  /** Members (sequences) in the mini-batch. */
  sequences: number;
  /** Model input positions processed per epoch (Σ over members of context'+response−1). */
  tokens: number;
}

/**
 * SRPO updates of one policy: Adam with global-norm clipping and a
 * learning-rate schedule, on mini-batches of whole active sets.
 *
 * Each call to {@link update} takes one mini-batch; every member of every set in
 * it is scored in one forward pass, so a set's ratio always sees all of its
 * members (the SRPO set ratio is meaningless on part of a set). Use
 * {@link packMiniBatches} to split a larger batch without splitting sets.
 *
 * Host reads happen once per epoch, after the weights are updated (loss,
 * diagnostics and gradient norm in one go); nothing inside the gradient or
 * optimizer computation waits on the device.
 */
export class SrpoTrainer {
  readonly optimizer: AdamOptimizer;
  readonly objective: ObjectiveConfig;
  readonly temperature: number;
  readonly maxGradNorm: number;
  readonly schedule: LrSchedule;
  readonly epochs: number;
  readonly microBatchTokens: number;
  readonly correction: CorrectionConfig;
  private readonly withReference?: ReferenceScope;
  private busy = false;

  constructor(
    readonly policy: Policy,
    config: SrpoTrainerConfig = {},
  ) {
    this.objective = resolveObjectiveConfig(config.objective, 'config.objective');
    this.temperature = checkTemperature(config.temperature ?? 1, 'config.temperature');
    this.maxGradNorm = config.maxGradNorm ?? 1;
    if (!(this.maxGradNorm >= 0)) throw new ValidationError('config.maxGradNorm', `must be >= 0 (0 disables), got ${this.maxGradNorm}`);
    this.schedule = validateLrSchedule(config.schedule ?? { kind: 'constant', lr: 3e-4 }, 'config.schedule');
    this.epochs = config.epochs ?? 1;
    if (!Number.isInteger(this.epochs) || this.epochs < 1) throw new ValidationError('config.epochs', `must be a positive integer, got ${this.epochs}`);
    this.microBatchTokens = config.microBatchTokens ?? 0;
    if (!Number.isInteger(this.microBatchTokens) || this.microBatchTokens < 0) {
      throw new ValidationError('config.microBatchTokens', `must be a non-negative integer (0: one pass), got ${this.microBatchTokens}`);
    }
    this.correction = resolveCorrectionConfig(config.correction, 'config.correction');
    this.withReference = config.withReference;
    if (this.correction.klCoef > 0 && !this.withReference) {
      throw new ValidationError('config.correction.klCoef', 'a KL penalty needs a reference policy (withReference), and this trainer was given none');
    }
    this.optimizer = new AdamOptimizer(policy.model, config.adam);
  }

  /**
   * Runs `epochs` optimizer steps on one mini-batch of active sets.
   *
   * Sequences are laid out as in `tokenLogProbs`: context left-truncated so that
   * context + response fits the model's context length; the response is kept whole.
   *
   * @throws ValidationError naming `sets[i].members[j].field` for malformed input
   *   (nothing is updated then).
   */
  async update(sets: readonly ActiveSet[], options: SrpoCallOptions = {}): Promise<SrpoUpdateResult> {
    if (this.busy) throw new ValidationError('update', 'an update is already running on this trainer; await it first');
    this.busy = true;
    try {
      return await this.run(sets, options.yieldPoint);
    } finally {
      this.busy = false;
    }
  }

  private async run(sets: readonly ActiveSet[], yieldPoint: YieldPoint | undefined): Promise<SrpoUpdateResult> {
    const model = this.policy.model;
    const { setInputs, pairs, fields } = flatten(sets);
    // Validate everything (token ids, lengths, log-probs) before touching the device.
    const packed = packPairs(pairs, model, (i) => fields[i]);
    const tensors = packedToTensors(packed);
    const vars = model.trainableVariables();
    const names = model.weightNames();
    const results: SrpoEpochResult[] = [];
    const micro = this.microBatchTokens > 0 && packed.m * packed.inputLength > this.microBatchTokens;
    let prepared: CorrectedBatch | undefined;
    try {
      prepared = await prepareCorrectedBatch(this.context(yieldPoint), setInputs, pairs, tensors);
      const { batch, reference } = prepared;
      for (let e = 0; e < this.epochs; e++) {
        const lr = learningRateAt(this.schedule, this.optimizer.step);
        let out: ObjectiveOutput | undefined;
        let kl: tf.Scalar | undefined;
        let byName: Map<string, tf.Tensor>;
        let peakBytes = 0;
        let microBatches = 1;
        const penalty = reference ? klTerm(reference, batch.mask, this.correction.klCoef, (k) => (kl = k)) : undefined;
        if (micro) {
          // A corrected first epoch starts where the proximal pass scored (same weights, same
          // micro-batches): its log-probs are step 1's, so that forward pass is not run twice.
          const scored = e === 0 && needsProximal(this.correction) ? batch.logpOld : undefined;
          const acc = await accumulatedGradients(model, pairs, batch, this.objective, this.temperature, this.microBatchTokens, penalty, yieldPoint, scored);
          byName = acc.grads;
          out = acc.out;
          peakBytes = acc.peakBytes;
          microBatches = acc.microBatches;
        } else {
          const { value, grads } = tf.variableGrads(() => {
            const logpNew = packedLogProbs(model, tensors, this.temperature);
            const o = learnerObjectiveLoss(logpNew, batch, this.objective);
            // Activations of the whole pass are alive here: the step's peak, give or take its gradients.
            peakBytes = tf.memory().numBytes;
            // The diagnostics tensors must outlive the gradient scope; the loss is kept by variableGrads.
            for (const t of objectiveOutputTensors(o)) tf.keep(t);
            out = { ...o, loss: tf.keep(o.loss.clone()) };
            return penalty ? tf.add<tf.Scalar>(o.loss, penalty(logpNew)) : o.loss;
          }, vars);
          value.dispose();
          byName = new Map<string, tf.Tensor>(names.map((n, i) => [n, grads[vars[i].name]]));
          await yieldPoint?.();
        }
        let normT: tf.Scalar;
        try {
          normT = this.optimizer.apply(byName, lr, this.maxGradNorm);
        } finally {
          tf.dispose([...byName.values()]);
        }
        this.policy.bumpVersion();
        const o = out as unknown as ObjectiveOutput;
        let diagnostics: Record<string, number>;
        let gradNorm: number;
        try {
          const [d, n, k] = await Promise.all([readDiagnostics(o, batch, this.objective), normT.data(), kl ? kl.data() : undefined]);
          diagnostics = { ...d, ...prepared.mismatch, ...lossParts(d['losses/loss'], k?.[0], this.correction.klCoef) };
          gradNorm = n[0];
        } finally {
          disposeObjectiveOutput(o);
          normT.dispose();
          kl?.dispose();
        }
        diagnostics['grad/norm'] = gradNorm;
        diagnostics['optim/lr'] = lr;
        diagnostics['memory/peak_bytes'] = peakBytes;
        diagnostics['memory/micro_batches'] = microBatches;
        results.push({ loss: diagnostics['losses/loss'], gradNorm, learningRate: lr, diagnostics });
        await yieldPoint?.();
      }
    } finally {
      disposePacked(tensors);
      if (prepared) disposeCorrectedBatch(prepared);
    }
    const first = results[0];
    return {
      loss: first.loss,
      gradNorm: first.gradNorm,
      learningRate: first.learningRate,
      diagnostics: first.diagnostics,
      epochs: results,
      policyVersion: this.policy.version,
      optimizerStep: this.optimizer.step,
      sequences: packed.m,
      tokens: packed.contextKept.reduce((a, c, i) => a + c + pairs[i].responseTokens.length - 1, 0),
    };
  }

  private context(yieldPoint?: YieldPoint): CorrectionContext {
    return {
      yieldPoint,
      model: this.policy.model,
      temperature: this.temperature,
      microBatchTokens: this.microBatchTokens,
      correction: this.correction,
      withReference: this.withReference,
    };
  }

  /**
   * The objective's loss and pre-clip global gradient norm on one mini-batch at the
   * current weights, without an optimizer step: weights, Adam state and version stay as
   * they are. It is what the first epoch of {@link update} would see (same forward pass,
   * same correction and KL penalty, same norm, in float32), so a caller can find which set
   * makes a step non-finite by evaluating the sets one by one.
   *
   * @throws ValidationError like {@link update} for malformed input
   */
  async evaluate(sets: readonly ActiveSet[], options: SrpoCallOptions = {}): Promise<SrpoEvaluation> {
    if (this.busy) throw new ValidationError('evaluate', 'an update is already running on this trainer; await it first');
    this.busy = true;
    try {
      const model = this.policy.model;
      const { setInputs, pairs, fields } = flatten(sets);
      const packed = packPairs(pairs, model, (i) => fields[i]);
      const tensors = packedToTensors(packed);
      let prepared: CorrectedBatch | undefined;
      try {
        prepared = await prepareCorrectedBatch(this.context(options.yieldPoint), setInputs, pairs, tensors);
        const { batch, reference } = prepared;
        // The objective as update computes it (the fused op where update takes it).
        let out: ObjectiveOutput | undefined;
        let kl: tf.Scalar | undefined;
        const penalty = reference ? klTerm(reference, batch.mask, this.correction.klCoef, (k) => (kl = k)) : undefined;
        const { value, grads } = tf.variableGrads(() => {
          const logpNew = packedLogProbs(model, tensors, this.temperature);
          out = learnerObjectiveLoss(logpNew, batch, this.objective);
          return penalty ? tf.add<tf.Scalar>(out.loss, penalty(logpNew)) : out.loss;
        }, model.trainableVariables());
        const normT = tf.tidy(() => tf.sqrt(tf.addN(Object.values(grads).map((g) => tf.sum(tf.square(g))))) as tf.Scalar);
        try {
          const [loss, norm] = await Promise.all([value.data(), normT.data()]);
          return { loss: loss[0], gradNorm: norm[0] };
        } finally {
          tf.dispose([value, normT, ...Object.values(grads), ...(out ? objectiveOutputTensors(out) : []), ...(kl ? [kl] : [])]);
        }
      } finally {
        disposePacked(tensors);
        if (prepared) disposeCorrectedBatch(prepared);
      }
    } finally {
      this.busy = false;
    }
  }

  dispose(): void {
    this.optimizer.dispose();
  }
}

/** {@link SrpoTrainer.evaluate}: loss and gradient norm of one mini-batch, no step taken. */
export interface SrpoEvaluation {
  loss: number;
  /** Global L2 norm of the gradient before clipping, computed as the optimizer would (float32). */
  gradNorm: number;
}

/**
 * `Array.isArray` for typed input checked again at run time (callers may be plain JavaScript): the
 * standard guard (`arg is any[]`) would turn a `readonly T[]` into `any` and untype its elements.
 */
function isArray(v: unknown): v is readonly unknown[] {
  return Array.isArray(v);
}

function flatten(sets: readonly ActiveSet[]): { setInputs: SetInput[]; pairs: SequencePair[]; fields: string[] } {
  if (!isArray(sets) || sets.length === 0) throw new ValidationError('sets', 'a mini-batch needs at least one active set');
  const setInputs: SetInput[] = [];
  const pairs: SequencePair[] = [];
  const fields: string[] = [];
  sets.forEach((s, i) => {
    const list: readonly ActiveSetMember[] = isArray(s.members) ? s.members : [];
    if (list.length === 0) throw new ValidationError(`sets[${i}].members`, 'a set needs at least one member');
    const members = list.map((m, j) => {
      const field = `sets[${i}].members[${j}]`;
      if (!isArray(m.responseTokens) || !isArray(m.contextTokens)) {
        throw new ValidationError(field, 'contextTokens and responseTokens must be arrays');
      }
      if (!isArray(m.logpOld) || m.logpOld.length !== m.responseTokens.length) {
        throw new ValidationError(
          `${field}.logpOld`,
          `must hold one log-prob per response token (${m.responseTokens.length}), got ${isArray(m.logpOld) ? m.logpOld.length : typeof m.logpOld}`,
        );
      }
      const mask = m.mask ? [...m.mask] : new Array<number>(m.responseTokens.length).fill(1);
      if (mask.length !== m.responseTokens.length) {
        throw new ValidationError(`${field}.mask`, `must hold one value per response token (${m.responseTokens.length}), got ${mask.length}`);
      }
      pairs.push({ contextTokens: m.contextTokens, responseTokens: m.responseTokens, mask });
      fields.push(field);
      return { outputId: m.outputId, logpOld: [...m.logpOld], mask };
    });
    setInputs.push({ setId: s.setId, advantage: s.advantage, members });
  });
  return { setInputs, pairs, fields };
}

/**
 * Splits active sets into mini-batches of at most `maxSequences` members
 * without ever splitting a set (a set larger than the limit gets a batch of its
 * own). Keeps input order; greedy, so the result is deterministic.
 */
export function packMiniBatches<T extends { members: readonly unknown[] }>(sets: readonly T[], maxSequences: number): T[][] {
  if (!Number.isInteger(maxSequences) || maxSequences < 1) throw new ValidationError('maxSequences', `must be a positive integer, got ${maxSequences}`);
  const out: T[][] = [];
  let current: T[] = [];
  let count = 0;
  for (const s of sets) {
    const k = s.members.length;
    if (current.length > 0 && count + k > maxSequences) {
      out.push(current);
      current = [];
      count = 0;
    }
    current.push(s);
    count += k;
  }
  if (current.length > 0) out.push(current);
  return out;
}
