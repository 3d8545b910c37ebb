import * as tf from '@tensorflow/tfjs';
import { dualClipRatio, logRatioBounds, objectiveLoss, type ObjectiveConfig, type ObjectiveOutput, type PaddedSetBatch } from '@srpo/srpo';
import { native } from './native-ops';
import { srpoKernelAvailable } from './srpo-kernels';

/**
 * `@srpo/srpo`'s `objectiveLoss` for the set objectives (`srpo`, `srpo-length-norm`) as one
 * native op each way: `SrpoSetObjective` for the loss and every `ObjectiveOutput` field,
 * `SrpoSetObjectiveGrad` for ∂loss/∂logpNew (libs/kernels/native/objective-kernels.h, which
 * states the formula step by step after libs/srpo's composite, its reference).
 *
 * Why: the composite is about 90 tfjs ops on tensors of a few thousand floats (the objective,
 * its flags and the autodiff of its parts), each a fixed cost; the reference step spent 3.2 ms
 * of 39 there (Intel Xeon, 2026-12-03, #21).
 *
 * Used by the trainer's whole-batch step on the native backend with the kernels loaded;
 * `undefined` elsewhere (other objectives, other backends, the kernel switched off), where the
 * caller takes the composite. The values agree with the composite to float32 rounding (sums in
 * another order, another exp), not bit for bit: an update records the kernel set.
 *
 * Ownership: the loss belongs to the calling scope, as the composite's does (a gradient
 * function returns it); every other field is kept (`tf.keep`) whatever scope the call runs in:
 * free them with `disposeObjectiveOutput` or `objectiveOutputTensors`, as the trainer does.
 */
export function fusedObjectiveLoss(logpNew: tf.Tensor2D, batch: PaddedSetBatch, config: ObjectiveConfig): ObjectiveOutput | undefined {
  if (config.objective !== 'srpo' && config.objective !== 'srpo-length-norm') return undefined;
  const be = native();
  if (!be || !srpoKernelAvailable('SrpoSetObjective') || !srpoKernelAvailable('SrpoSetObjectiveGrad')) return undefined;
  const params = objectiveParams(config);
  const inputs = (x: tf.Tensor): tf.Tensor[] => [x, batch.logpOld, batch.mask, batch.advantage, batch.memberSet, params];
  let fields: tf.Tensor[] = [];
  const fn = tf.customGrad((...args: (tf.Tensor | tf.GradSaveFunc)[]) => {
    const [x, save] = args as [tf.Tensor2D, tf.GradSaveFunc];
    const [loss, ...rest] = be.executeMultipleOutputs('SrpoSetObjective', [], inputs(x), 10);
    fields = rest.map((t) => tf.keep(t));
    save([x]);
    return {
      value: loss as tf.Scalar,
      gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => be.executeSingleOutput('SrpoSetObjectiveGrad', [], [dy, ...inputs(saved[0])]),
    };
  });
  const loss = fn(logpNew);
  const [logRatio, unitSetSize, ratio, clippedLow, clippedHigh, clippedDual, outOfRange, memberLogRatio, tokenLogRatio] = fields;
  const s = batch.numSets;
  return {
    loss,
    objective: config.objective,
    unit: 'set',
    ratio: ratio as tf.Tensor1D,
    logRatio: logRatio as tf.Tensor1D,
    unitWeight: tf.keep<tf.Tensor1D>(tf.ones([s])),
    unitSet: tf.keep<tf.Tensor1D>(tf.range(0, s, 1, 'int32')),
    unitSetSize: unitSetSize as tf.Tensor1D,
    unitAdvantage: tf.keep(tf.clone(batch.advantage)),
    clippedLow: clippedLow as tf.Tensor1D,
    clippedHigh: clippedHigh as tf.Tensor1D,
    clippedDual: clippedDual as tf.Tensor1D,
    outOfRange: outOfRange as tf.Tensor1D,
    memberLogRatio: memberLogRatio as tf.Tensor1D,
    tokenLogRatio: tokenLogRatio as tf.Tensor2D,
  };
}

/**
 * The objective as the learner computes it: {@link fusedObjectiveLoss} where it applies, else
 * `@srpo/srpo`'s `objectiveLoss`. The trainer's step, `evaluate` and micro-batches all call this,
 * so they compute the same numbers.
 */
export function learnerObjectiveLoss(logpNew: tf.Tensor2D, batch: PaddedSetBatch, config: ObjectiveConfig): ObjectiveOutput {
  return fusedObjectiveLoss(logpNew, batch, config) ?? objectiveLoss(logpNew, batch, config);
}

const REDUCTION_CODE = { sqrt: 0, sum: 1, mean: 2 } as const;

// The op's `params` per config, made once per backend and kept (a step would otherwise upload them each time).
const paramsCache = new Map<string, { backend: tf.KernelBackend; tensor: tf.Tensor1D }>();

/** `SrpoSetObjective`'s params: SetObjectiveParams of objective-kernels.h, in its field order. */
function objectiveParams(config: ObjectiveConfig): tf.Tensor1D {
  const c = dualClipRatio(config);
  const bounds = logRatioBounds(config.clipHigh, c);
  // Float64 here, rounded to float32 once, as the composite's scalars are.
  const values = [
    1 - config.clipLow,
    1 + config.clipHigh,
    bounds.positive,
    bounds.nonPositive,
    c ?? 0,
    c === null ? 0 : 1,
    REDUCTION_CODE[config.eventReduction],
    config.objective === 'srpo-length-norm' ? 1 : 0,
  ];
  const key = values.join(',');
  const cached = paramsCache.get(key);
  if (cached && cached.backend === tf.backend() && !cached.tensor.isDisposed) return cached.tensor;
  const tensor = tf.keep(tf.tensor1d(values, 'float32'));
  paramsCache.set(key, { backend: tf.backend(), tensor });
  return tensor;
}
