import type { EntityManager } from 'typeorm';
import { ValidationError } from '@srpo/core';
import type { GroupStatsInput, GroupStatsQuery, GroupStatsRecord, UpdateRecordInput } from '../audit-types';
import { GroupStatsEntity } from '../entities';
import { checkEpochMs, checkFinite, checkLimit, checkNonEmpty, checkNonNegativeInt32, checkTimeRange, isArray, isInt32 } from './field-checks';
import { insertRows } from './repository-helpers';

/** Several groups per update: the dashboard needs more stats rows than updates. */
export const DEFAULT_GROUP_STATS_LIMIT = 1000;
export const MAX_GROUP_STATS_LIMIT = 20_000;

/**
 * The `update_group_stats` table: statistics of each trained group, written
 * with its update, for the dashboard (not an input of verify or replay).
 * Append-only: this repository inserts and reads, nothing else.
 */
export class GroupStatsRepository {
  constructor(private readonly em: EntityManager) {}

  /** At most one entry per group, and only for groups of the update (`ledgerGroupIds`). */
  static validate(stats: readonly GroupStatsInput[], ledgerGroupIds: readonly string[]): void {
    if (!isArray(stats)) throw new ValidationError('stats', 'must be an array');
    const ledger = new Set(ledgerGroupIds);
    const seen = new Set<string>();
    stats.forEach((g, i) => {
      const f = `stats[${i}]`;
      if (!ledger.has(g.groupId)) throw new ValidationError(`${f}.groupId`, `${String(g.groupId)} is not one of the update's groups`);
      if (seen.has(g.groupId)) throw new ValidationError(`${f}.groupId`, `${g.groupId} appears twice`);
      seen.add(g.groupId);
      if (g.workflowKind !== null) checkNonEmpty(g.workflowKind, `${f}.workflowKind`, 32);
      checkNonNegativeInt32(g.setCount, `${f}.setCount`);
      checkNonNegativeInt32(g.memberCount, `${f}.memberCount`);
      checkNonNegativeInt32(g.successCount, `${f}.successCount`);
      checkNonNegativeInt32(g.successKnown, `${f}.successKnown`);
      if (g.successCount > g.successKnown) throw new ValidationError(`${f}.successCount`, `must not exceed successKnown (${g.successKnown})`);
      if (g.successKnown > g.setCount) throw new ValidationError(`${f}.successKnown`, `must not exceed setCount (${g.setCount})`);
      checkFinite(g.rewardMean, `${f}.rewardMean`);
      checkFinite(g.lagMean, `${f}.lagMean`);
      // A lag can be negative only for a member from the future, which the learner skips; the column is signed anyway.
      if (!isInt32(g.lagMax)) throw new ValidationError(`${f}.lagMax`, `must be a 32-bit integer, got ${String(g.lagMax)}`);
      // Clocks of producers and materializer may disagree: a negative latency is recorded as measured.
      if (!Number.isSafeInteger(g.fillLatencyMs)) throw new ValidationError(`${f}.fillLatencyMs`, `must be an integer, got ${String(g.fillLatencyMs)}`);
      checkEpochMs(g.groupEventTimeMs, `${f}.groupEventTimeMs`);
    });
  }

  /** The query's limit, after checking it and the time range. */
  static validateQuery(query: GroupStatsQuery): number {
    const limit = checkLimit(query.limit ?? DEFAULT_GROUP_STATS_LIMIT, MAX_GROUP_STATS_LIMIT);
    checkTimeRange(query);
    return limit;
  }

  /** The rows of an update's statistics (validated input), stamped with the update and its commit time. */
  static fromInput(record: UpdateRecordInput, stats: readonly GroupStatsInput[]): GroupStatsRecord[] {
    return stats.map((g) => ({
      ...copyInput(g),
      policyId: record.policyId,
      updateId: record.updateId,
      versionAfter: record.versionAfter,
      createdAtMs: record.committedAtMs,
    }));
  }

  /** The row has exactly the record's columns. */
  static toRow(s: GroupStatsRecord): GroupStatsEntity {
    return GroupStatsRepository.fromRow(s);
  }

  /** Entities are class instances; callers get plain objects. */
  static fromRow(e: GroupStatsEntity): GroupStatsRecord {
    return { ...copyInput(e), policyId: e.policyId, updateId: e.updateId, versionAfter: e.versionAfter, createdAtMs: e.createdAtMs };
  }

  /** Statistics with `from <= createdAtMs < to` (the update's commit time), oldest first. */
  async list(query: GroupStatsQuery = {}): Promise<GroupStatsRecord[]> {
    const limit = GroupStatsRepository.validateQuery(query);
    const qb = this.em.createQueryBuilder(GroupStatsEntity, 's');
    if (query.policyId !== undefined) qb.andWhere('s.policy_id = :policyId', { policyId: query.policyId });
    if (query.from !== undefined) qb.andWhere('s.created_at_ms >= :from', { from: query.from });
    if (query.to !== undefined) qb.andWhere('s.created_at_ms < :to', { to: query.to });
    qb.orderBy('s.created_at_ms', 'ASC').addOrderBy('s.policy_id', 'ASC').addOrderBy('s.version_after', 'ASC').addOrderBy('s.group_id', 'ASC').take(limit);
    const rows = await qb.getMany();
    return rows.map((r) => GroupStatsRepository.fromRow(r));
  }

  async insert(stats: readonly GroupStatsRecord[]): Promise<void> {
    await insertRows(
      this.em,
      GroupStatsEntity,
      stats.map((r) => GroupStatsRepository.toRow(r)),
    );
  }
}

/** The input's fields only (an entity or a record carries more). */
function copyInput(g: GroupStatsInput): GroupStatsInput {
  return {
    groupId: g.groupId,
    workflowKind: g.workflowKind,
    setCount: g.setCount,
    memberCount: g.memberCount,
    rewardMean: g.rewardMean,
    successCount: g.successCount,
    successKnown: g.successKnown,
    lagMax: g.lagMax,
    lagMean: g.lagMean,
    fillLatencyMs: g.fillLatencyMs,
    groupEventTimeMs: g.groupEventTimeMs,
  };
}
