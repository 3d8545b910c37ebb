import type { EntityManager } from 'typeorm';
import { ValidationError } from '@srpo/core';
import type { InitialVersion, PolicyRecord } from '../audit-types';
import { PolicyEntity } from '../entities';
import { checkId } from './field-checks';
import { insertRows } from './repository-helpers';

/**
 * The `policies` table: one row per trained policy with the version the
 * learner last committed. The only table whose rows change: `currentVersion`
 * moves forward with each update, through {@link PolicyRepository.advanceVersion}.
 */
export class PolicyRepository {
  constructor(private readonly em: EntityManager) {}

  /** The policy part of a registration (the initial weights are {@link PolicyVersionRepository.validate}'s). */
  static validate(policyId: string, roles: readonly string[]): void {
    checkId(policyId, 'policyId');
    if (!Array.isArray(roles) || roles.some((r) => typeof r !== 'string' || r.length === 0)) {
      throw new ValidationError('roles', 'must be an array of non-empty strings');
    }
  }

  /** A new policy at its initial version (validated input). */
  static fromInput(policyId: string, roles: readonly string[], initial: InitialVersion): PolicyRecord {
    return { policyId, roles: [...roles], currentVersion: initial.version, createdAtMs: initial.createdAtMs };
  }

  static toRow(p: PolicyRecord): PolicyEntity {
    return { policyId: p.policyId, roles: [...p.roles], currentVersion: p.currentVersion, createdAtMs: p.createdAtMs };
  }

  /** Entities are class instances; callers get plain objects. */
  static fromRow(e: PolicyEntity): PolicyRecord {
    return { policyId: e.policyId, roles: e.roles, currentVersion: e.currentVersion, createdAtMs: e.createdAtMs };
  }

  async get(policyId: string): Promise<PolicyRecord | undefined> {
    const row = await this.em.findOneBy(PolicyEntity, { policyId });
    return row ? PolicyRepository.fromRow(row) : undefined;
  }

  /** All policies, by id. */
  async list(): Promise<PolicyRecord[]> {
    const rows = await this.em.find(PolicyEntity, { order: { policyId: 'ASC' } });
    return rows.map((r) => PolicyRepository.fromRow(r));
  }

  async insert(p: PolicyRecord): Promise<void> {
    await insertRows(this.em, PolicyEntity, [PolicyRepository.toRow(p)]);
  }

  /**
   * Compare-and-set of the current version: moves `policyId` from `from` to
   * `to` only if it is still at `from`. False when another writer moved it
   * first (or the policy does not exist); nothing changes then.
   */
  async advanceVersion(policyId: string, from: number, to: number): Promise<boolean> {
    const result = await this.em
      .createQueryBuilder()
      .update(PolicyEntity)
      .set({ currentVersion: to })
      .where('policy_id = :policyId AND current_version = :before', { policyId, before: from })
      .execute();
    return result.affected === 1;
  }
}
