import * as tf from '@tensorflow/tfjs';
import { ValidationError } from '@srpo/core';
import { groupAdvantages } from './advantages';
import { resolveObjectiveConfig } from './config';
import type { ObjectiveConfig } from './config';
import { readDiagnostics } from './diagnostics';
import { disposeObjectiveOutput, objectiveLoss } from './objective';
import type { ObjectiveOutput } from './objective';
import { buildPaddedSetBatch, disposePaddedSetBatch, padRows } from './padded-batch';
import type { PaddedSetBatch } from './padded-batch';
import {
  isRecord,
  rejectUnknownKeys,
  memberPath,
  requireArray,
  requireFiniteNumber,
  requireLogProbRow,
  requireMaskRow,
  requireNonEmptyString,
  requireRecord,
  requireSameLength,
  setPath,
} from './validation';

/**
 * Core of the audit command `srpo objective --in FILE [--grad]`: evaluates the
 * objective on sets given as JSON, so an operator can check by hand what the
 * learner would compute for a batch.
 */

export interface ObjectiveRequestOptions {
  /** Also return ∂loss/∂logpNew for every token. */
  grad: boolean;
}

export interface ObjectiveRequestMember {
  outputId: string;
  logpNew: number[];
  logpOld: number[];
  mask: number[];
}

export interface ObjectiveRequestSet {
  setId: string;
  groupKey: string;
  reward: number;
  progress?: number;
  /** Declared K; a set whose `members` has another length is refused. */
  memberCount?: number;
  members: ObjectiveRequestMember[];
}

export interface ObjectiveRequest {
  config: ObjectiveConfig;
  sets: ObjectiveRequestSet[];
}

export interface ObjectiveSetReport {
  setId: string;
  /** The set's group-normalised advantage (float64, before the float32 cast). */
  advantage: number;
  /**
   * ρ_e under `srpo`, saturated at e^44.36 ≈ 1.8e19 when it is not representable (see
   * `outOfRange`); absent under the baselines, whose ratios are per member or per token.
   */
  ratio?: number;
  /** L_e = log ρ_e under `srpo` (finite, even where ρ_e is not representable); absent under the baselines. */
  logRatio?: number;
  /**
   * Under `srpo`: the set's clip (low, high or dual) is active (its gradient is zeroed). Under the
   * baselines: at least one of the set's members (`gspo`) or unmasked tokens (`grpo-token`) is.
   */
  clipped: boolean;
  /**
   * The set's ratio (`srpo`), or one of its members' (`gspo`) or unmasked tokens'
   * (`grpo-token`), left the representable range |log r| <= 44.36; counted in the
   * diagnostics as `ratio/out_of_range`.
   */
  outOfRange: boolean;
}

export interface ObjectiveReport {
  loss: number;
  /** In input order. */
  sets: ObjectiveSetReport[];
  diagnostics: Record<string, number>;
  /** With `grad`: ∂loss/∂logpNew nested [set][member][token] in input order; 0 for masked tokens. */
  gradLogpNew?: number[][][];
}

const TOP_KEYS = ['config', 'sets'];
const SET_KEYS = ['setId', 'groupKey', 'reward', 'progress', 'memberCount', 'members'];
const MEMBER_KEYS = ['outputId', 'logpNew', 'logpOld', 'mask'];

/**
 * Validates an audit request (parsed JSON). Every config field is optional.
 *
 * @throws ValidationError with a one-line message naming set, member and field, e.g.
 *   `sets[0] (t-17).members[1] (o-2).mask: length 3 differs from logpNew length 2`
 */
export function parseObjectiveRequest(input: unknown): ObjectiveRequest {
  const root = requireRecord(input, 'request', 'an object with "sets" (and optionally "config")');
  rejectUnknownKeys(root, TOP_KEYS, 'request');
  const config = resolveObjectiveConfig(root.config, 'config');
  const rawSets = requireArray(root.sets, 'sets', 'an array of sets');
  if (rawSets.length === 0) throw new ValidationError('sets', 'a request needs at least one set');
  const sets = rawSets.map((raw, e): ObjectiveRequestSet => {
    const path = setPath(e, isRecord(raw) ? raw.setId : undefined);
    const s = requireRecord(raw, path, 'a set object');
    rejectUnknownKeys(s, SET_KEYS, path);
    const setId = requireNonEmptyString(s.setId, `${path}.setId`);
    const groupKey = requireNonEmptyString(s.groupKey, `${path}.groupKey`);
    const reward = requireFiniteNumber(s.reward, `${path}.reward`);
    const progress = s.progress === undefined ? undefined : requireFiniteNumber(s.progress, `${path}.progress`);
    const memberCount = s.memberCount === undefined ? undefined : requireFiniteNumber(s.memberCount, `${path}.memberCount`);
    const rawMembers = requireArray(s.members, `${path}.members`, 'an array of members');
    const members = rawMembers.map((rawMember, j): ObjectiveRequestMember => {
      const mPath = memberPath(path, j, isRecord(rawMember) ? rawMember.outputId : undefined);
      if (rawMember === null || rawMember === undefined) {
        throw new ValidationError(mPath, 'missing member; a set with a missing member is refused as a whole');
      }
      const m = requireRecord(rawMember, mPath, 'a member object');
      rejectUnknownKeys(m, MEMBER_KEYS, mPath);
      const outputId = requireNonEmptyString(m.outputId, `${mPath}.outputId`);
      const logpNew = requireLogProbRow(m.logpNew, `${mPath}.logpNew`);
      const logpOld = requireArray(m.logpOld, `${mPath}.logpOld`, 'an array of log-probabilities');
      requireSameLength(logpOld, `${mPath}.logpOld`, logpNew, 'logpNew');
      requireLogProbRow(logpOld, `${mPath}.logpOld`);
      const mask = requireArray(m.mask, `${mPath}.mask`, 'an array of 0/1 mask values');
      requireSameLength(mask, `${mPath}.mask`, logpNew, 'logpNew');
      requireMaskRow(mask, `${mPath}.mask`);
      return { outputId, logpNew, logpOld: logpOld as number[], mask: mask as number[] };
    });
    return { setId, groupKey, reward, ...(progress === undefined ? {} : { progress }), ...(memberCount === undefined ? {} : { memberCount }), members };
  });
  return { config, sets };
}

