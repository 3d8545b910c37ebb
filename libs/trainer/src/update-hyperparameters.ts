import { ErrorCode, errorMessage, SrpoError } from '@srpo/core';
import type { OffsetRange } from '@srpo/events';
import { resolveCorrectionConfig, resolveObjectiveConfig, type CorrectionConfig, type ObjectiveConfig } from '@srpo/srpo';
import type { JsonValue } from '@srpo/store';

/**
 * The hyperparameters one SRPO step is recomputed with: what `audit verify` and
 * `replay` need from a record to redo the update bit for bit.
 */
export interface StepHyperparameters {
  objective: ObjectiveConfig;
  lr: number;
  epochs: number;
  maxGradNorm: number;
  /** Micro-batch budget the update ran with (0: one pass; records before it existed read as 0). */
  microBatchTokens: number;
  /**
   * Engine/learner mismatch correction and KL penalty the update ran with (docs/objective.md,
   * section 7). Absent: none and no penalty, which is how every record before it existed was
   * computed, and how an update without them is written (so such rows stay as they were).
   */
  correction?: CorrectionConfig;
}

/**
 * What is recorded with an SRPO update (the learner's, the Python trainer's, a replay's).
 * The property names are the stored JSON keys and are written in this order: never rename
 * or reorder them, rows already in the database must keep verifying.
 */
export interface UpdateHyperparameters extends StepHyperparameters {
  /** SRPO_MAX_POLICY_LAG the mini-batch was triaged with (absent only in rows written by hand). */
  maxPolicyLag?: number;
  /** SRPO_SETS_PER_UPDATE the mini-batch was gathered with. */
  setsPerUpdate?: number;
  /** The one sampling temperature every member of the update was scored at. */
  temperature?: number;
}

/** What the learner records: every field of {@link UpdateHyperparameters}, none optional but `correction` (absent: none). */
export type LearnerHyperparameters = Required<Omit<UpdateHyperparameters, 'correction'>> & Pick<UpdateHyperparameters, 'correction'>;

/** Whether a correction changes the step: anything but `none` without a KL penalty. Only then is it recorded. */
export function correctionApplies(c: CorrectionConfig | undefined): c is CorrectionConfig {
  return c !== undefined && (c.correction !== 'none' || c.klCoef > 0);
}

/** What an AgentBrew offline run records (libs/offline); told apart from SRPO updates by `method`. */
export interface OfflineHyperparameters {
  method: 'agentbrew-offline';
  weighting: 'credit';
  /** `policy`: only the actions the trained policy sampled; `all`: every action. */
  trainOn: 'policy' | 'all';
  creditMode: string;
  maxFailedShare: number;
  /** The step success rule, verbatim (`StepSuccessRule` of libs/offline). */
  stepRule: { [key: string]: JsonValue };
  inferrer: string;
  /** `<scorer policy>@v<version>`. */
  scorer: string;
  lr: number;
  steps: number;
  batchSize: number;
  maxGradNorm: number;
  fromMs: number;
  toMs: number;
  /** The raw offsets read, per topic (inclusive ranges). */
  sourceRanges: Record<string, OffsetRange[]>;
  inferredTasksTopic: string;
  actionCreditsTopic: string;
}

/** Either kind of recorded hyperparameters; `'method' in h` tells them apart. */
export type RecordedHyperparameters = UpdateHyperparameters | OfflineHyperparameters;

/** Whether typed hyperparameters are an offline run's (they carry `method`; SRPO updates never do). */
export function isOfflineHyperparameters(h: RecordedHyperparameters): h is OfflineHyperparameters {
  return 'method' in h && h.method === 'agentbrew-offline';
}

/**
 * The stored JSON of typed hyperparameters, keys in the order the learner and the offline job
 * have always written them (so new rows are byte for byte what the hand-built copies wrote).
 */
