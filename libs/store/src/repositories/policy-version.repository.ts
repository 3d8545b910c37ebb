import type { EntityManager } from 'typeorm';
import type { InitialVersion, PolicyVersionRecord, UpdateRecordInput } from '../audit-types';
import { PolicyVersionEntity } from '../entities';
import { checkEpochMs, checkHash, checkNonEmpty, checkNonNegativeInt32 } from './field-checks';
import { insertRows } from './repository-helpers';

/**
 * The `policy_versions` table: one row per set of weights of a policy, the
 * initial ones (no update) and one per update. (policyId, version) is the
 * primary key, so a version exists once. Rows are only ever inserted.
 */
export class PolicyVersionRepository {
  constructor(private readonly em: EntityManager) {}

  /**
   * The initial weights of a registration. A version produced by an update
   * is validated with its record ({@link UpdateRecordRepository.validate}).
   */
  static validate(initial: InitialVersion): void {
    checkNonNegativeInt32(initial.version, 'initial.version');
    checkHash(initial.weightsHash, 'initial.weightsHash');
    checkNonEmpty(initial.checkpointUri, 'initial.checkpointUri');
    checkEpochMs(initial.createdAtMs, 'initial.createdAtMs');
  }

  /** The version row of a policy's initial weights (no update produced them). */
  static fromInitial(policyId: string, initial: InitialVersion): PolicyVersionRecord {
    return {
      policyId,
      version: initial.version,
      weightsHash: initial.weightsHash,
      checkpointUri: initial.checkpointUri,
      updateId: null,
      createdAtMs: initial.createdAtMs,
    };
  }

  /** The version an update produced: its weights after, stamped with the commit time. */
  static fromUpdate(record: UpdateRecordInput): PolicyVersionRecord {
    return {
      policyId: record.policyId,
      version: record.versionAfter,
      weightsHash: record.weightsHashAfter,
      checkpointUri: record.checkpointUri,
      updateId: record.updateId,
      createdAtMs: record.committedAtMs,
    };
  }

  /** The row has exactly the record's columns. */
  static toRow(v: PolicyVersionRecord): PolicyVersionEntity {
    return PolicyVersionRepository.fromRow(v);
  }

  /** Entities are class instances; callers get plain objects. */
  static fromRow(e: PolicyVersionEntity): PolicyVersionRecord {
    return {
      policyId: e.policyId,
      version: e.version,
      weightsHash: e.weightsHash,
      checkpointUri: e.checkpointUri,
      updateId: e.updateId,
      createdAtMs: e.createdAtMs,
    };
  }

  async get(policyId: string, version: number): Promise<PolicyVersionRecord | undefined> {
    const row = await this.em.findOneBy(PolicyVersionEntity, { policyId, version });
    return row ? PolicyVersionRepository.fromRow(row) : undefined;
  }

  /** Versions of a policy, ascending (empty for an unknown policy). */
  async list(policyId: string): Promise<PolicyVersionRecord[]> {
    const rows = await this.em.find(PolicyVersionEntity, { where: { policyId }, order: { version: 'ASC' } });
    return rows.map((r) => PolicyVersionRepository.fromRow(r));
  }

  async insert(v: PolicyVersionRecord): Promise<void> {
    await insertRows(this.em, PolicyVersionEntity, [PolicyVersionRepository.toRow(v)]);
  }
}