/**
 * Evaluates the configured objective on a request: group advantages (float64,
 * with the ProGPO fallback when enabled), the loss and per-set report (float32,
 * as in training), diagnostics, and with `grad` the gradient of the loss with
 * respect to every logpNew entry (tfjs autodiff).
 *
 * Uses the active tfjs backend; the CLI selects it with `initTfBackend` first.
 * Frees every tensor it creates.
 *
 * @throws ValidationError for bad input (see {@link parseObjectiveRequest}); nothing is computed then
 */
export async function evaluateObjectiveRequest(input: unknown, options: ObjectiveRequestOptions): Promise<ObjectiveReport> {
  const request = parseObjectiveRequest(input);
  const { config, sets } = request;
  const advantages = groupAdvantages(
    sets.map((s) => ({ setId: s.setId, groupKey: s.groupKey, reward: s.reward, ...(s.progress === undefined ? {} : { progress: s.progress }) })),
    config,
  );
  const batch = buildPaddedSetBatch(
    sets.map((s, e) => ({
      setId: s.setId,
      advantage: advantages[e].advantage,
      ...(s.memberCount === undefined ? {} : { memberCount: s.memberCount }),
      members: s.members.map((m) => ({ outputId: m.outputId, logpOld: m.logpOld, mask: m.mask })),
    })),
  );
  const T = batch.logpOld.shape[1];
  const rows = sets.flatMap((s) => s.members.map((m) => m.logpNew));
  const logpNew = tf.tensor2d(padRows(rows, T), [rows.length, T], 'float32');
  let out: ObjectiveOutput | undefined;
  try {
    out = objectiveLoss(logpNew, batch, config);
    const diagnostics = await readDiagnostics(out, batch, config, advantages);
    const setReports = await reportSets(
      out,
      batch,
      sets,
      advantages.map((a) => a.advantage),
    );
    const report: ObjectiveReport = { loss: diagnostics['losses/loss'], sets: setReports, diagnostics };
    if (options.grad) report.gradLogpNew = await gradient(logpNew, batch, config, sets);
    return report;
  } finally {
    if (out) disposeObjectiveOutput(out);
    logpNew.dispose();
    disposePaddedSetBatch(batch);
  }
}

async function reportSets(
  out: ObjectiveOutput,
  batch: PaddedSetBatch,
  sets: readonly ObjectiveRequestSet[],
  advantages: readonly number[],
): Promise<ObjectiveSetReport[]> {
  const [ratios, logRatios, weights, unitSet, low, high, dual, outside] = await Promise.all(
    [out.ratio, out.logRatio, out.unitWeight, out.unitSet, out.clippedLow, out.clippedHigh, out.clippedDual, out.outOfRange].map((t) => t.data()),
  );
  const clipped = new Array<boolean>(batch.numSets).fill(false);
  const outOfRange = new Array<boolean>(batch.numSets).fill(false);
  for (let i = 0; i < ratios.length; i++) {
    if (weights[i] === 0) continue;
    if (low[i] !== 0 || high[i] !== 0 || dual[i] !== 0) clipped[unitSet[i]] = true;
    if (outside[i] !== 0) outOfRange[unitSet[i]] = true;
  }
  return sets.map((s, e) => ({
    setId: s.setId,
    advantage: advantages[e],
    ...(out.unit === 'set' ? { ratio: ratios[e], logRatio: logRatios[e] } : {}),
    clipped: clipped[e],
    outOfRange: outOfRange[e],
  }));
}

async function gradient(logpNew: tf.Tensor2D, batch: PaddedSetBatch, config: ObjectiveConfig, sets: readonly ObjectiveRequestSet[]): Promise<number[][][]> {
  const g = tf.grad((x: tf.Tensor) => objectiveLoss(x as tf.Tensor2D, batch, config).loss)(logpNew);
  let values: Float32Array | Int32Array | Uint8Array;
  try {
    values = await g.data();
  } finally {
    g.dispose();
  }
  const T = logpNew.shape[1];
  let row = 0;
  return sets.map((s) =>
    s.members.map((m) => {
      const start = row++ * T;
      return Array.from(values.subarray(start, start + m.logpNew.length));
    }),
  );
}
