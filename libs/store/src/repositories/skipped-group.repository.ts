import { In, type EntityManager } from 'typeorm';
import { ValidationError } from '@srpo/core';
import type { SkippedGroupInput, SkippedGroupRecord } from '../audit-types';
import { SkippedGroupEntity } from '../entities';
import {
  checkCoordinates,
  checkEpochMs,
  checkId,
  checkLimit,
  checkNonEmpty,
  checkNonNegativeInt32,
  DEFAULT_LIST_LIMIT,
  isInt32,
  MAX_GROUP_ID_LENGTH,
  MAX_LIST_LIMIT,
} from './field-checks';
import { idChunks, insertRows } from './repository-helpers';

/**
 * The `skipped_groups` table: groups the learner consumed without training
 * on them, so nothing is ever dropped silently. (policyId, groupId) is the
 * primary key: a redelivered skipped group is recognised. Append-only: this
 * repository inserts and reads, nothing else.
 */
export class SkippedGroupRepository {
  constructor(private readonly em: EntityManager) {}

  /** One entry; `field` names it in errors (`entries[3]`). */
  static validate(e: SkippedGroupInput, field: string): void {
    checkId(e.policyId, `${field}.policyId`);
    checkNonEmpty(e.groupId, `${field}.groupId`, MAX_GROUP_ID_LENGTH);
    checkNonEmpty(e.reason, `${field}.reason`, 64);
    if (e.detail !== null && typeof e.detail !== 'string') throw new ValidationError(`${field}.detail`, 'must be a string or null');
    if (e.lag !== null && !isInt32(e.lag)) throw new ValidationError(`${field}.lag`, `must be an integer or null, got ${String(e.lag)}`);
    checkNonNegativeInt32(e.policyVersion, `${field}.policyVersion`);
    checkCoordinates(e.source, `${field}.source`);
    checkEpochMs(e.createdAtMs, `${field}.createdAtMs`);
  }

  /** A copy of validated input: what is stored is exactly what was given. */
  static fromInput(e: SkippedGroupInput): SkippedGroupRecord {
    return {
      policyId: e.policyId,
      groupId: e.groupId,
      reason: e.reason,
      detail: e.detail,
      lag: e.lag,
      policyVersion: e.policyVersion,
      source: { topic: e.source.topic, partition: e.source.partition, offset: e.source.offset },
      createdAtMs: e.createdAtMs,
    };
  }

  /** The group's coordinates are three columns. */
  static toRow(r: SkippedGroupRecord): SkippedGroupEntity {
    return {
      policyId: r.policyId,
      groupId: r.groupId,
      reason: r.reason,
      detail: r.detail,
      lag: r.lag,
      policyVersion: r.policyVersion,
      groupTopic: r.source.topic,
      groupPartition: r.source.partition,
      groupOffset: r.source.offset,
      createdAtMs: r.createdAtMs,
    };
  }

  static fromRow(e: SkippedGroupEntity): SkippedGroupRecord {
    return {
      policyId: e.policyId,
      groupId: e.groupId,
      reason: e.reason,
      detail: e.detail,
      lag: e.lag,
      policyVersion: e.policyVersion,
      source: { topic: e.groupTopic, partition: e.groupPartition, offset: e.groupOffset },
      createdAtMs: e.createdAtMs,
    };
  }

  /** Which of `groupIds` were recorded as skipped for `policyId`. */
  async skippedIn(policyId: string, groupIds: readonly string[]): Promise<Set<string>> {
    const out = new Set<string>();
    for (const chunk of idChunks(groupIds)) {
      const rows = await this.em.find(SkippedGroupEntity, { select: { groupId: true }, where: { policyId, groupId: In(chunk) } });
      for (const r of rows) out.add(r.groupId);
    }
    return out;
  }

  /** Skipped groups of a policy, oldest first. */
  async list(policyId: string, limit = DEFAULT_LIST_LIMIT): Promise<SkippedGroupRecord[]> {
    const rows = await this.em.find(SkippedGroupEntity, {
      where: { policyId },
      order: { createdAtMs: 'ASC', groupId: 'ASC' },
      take: checkLimit(limit, MAX_LIST_LIMIT),
    });
    return rows.map((r) => SkippedGroupRepository.fromRow(r));
  }

  async insert(r: SkippedGroupRecord): Promise<void> {
    await insertRows(this.em, SkippedGroupEntity, [SkippedGroupRepository.toRow(r)]);
  }
}
