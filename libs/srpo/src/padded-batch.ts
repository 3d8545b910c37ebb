import * as tf from '@tensorflow/tfjs';
import { ValidationError } from '@srpo/core';
import {
  isRecord,
  memberPath,
  requireArray,
  requireFiniteNumber,
  requireLogProbRow,
  requireMaskRow,
  requireNonEmptyString,
  requireSameLength,
  setPath,
} from './validation';

/**
 * Padded tensor layout of one mini-batch: M members (agent outputs) in S active
 * sets, each member's tokens left-aligned in a row of T = max tokens.
 *
 * The caller owns the tensors; free them with {@link disposePaddedSetBatch}.
 */
export interface PaddedSetBatch {
  /** [M, T] behaviour-policy log-probs log π_old(u), 0 where padded. */
  logpOld: tf.Tensor2D;
  /** [M, T] float32; 1 = counted response token, 0 = prompt, padding or environment token. */
  mask: tf.Tensor2D;
  /** [M] int32; index in 0..S−1 of the set each member belongs to. Members of one set need not be adjacent. */
  memberSet: tf.Tensor1D;
  /** [S] float32; one advantage per set. */
  advantage: tf.Tensor1D;
  /** S. */
  numSets: number;
  /** Ids and unpadded lengths, present when built by {@link buildPaddedSetBatch}. */
  layout?: PaddedSetLayout;
}

export interface PaddedSetLayout {
  /** [S] set ids in set-index order. */
  setIds: string[];
  /** [M] one entry per member row. */
  members: { setIndex: number; outputId: string; length: number }[];
  /** T. */
  maxTokens: number;
}

export interface SetMemberInput {
  outputId: string;
  /** log π_old per token, all <= 0. */
  logpOld: number[];
  /** 1 = response token counted in the objective, 0 = prompt, padding or environment token. */
  mask: number[];
}

export interface SetInput {
  setId: string;
  advantage: number;
  members: SetMemberInput[];
  /**
   * The number of members K the active set declared. When given, a set whose
   * `members` has another length is refused: a set missing a member is invalid
   * as a whole and is never trained on in part.
   */
  memberCount?: number;
}

/**
 * Validates plain-JS sets and lays them out as a {@link PaddedSetBatch}.
 *
 * Refused, with the set, member and field named: an empty batch; a set with no
 * members, a `null` member or fewer members than its `memberCount`; a duplicate
 * setId or outputId; a non-finite advantage; logpOld and mask of different
 * lengths; a non-finite or positive log-prob; a mask entry other than 0/1; a
 * member with no unmasked token.
 *
 * @throws ValidationError e.g. `sets[0] (t-17).members[1] (o-2).mask: length 3 differs from logpOld length 2`
 */
export function buildPaddedSetBatch(sets: SetInput[]): PaddedSetBatch {
  const layout = validateSets(sets);
  const M = layout.members.length;
  const T = layout.maxTokens;
  const logpOld = new Float32Array(M * T);
  const mask = new Float32Array(M * T);
  const memberSet = new Int32Array(M);
  let row = 0;
  sets.forEach((s, e) => {
    for (const m of s.members) {
      logpOld.set(m.logpOld, row * T);
      mask.set(m.mask, row * T);
      memberSet[row] = e;
      row++;
    }
  });
  return {
    logpOld: tf.tensor2d(logpOld, [M, T], 'float32'),
    mask: tf.tensor2d(mask, [M, T], 'float32'),
    memberSet: tf.tensor1d(memberSet, 'int32'),
    advantage: tf.tensor1d(Float32Array.from(sets.map((s) => s.advantage)), 'float32'),
    numSets: sets.length,
    layout,
  };
}

/**
 * Pads per-member rows (e.g. current-policy log-probs in input order) into the
 * row-major [M, T] layout of a batch, with `fill` in the padding.
 */
export function padRows(rows: readonly (readonly number[])[], maxTokens: number, fill = 0): Float32Array {
  const out = new Float32Array(rows.length * maxTokens).fill(fill);
  rows.forEach((r, i) => out.set(r, i * maxTokens));
  return out;
}

/** Frees every tensor of a batch. */
export function disposePaddedSetBatch(batch: PaddedSetBatch): void {
  tf.dispose([batch.logpOld, batch.mask, batch.memberSet, batch.advantage]);
}

function validateSets(sets: SetInput[]): PaddedSetLayout {
  const list = requireArray(sets, 'sets', 'an array of sets');
  if (list.length === 0) throw new ValidationError('sets', 'a batch needs at least one set');
  const setIds: string[] = [];
  const members: PaddedSetLayout['members'] = [];
  const seenSets = new Map<string, number>();
  let maxTokens = 0;
  list.forEach((raw, e) => {
    const path = setPath(e, isRecord(raw) ? raw.setId : undefined);
    if (!isRecord(raw)) throw new ValidationError(path, `missing set; expected an object`);
    const setId = requireNonEmptyString(raw.setId, `${path}.setId`);
    const earlier = seenSets.get(setId);
    if (earlier !== undefined) throw new ValidationError(`${path}.setId`, `duplicate of sets[${earlier}]`);
    seenSets.set(setId, e);
    requireFiniteNumber(raw.advantage, `${path}.advantage`);
    const list = requireArray(raw.members, `${path}.members`, 'an array of members');
    if (list.length === 0) throw new ValidationError(`${path}.members`, 'a set needs at least one member');
    if (raw.memberCount !== undefined) {
      const declared = requireFiniteNumber(raw.memberCount, `${path}.memberCount`);
      if (list.length !== declared) {
        throw new ValidationError(
          `${path}.members`,
          `${list.length} members present but the set declares memberCount ${declared}; an incomplete set is refused as a whole`,
        );
      }
    }
    const seenOutputs = new Map<string, number>();
    list.forEach((m, j) => {
      const mPath = memberPath(path, j, isRecord(m) ? m.outputId : undefined);
      if (!isRecord(m)) throw new ValidationError(mPath, 'missing member; a set with a missing member is refused as a whole');
      const outputId = requireNonEmptyString(m.outputId, `${mPath}.outputId`);
      const dup = seenOutputs.get(outputId);
      if (dup !== undefined) throw new ValidationError(`${mPath}.outputId`, `duplicate of members[${dup}]`);
      seenOutputs.set(outputId, j);
      const logpOld = requireLogProbRow(m.logpOld, `${mPath}.logpOld`);
      const mask = requireArray(m.mask, `${mPath}.mask`, 'an array of 0/1 mask values');
      requireSameLength(mask, `${mPath}.mask`, logpOld, 'logpOld');
      requireMaskRow(mask, `${mPath}.mask`);
      members.push({ setIndex: e, outputId, length: logpOld.length });
      maxTokens = Math.max(maxTokens, logpOld.length);
    });
    setIds.push(setId);
  });
  return { setIds, members, maxTokens };
}
