import { randomBytes } from 'crypto';
import * as path from 'path';
import { fileURLToPath, pathToFileURL } from 'url';
import { ErrorCode, errorMessage, SrpoError } from '@srpo/core';
import { CheckpointStore, loadCheckpoint, relabelCheckpoint } from '@srpo/policy';
import { AuditStore, type JsonValue, type UpdateDetail, type UpdateRecord } from '@srpo/store';
import type { VerifyCheck } from './audit.service';

/** `hyperparameters.objective.objective` of an adoption update. */
export const ADOPTION_OBJECTIVE = 'adoption';

/** What an adoption update records of the lineage it took its weights from. */
export interface Adoption {
  /** The replay run holding the lineage (`<runDir>/<run>/`), e.g. `erase-<erasure id>`. */
  run: string;
  runDir: string;
  /** The run's version adopted (its head) and its weights hash. */
  sourceVersion: number;
  sourceWeightsHash: string;
  /** The erasure the run was rebuilt for, if any. */
  erasureId: string | null;
}

/**
 * The adoption an update records, or undefined for a training update. An adoption update moves
 * the policy from its current version to the next with the weights (and optimizer state) of
 * another lineage's head; it trains on no group.
 */
export function adoptionOf(update: Pick<UpdateRecord, 'hyperparameters'>): Adoption | undefined {
  const a = update.hyperparameters.adoption;
  if (typeof a !== 'object' || a === null || Array.isArray(a)) return undefined;
  const { run, runDir, sourceVersion, sourceWeightsHash, erasureId } = a as Record<string, JsonValue>;
  if (typeof run !== 'string' || typeof runDir !== 'string' || typeof sourceVersion !== 'number' || typeof sourceWeightsHash !== 'string') {
    throw new SrpoError(ErrorCode.INTEGRITY_FAILED, 'an adoption update records run, runDir, sourceVersion and sourceWeightsHash');
  }
  return { run, runDir, sourceVersion, sourceWeightsHash, erasureId: typeof erasureId === 'string' ? erasureId : null };
}

/** The head of `policyId` in a replay run's store: its last version, made by an update. */
export async function runHead(runDir: string, run: string, policyId: string): Promise<{ version: number; weightsHash: string; checkpointUri: string }> {
  const store = await AuditStore.open({ kind: 'sqlite', path: path.join(runDir, run, 'store.sqlite') });
  try {
    const versions = await store.listVersions(policyId);
    const head = versions[versions.length - 1];
    if (!head || head.updateId === null) throw new SrpoError(ErrorCode.NOT_FOUND, `run ${run} has no update of ${policyId} to adopt`, { field: 'policy' });
    return { version: head.version, weightsHash: head.weightsHash, checkpointUri: head.checkpointUri };
  } finally {
    await store.close();
  }
}

/**
 * `srpo erase --adopt`: the head of a rebuilt lineage (replay run `run`) becomes the next version
 * of `policyId` in the live store, so that serving and training go on from weights that never saw
 * the erased data, with version numbers that keep growing (a served name `<policy>@v<N>` always
 * means one set of weights). The head's checkpoint is verified and copied under the live
 * checkpoint store as that version ({@link relabelCheckpoint}); then one update is recorded, from
 * the current version to the next, with no group and the adoption in its hyperparameters. The
 * store refuses it (CONFLICT) when the policy moved meanwhile, so a learner that committed first
 * wins and nothing is half-written: a checkpoint without its record is ignored by the learner.
 */