export function hyperparametersJson(h: RecordedHyperparameters): Record<string, JsonValue> {
  if (isOfflineHyperparameters(h)) {
    return {
      method: h.method,
      weighting: h.weighting,
      trainOn: h.trainOn,
      creditMode: h.creditMode,
      maxFailedShare: h.maxFailedShare,
      stepRule: toJson(h.stepRule, 'stepRule'),
      inferrer: h.inferrer,
      scorer: h.scorer,
      lr: h.lr,
      steps: h.steps,
      batchSize: h.batchSize,
      maxGradNorm: h.maxGradNorm,
      fromMs: h.fromMs,
      toMs: h.toMs,
      sourceRanges: toJson(h.sourceRanges, 'sourceRanges'),
      inferredTasksTopic: h.inferredTasksTopic,
      actionCreditsTopic: h.actionCreditsTopic,
    };
  }
  const out: Record<string, JsonValue> = {
    objective: toJson(h.objective, 'objective'),
    lr: h.lr,
    epochs: h.epochs,
    maxGradNorm: h.maxGradNorm,
    microBatchTokens: h.microBatchTokens,
  };
  // Optional ones only when known: a replay of a row without them writes none either.
  if (h.maxPolicyLag !== undefined) out.maxPolicyLag = h.maxPolicyLag;
  if (h.setsPerUpdate !== undefined) out.setsPerUpdate = h.setsPerUpdate;
  if (h.temperature !== undefined) out.temperature = h.temperature;
  if (correctionApplies(h.correction)) out.correction = toJson(h.correction, 'correction');
  return out;
}

/** Anything holding a record's stored `hyperparameters` (an `UpdateRecord`, an `UpdateDetail`). */
export interface HyperparametersSource {
  hyperparameters: Readonly<Record<string, JsonValue>>;
}

/**
 * A record's hyperparameters, typed and validated: an offline run's when `method` says so,
 * otherwise an SRPO update's ({@link readUpdateHyperparameters}).
 *
 * @throws SrpoError INTEGRITY_FAILED naming the first missing or wrong field
 */
export function readHyperparameters(record: HyperparametersSource): RecordedHyperparameters {
  const h = record.hyperparameters;
  if (h.method === undefined) return readUpdateHyperparameters(record);
  const f = fields(record);
  if (h.method !== 'agentbrew-offline') throw f.fail('method', `is ${JSON.stringify(h.method)}, expected agentbrew-offline or none (an SRPO update)`);
  return {
    method: 'agentbrew-offline',
    weighting: f.oneOf('weighting', ['credit'] as const),
    trainOn: f.oneOf('trainOn', ['policy', 'all'] as const),
    creditMode: f.str('creditMode'),
    maxFailedShare: f.num('maxFailedShare', { min: 0, max: 1 }),
    stepRule: f.obj('stepRule'),
    inferrer: f.str('inferrer'),
    scorer: f.str('scorer'),
    lr: f.num('lr', { min: 0 }),
    steps: f.num('steps', { min: 1, integer: true }),
    batchSize: f.num('batchSize', { min: 1, integer: true }),
    maxGradNorm: f.num('maxGradNorm', { min: 0 }),
    fromMs: f.num('fromMs', { integer: true }),
    toMs: f.num('toMs', { integer: true }),
    sourceRanges: f.obj('sourceRanges') as unknown as Record<string, OffsetRange[]>,
    inferredTasksTopic: f.str('inferredTasksTopic'),
    actionCreditsTopic: f.str('actionCreditsTopic'),
  };
}

/**
 * An SRPO update's recorded hyperparameters, validated: what verify and replay recompute it
 * with. `microBatchTokens` recorded before it existed reads as 0; `correction` absent stays
 * absent (no correction, no KL penalty: how those updates were computed); an objective recorded
 * without `dualClip` was computed before the dual clip existed, i.e. without it, and reads as
 * `dualClip: false`, so such updates are recomputed as they were made (docs/objective.md).
 *
 * @throws SrpoError INTEGRITY_FAILED naming the first missing or wrong field (an offline
 *   run's record is refused: it is no SRPO step)
 */
