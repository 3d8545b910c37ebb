import { promises as fs } from 'fs';
import * as path from 'path';
import { ErrorCode, errorMessage, SrpoError, ValidationError } from '@srpo/core';
import { checkpointVersionDir } from '@srpo/policy';

/**
 * Which checkpoints the learner keeps on disk. Version 0 (the initial weights)
 * and the committed version are always kept; the rest are kept when they are
 * among the `keepLast` newest committed versions or are a multiple of
 * `keepEvery` (anchors that verify and replay rebuild pruned versions from).
 */
export interface CheckpointRetention {
  /** Newest committed versions kept (>= 1); 0 keeps every checkpoint (no pruning). */
  keepLast: number;
  /** Versions divisible by this are kept as anchors; 0: no anchors besides version 0. */
  keepEvery: number;
}

/** What {@link checkpointsToPrune} decided. */
export interface RetentionDecision {
  keep: number[];
  prune: number[];
}

/**
 * Splits the versions on disk into kept and pruned, both ascending. Pure: the
 * caller lists the directory and deletes. Versions above `committed` are
 * never pruned: they are the leftover of an update interrupted before its
 * commit, which the restart path ignores and the next update overwrites.
 *
 * @throws ValidationError naming the field when a count or version is not a non-negative integer.
 */
export function checkpointsToPrune(onDisk: readonly number[], committed: number, retention: CheckpointRetention): RetentionDecision {
  const nonNegative = (field: string, v: number) => {
    if (!Number.isSafeInteger(v) || v < 0) throw new ValidationError(field, `must be a non-negative integer, got ${v}`);
  };
  nonNegative('retention.keepLast', retention.keepLast);
  nonNegative('retention.keepEvery', retention.keepEvery);
  nonNegative('committed', committed);
  onDisk.forEach((v, i) => nonNegative(`onDisk[${i}]`, v));
  const versions = [...new Set(onDisk)].sort((a, b) => a - b);
  if (retention.keepLast === 0) return { keep: versions, prune: [] };
  const oldestRecent = committed - retention.keepLast + 1;
  const kept = (v: number): boolean => v === 0 || v >= oldestRecent || (retention.keepEvery > 0 && v % retention.keepEvery === 0);
  return { keep: versions.filter(kept), prune: versions.filter((v) => !kept(v)) };
}

/** Prefix of a checkpoint directory being deleted: renamed first, so no `v<N>` is ever half-deleted. */
const TRASH = /^\.v(\d+)\.pruned-/;

export interface PruneResult {
  /** Versions whose directory this call removed. */
  removed: number[];
  /** Versions already gone (another pruner, or an earlier call interrupted after its rename). */
  missing: number[];
  /** Half-deleted directories of an earlier, interrupted prune, cleared now. */
  sweptLeftovers: number;
}

/**
 * Deletes the checkpoint directories of `versions` under `policyDir`
 * (`<root>/<policy>`). Each `v<N>` is first renamed to a hidden name, which is
 * atomic, then removed recursively: a crash in between leaves a hidden leftover
 * (swept by the next call), never a `v<N>` missing some of its files. A
 * directory that is already gone is counted as missing, not an error, so the
 * call is idempotent.
 *
 * @throws SrpoError UNAVAILABLE naming the version when a rename or removal fails for another reason.
 */
export async function removeCheckpointDirs(policyDir: string, versions: readonly number[]): Promise<PruneResult> {
  const result: PruneResult = { removed: [], missing: [], sweptLeftovers: 0 };
  let entries: string[] = [];
  try {
    entries = await fs.readdir(policyDir);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw unavailable(`cannot list ${policyDir}`, e);
  }
  for (const name of entries.filter((n) => TRASH.test(n))) {
    await removeTree(path.join(policyDir, name), `leftover ${name}`);
    result.sweptLeftovers++;
  }
  for (const v of versions) {
    const dir = checkpointVersionDir(policyDir, v);
    const trash = path.join(policyDir, `.v${v}.pruned-${process.pid}-${Date.now()}`);
    try {
      await fs.rename(dir, trash);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') {
        result.missing.push(v);
        continue;
      }
      throw unavailable(`cannot prune checkpoint version ${v} (${dir})`, e);
    }
    await removeTree(trash, `checkpoint version ${v}`);
    result.removed.push(v);
  }
  return result;
}

async function removeTree(dir: string, what: string): Promise<void> {
  try {
    await fs.rm(dir, { recursive: true, force: true });
  } catch (e) {
    throw unavailable(`cannot remove ${what} (${dir})`, e);
  }
}

function unavailable(message: string, cause: unknown): SrpoError {
  return new SrpoError(ErrorCode.UNAVAILABLE, `${message}: ${errorMessage(cause)}`, { retriable: true, cause });
}