export async function adoptLineage(
  deps: { store: AuditStore; checkpointDir: string; backend: string; codeVersion: string },
  options: { policyId: string; run: string; runDir: string; erasureId: string | null; nowMs: number },
): Promise<UpdateDetail> {
  const { policyId } = options;
  const policy = await deps.store.getPolicy(policyId);
  if (!policy) throw new SrpoError(ErrorCode.NOT_FOUND, `policy ${policyId} is not registered in the store`, { field: 'policy' });
  const current = await deps.store.getVersion(policyId, policy.currentVersion);
  if (!current) throw new SrpoError(ErrorCode.INTEGRITY_FAILED, `policy ${policyId} has no record of its current version ${policy.currentVersion}`);
  const head = await runHead(options.runDir, options.run, policyId);
  const next = policy.currentVersion + 1;
  const dest = new CheckpointStore(deps.checkpointDir).dirFor(policyId, next);
  const manifest = await relabelCheckpoint(fileURLToPath(head.checkpointUri), dest, next);
  if (manifest.weightsHash !== head.weightsHash) {
    throw new SrpoError(
      ErrorCode.INTEGRITY_FAILED,
      `run ${options.run}'s checkpoint of v${head.version} holds ${manifest.weightsHash}, its record says ${head.weightsHash}`,
    );
  }
  const adoption: Adoption = {
    run: options.run,
    runDir: path.resolve(options.runDir),
    sourceVersion: head.version,
    sourceWeightsHash: head.weightsHash,
    erasureId: options.erasureId,
  };
  return deps.store.recordAdoption({
    updateId: `adopt-${options.nowMs.toString(36)}-${randomBytes(4).toString('hex')}`,
    policyId,
    versionBefore: policy.currentVersion,
    versionAfter: next,
    weightsHashBefore: current.weightsHash,
    weightsHashAfter: head.weightsHash,
    hyperparameters: { objective: { objective: ADOPTION_OBJECTIVE }, adoption: { ...adoption } },
    seed: 0,
    backend: deps.backend,
    codeVersion: deps.codeVersion,
    loss: 0,
    gradNorm: 0,
    diagnostics: {},
    wallTimeMs: 0,
    checkpointUri: pathToFileURL(path.resolve(dest)).href,
    committedAtMs: options.nowMs,
  });
}

/**
 * `audit verify` of an adoption update: nothing to recompute, so it checks that the weights are
 * what the record says they are and where they came from. The adopted run still holds the version
 * adopted with the recorded hash (that run's own updates are verified with `audit verify` over
 * its store, as `srpo erase --rebuild` did), and the live checkpoint of the new version verifies
 * and holds that hash.
 */
export async function verifyAdoption(detail: UpdateDetail, checkpointDir: string): Promise<VerifyCheck[]> {
  const checks: VerifyCheck[] = [];
  let adoption: Adoption | undefined;
  try {
    adoption = adoptionOf(detail);
  } catch (e) {
    return [{ name: 'record', ok: false, detail: errorMessage(e) }];
  }
  if (!adoption || detail.groups.length > 0) return [{ name: 'record', ok: false, detail: 'an adoption update records its source and trains on no group' }];
  checks.push({ name: 'record', ok: true, detail: `adoption of v${adoption.sourceVersion} of run ${adoption.run}` });
  try {
    const head = await runHead(adoption.runDir, adoption.run, detail.policyId);
    const ok = head.version === adoption.sourceVersion && head.weightsHash === adoption.sourceWeightsHash && head.weightsHash === detail.weightsHashAfter;
    checks.push({
      name: 'adoption',
      ok,
      detail: ok
        ? `run ${adoption.run} holds v${head.version} with ${head.weightsHash}, the weights recorded`
        : `run ${adoption.run}'s head is v${head.version} with ${head.weightsHash}; the record says v${adoption.sourceVersion} with ${adoption.sourceWeightsHash}, after ${detail.weightsHashAfter}`,
    });
    if (!ok) return checks;
    const loaded = await loadCheckpoint(checkpointDir);
    loaded.policy.dispose();
    const same = loaded.manifest.weightsHash === detail.weightsHashAfter && loaded.manifest.version === detail.versionAfter;
    checks.push({
      name: 'recompute',
      ok: same,
      detail: same
        ? `checkpoint ${checkpointDir} verifies and holds the adopted weights`
        : `checkpoint ${checkpointDir} holds v${loaded.manifest.version} with ${loaded.manifest.weightsHash}`,
    });
  } catch (e) {
    checks.push({ name: 'adoption', ok: false, detail: errorMessage(e) });
  }
  return checks;
}
