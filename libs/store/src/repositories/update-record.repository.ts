import type { EntityManager } from 'typeorm';
import { ValidationError } from '@srpo/core';
import type { UpdateQuery, UpdateRecord, UpdateRecordInput } from '../audit-types';
import { UpdateRecordEntity } from '../entities';
import {
  checkEpochMs,
  checkFinite,
  checkHash,
  checkId,
  checkLimit,
  checkNonEmpty,
  checkNonNegativeInt32,
  checkTimeRange,
  DEFAULT_LIST_LIMIT,
  MAX_LIST_LIMIT,
} from './field-checks';
import { insertRows } from './repository-helpers';

/**
 * The `update_records` table: the audit record of each applied update.
 * Append-only: this repository inserts and reads, nothing else (and the
 * database refuses UPDATE and DELETE, see the append-only migration).
 */
export class UpdateRecordRepository {
  constructor(private readonly em: EntityManager) {}

  static validate(r: UpdateRecordInput): void {
    checkId(r.updateId, 'record.updateId');
    checkId(r.policyId, 'record.policyId');
    checkNonNegativeInt32(r.versionBefore, 'record.versionBefore');
    checkNonNegativeInt32(r.versionAfter, 'record.versionAfter');
    if (r.versionAfter !== r.versionBefore + 1) {
      throw new ValidationError('record.versionAfter', `must be versionBefore + 1 (${r.versionBefore + 1}), got ${r.versionAfter}`);
    }
    checkHash(r.weightsHashBefore, 'record.weightsHashBefore');
    checkHash(r.weightsHashAfter, 'record.weightsHashAfter');
    if (typeof r.hyperparameters !== 'object' || r.hyperparameters === null || Array.isArray(r.hyperparameters)) {
      throw new ValidationError('record.hyperparameters', 'must be an object');
    }
    if (!Number.isSafeInteger(r.seed)) throw new ValidationError('record.seed', `must be a safe integer, got ${String(r.seed)}`);
    checkNonEmpty(r.backend, 'record.backend', 64);
    checkNonEmpty(r.codeVersion, 'record.codeVersion', 200);
    checkFinite(r.loss, 'record.loss');
    checkFinite(r.gradNorm, 'record.gradNorm');
    if (typeof r.diagnostics !== 'object' || r.diagnostics === null) throw new ValidationError('record.diagnostics', 'must be an object');
    for (const [k, v] of Object.entries(r.diagnostics)) {
      if (typeof v !== 'number') throw new ValidationError(`record.diagnostics.${k}`, `must be a number, got ${typeof v}`);
    }
    checkNonNegativeInt32(r.wallTimeMs, 'record.wallTimeMs');
    checkNonEmpty(r.checkpointUri, 'record.checkpointUri');
    checkEpochMs(r.committedAtMs, 'record.committedAtMs');
  }

  /** The query's limit, after checking it and the time range. */
  static validateQuery(query: UpdateQuery): number {
    const limit = checkLimit(query.limit ?? DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT);
    checkTimeRange(query);
    return limit;
  }

  /** The record as stored (validated input): a copy, with `createdAt` derived from the commit time. */
  static fromInput(r: UpdateRecordInput): UpdateRecord {
    return { ...copyInput(r), createdAt: new Date(r.committedAtMs).toISOString() };
  }

  /** The row has exactly the record's columns. */
  static toRow(r: UpdateRecord): UpdateRecordEntity {
    return UpdateRecordRepository.fromRow(r);
  }

  /** Entities are class instances; callers get plain objects. */
  static fromRow(e: UpdateRecordEntity): UpdateRecord {
    return { ...copyInput(e), createdAt: e.createdAt };
  }

  async get(updateId: string): Promise<UpdateRecord | undefined> {
    const row = await this.em.findOneBy(UpdateRecordEntity, { updateId });
    return row ? UpdateRecordRepository.fromRow(row) : undefined;
  }

  /** The update that produced the policy's highest version, or undefined before the first update. */
  async latest(policyId: string): Promise<UpdateRecord | undefined> {
    const row = await this.em.findOne(UpdateRecordEntity, { where: { policyId }, order: { versionAfter: 'DESC' } });
    return row ? UpdateRecordRepository.fromRow(row) : undefined;
  }

  /** Updates with `from <= committedAtMs < to`, oldest first (then by policy and version). */
  async list(query: UpdateQuery = {}): Promise<UpdateRecord[]> {
    const limit = UpdateRecordRepository.validateQuery(query);
    const qb = this.em.createQueryBuilder(UpdateRecordEntity, 'u');
    if (query.policyId !== undefined) qb.andWhere('u.policy_id = :policyId', { policyId: query.policyId });
    if (query.from !== undefined) qb.andWhere('u.committed_at_ms >= :from', { from: query.from });
    if (query.to !== undefined) qb.andWhere('u.committed_at_ms < :to', { to: query.to });
    qb.orderBy('u.committed_at_ms', 'ASC').addOrderBy('u.policy_id', 'ASC').addOrderBy('u.version_after', 'ASC').take(limit);
    const rows = await qb.getMany();
    return rows.map((r) => UpdateRecordRepository.fromRow(r));
  }

  async insert(r: UpdateRecord): Promise<void> {
    await insertRows(this.em, UpdateRecordEntity, [UpdateRecordRepository.toRow(r)]);
  }
}

/** The input's fields only (an entity or a record may carry more). */
function copyInput(r: UpdateRecordInput): UpdateRecordInput {
  return {
    updateId: r.updateId,
    policyId: r.policyId,
    versionBefore: r.versionBefore,
    versionAfter: r.versionAfter,
    weightsHashBefore: r.weightsHashBefore,
    weightsHashAfter: r.weightsHashAfter,
    hyperparameters: r.hyperparameters,
    seed: r.seed,
    backend: r.backend,
    codeVersion: r.codeVersion,
    loss: r.loss,
    gradNorm: r.gradNorm,
    diagnostics: r.diagnostics,
    wallTimeMs: r.wallTimeMs,
    checkpointUri: r.checkpointUri,
    committedAtMs: r.committedAtMs,
  };
}