export function readUpdateHyperparameters(record: HyperparametersSource): UpdateHyperparameters {
  const h = record.hyperparameters;
  const f = fields(record);
  if (h.method !== undefined) {
    throw f.fail('method', `is ${JSON.stringify(h.method)}: the update was not an SRPO step and cannot be recomputed as one`);
  }
  if (h.objective === undefined) throw f.fail('objective', 'is missing');
  let objective: ObjectiveConfig;
  try {
    objective = resolveObjectiveConfig(
      isPlainObject(h.objective) && h.objective.dualClip === undefined ? { ...h.objective, dualClip: false } : h.objective,
      'hyperparameters.objective',
    );
  } catch (e) {
    throw new SrpoError(ErrorCode.INTEGRITY_FAILED, errorMessage(e), { field: 'hyperparameters.objective', cause: e });
  }
  const out: UpdateHyperparameters = {
    objective,
    lr: f.num('lr', { min: 0 }),
    epochs: f.num('epochs', { min: 1, integer: true }),
    maxGradNorm: f.num('maxGradNorm', { min: 0 }),
    microBatchTokens: h.microBatchTokens === undefined ? 0 : f.num('microBatchTokens', { min: 0, integer: true }),
  };
  if (h.maxPolicyLag !== undefined) out.maxPolicyLag = f.num('maxPolicyLag', { min: 0, integer: true });
  if (h.setsPerUpdate !== undefined) out.setsPerUpdate = f.num('setsPerUpdate', { min: 1, integer: true });
  if (h.temperature !== undefined) out.temperature = f.num('temperature', { min: 0 });
  if (h.correction !== undefined) {
    try {
      out.correction = resolveCorrectionConfig(h.correction, 'hyperparameters.correction');
    } catch (e) {
      throw new SrpoError(ErrorCode.INTEGRITY_FAILED, errorMessage(e), { field: 'hyperparameters.correction', cause: e });
    }
  }
  return out;
}

function fields(record: HyperparametersSource) {
  const h = record.hyperparameters;
  const fail = (name: string, problem: string) =>
    new SrpoError(ErrorCode.INTEGRITY_FAILED, `hyperparameters.${name} ${problem}`, { field: `hyperparameters.${name}` });
  const present = (name: string): JsonValue => {
    const v = h[name];
    if (v === undefined || v === null) throw fail(name, 'is missing');
    return v;
  };
  return {
    fail,
    num(name: string, range: { min?: number; max?: number; integer?: boolean } = {}): number {
      const v = present(name);
      const kind = `${range.integer ? 'an integer' : 'a finite number'}${range.min !== undefined ? ` >= ${range.min}` : ''}${range.max !== undefined ? ` and <= ${range.max}` : ''}`;
      if (
        typeof v !== 'number' ||
        !Number.isFinite(v) ||
        (range.integer && !Number.isInteger(v)) ||
        (range.min !== undefined && v < range.min) ||
        (range.max !== undefined && v > range.max)
      ) {
        throw fail(name, `must be ${kind}, recorded ${JSON.stringify(v)}`);
      }
      return v;
    },
    str(name: string): string {
      const v = present(name);
      if (typeof v !== 'string') throw fail(name, `must be a string, recorded ${JSON.stringify(v)}`);
      return v;
    },
    oneOf<T extends string>(name: string, allowed: readonly T[]): T {
      const v = present(name);
      if (typeof v !== 'string' || !(allowed as readonly string[]).includes(v))
        throw fail(name, `must be one of ${allowed.join(', ')}, recorded ${JSON.stringify(v)}`);
      return v as T;
    },
    obj(name: string): { [key: string]: JsonValue } {
      const v = present(name);
      if (!isPlainObject(v)) throw fail(name, `must be an object, recorded ${JSON.stringify(v)}`);
      return v;
    },
  };
}

/**
 * A deep copy as JSON: plain objects (key order kept, undefined properties dropped as
 * JSON.stringify drops them), arrays and primitives. Unlike a JSON round trip it keeps NaN
 * and ±Infinity, which the store's JSON columns encode.
 */
function toJson(value: unknown, at: string): JsonValue {
  if (value === null || typeof value === 'string' || typeof value === 'number' || typeof value === 'boolean') return value;
  if (Array.isArray(value)) return value.map((v, i) => toJson(v, `${at}[${i}]`));
  if (isPlainObject(value)) {
    const out: { [key: string]: JsonValue } = {};
    for (const [k, v] of Object.entries(value)) if (v !== undefined) out[k] = toJson(v, `${at}.${k}`);
    return out;
  }
  throw new SrpoError(ErrorCode.VALIDATION_FAILED, `hyperparameters.${at}: ${typeof value} is not JSON`, { field: `hyperparameters.${at}` });
}

function isPlainObject(v: unknown): v is { [key: string]: JsonValue } {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
