import { fileURLToPath } from 'url';
import { ErrorCode, SrpoError } from '@srpo/core';
import { CheckpointStore, loadCheckpoint, type Policy } from '@srpo/policy';
import type { AuditStore } from '@srpo/store';

/** The starting point of an offline run: a policy's current version, as its audit store records it. */
export interface RegisteredPolicy {
  policy: Policy;
  weightsHash: string;
  checkpointDir: string;
}

/**
 * Loads a policy's current version from the audit store's checkpoint (or
 * `<checkpointDir>/<policy>/v<N>` when given) and checks its weights hash
 * against the record.
 */
export async function loadRegisteredPolicy(store: AuditStore, policyId: string, checkpointDir?: string): Promise<RegisteredPolicy> {
  const record = await store.getPolicy(policyId);
  if (!record) throw new SrpoError(ErrorCode.NOT_FOUND, `policy ${policyId} is not registered in the audit store`, { field: 'policy' });
  const version = await store.getVersion(policyId, record.currentVersion);
  if (!version) throw new SrpoError(ErrorCode.INTEGRITY_FAILED, `policy ${policyId} is at version ${record.currentVersion} but that version has no record`);
  const dir = checkpointDir
    ? new CheckpointStore(checkpointDir).dirFor(policyId, version.version)
    : version.checkpointUri.startsWith('file:')
      ? fileURLToPath(version.checkpointUri)
      : version.checkpointUri;
  const loaded = await loadCheckpoint(dir);
  if (loaded.manifest.weightsHash !== version.weightsHash) {
    loaded.policy.dispose();
    throw new SrpoError(ErrorCode.INTEGRITY_FAILED, `checkpoint ${dir} has weights ${loaded.manifest.weightsHash}, the store records ${version.weightsHash}`);
  }
  if (loaded.policy.version !== version.version) loaded.policy.advanceVersionTo(version.version);
  return { policy: loaded.policy, weightsHash: version.weightsHash, checkpointDir: dir };
}
