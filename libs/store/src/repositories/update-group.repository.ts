import { In, type EntityManager } from 'typeorm';
import { ValidationError } from '@srpo/core';
import type { GroupLedgerInput, GroupLedgerRecord, SetSources, UpdateRecordInput } from '../audit-types';
import { UpdateGroupEntity } from '../entities';
import { checkCoordinates, checkFinite, checkNonEmpty, isArray, MAX_GROUP_ID_LENGTH } from './field-checks';
import { idChunks, insertRows } from './repository-helpers';

/**
 * The `update_groups` table, the ledger: one row per advantage group an
 * update consumed. Its primary key (policyId, groupId) is what guarantees a
 * group is never applied twice. Append-only: this repository inserts and
 * reads, nothing else.
 */
export class UpdateGroupRepository {
  constructor(private readonly em: EntityManager) {}

  /** The groups of one update: at least one, each id once, every set with its advantage and source coordinates. */
  static validate(groups: readonly GroupLedgerInput[]): void {
    if (!isArray(groups) || groups.length === 0) throw new ValidationError('groups', 'an update consumes at least one group');
    const ids = new Set<string>();
    groups.forEach((g, i) => {
      const f = `groups[${i}]`;
      checkNonEmpty(g.groupId, `${f}.groupId`, MAX_GROUP_ID_LENGTH);
      if (ids.has(g.groupId)) throw new ValidationError(`${f}.groupId`, `${g.groupId} appears twice in one update`);
      ids.add(g.groupId);
      checkNonEmpty(g.groupKey, `${f}.groupKey`);
      checkCoordinates(g.source, `${f}.source`);
      const setIds: readonly string[] = isArray(g.setIds) ? g.setIds : [];
      const advantages: readonly number[] = isArray(g.advantages) ? g.advantages : [];
      const sources: readonly SetSources[] = isArray(g.sources) ? g.sources : [];
      if (setIds.length === 0) throw new ValidationError(`${f}.setIds`, 'must list at least one set');
      if (advantages.length !== setIds.length) throw new ValidationError(`${f}.advantages`, `must hold one advantage per set (${setIds.length})`);
      advantages.forEach((a, j) => checkFinite(a, `${f}.advantages[${j}]`));
      if (sources.length !== setIds.length) throw new ValidationError(`${f}.sources`, `must hold the sources of every set (${setIds.length})`);
      sources.forEach((s, j) => checkSetSources(s, setIds[j], `${f}.sources[${j}]`));
      if (typeof g.objectiveConfig !== 'string') throw new ValidationError(`${f}.objectiveConfig`, 'must be a string');
    });
  }

  /** The ledger rows of an update (validated input), in the groups' order, stamped with the commit time. */
  static fromInput(record: UpdateRecordInput, groups: readonly GroupLedgerInput[]): GroupLedgerRecord[] {
    return groups.map((g, position) => ({
      groupId: g.groupId,
      groupKey: g.groupKey,
      source: { topic: g.source.topic, partition: g.source.partition, offset: g.source.offset },
      setIds: [...g.setIds],
      advantages: [...g.advantages],
      sources: g.sources,
      objectiveConfig: g.objectiveConfig,
      policyId: record.policyId,
      updateId: record.updateId,
      position,
      createdAtMs: record.committedAtMs,
    }));
  }

  /** The group's own coordinates are three columns. */
  static toRow(g: GroupLedgerRecord): UpdateGroupEntity {
    return {
      policyId: g.policyId,
      groupId: g.groupId,
      updateId: g.updateId,
      position: g.position,
      groupKey: g.groupKey,
      groupTopic: g.source.topic,
      groupPartition: g.source.partition,
      groupOffset: g.source.offset,
      setIds: g.setIds,
      advantages: g.advantages,
      sources: g.sources,
      objectiveConfig: g.objectiveConfig,
      createdAtMs: g.createdAtMs,
    };
  }

  static fromRow(e: UpdateGroupEntity): GroupLedgerRecord {
    return {
      groupId: e.groupId,
      groupKey: e.groupKey,
      source: { topic: e.groupTopic, partition: e.groupPartition, offset: e.groupOffset },
      setIds: e.setIds,
      advantages: e.advantages,
      sources: e.sources,
      objectiveConfig: e.objectiveConfig,
      policyId: e.policyId,
      updateId: e.updateId,
      position: e.position,
      createdAtMs: e.createdAtMs,
    };
  }

  /** Which of `groupIds` are in the ledger of `policyId` (i.e. were applied by some update). */
  async appliedIn(policyId: string, groupIds: readonly string[]): Promise<Set<string>> {
    const out = new Set<string>();
    for (const chunk of idChunks(groupIds)) {
      const rows = await this.em.find(UpdateGroupEntity, { select: { groupId: true }, where: { policyId, groupId: In(chunk) } });
      for (const r of rows) out.add(r.groupId);
    }
    return out;
  }

  /** The ledger rows of an update, in order. */
  async listForUpdate(updateId: string): Promise<GroupLedgerRecord[]> {
    const rows = await this.em.find(UpdateGroupEntity, { where: { updateId }, order: { position: 'ASC' } });
    return rows.map((r) => UpdateGroupRepository.fromRow(r));
  }

  /**
   * Ledger rows whose group contains the set `setId`, oldest first. The set
   * ids live in a JSON text column, so the LIKE only narrows the scan; the
   * exact match is checked on the decoded list.
   */
  async findWithSet(setId: string): Promise<GroupLedgerRecord[]> {
    checkNonEmpty(setId, 'setId', MAX_GROUP_ID_LENGTH);
    const needle = JSON.stringify(setId).replace(/[\\%_]/g, (c) => '\\' + c);
    const rows = await this.em
      .createQueryBuilder(UpdateGroupEntity, 'g')
      .where("g.set_ids LIKE :needle ESCAPE '\\'", { needle: `%${needle}%` })
      .orderBy('g.created_at_ms', 'ASC')
      .addOrderBy('g.position', 'ASC')
      .getMany();
    return rows.map((r) => UpdateGroupRepository.fromRow(r)).filter((g) => g.setIds.includes(setId));
  }

  async insert(groups: readonly GroupLedgerRecord[]): Promise<void> {
    await insertRows(
      this.em,
      UpdateGroupEntity,
      groups.map((r) => UpdateGroupRepository.toRow(r)),
    );
  }
}

/** One set's sources: in `setIds` order, with the set, transition, optional outcome and every member's coordinates. */
function checkSetSources(s: SetSources, setId: string, sf: string): void {
  if (typeof s !== 'object' || s === null) throw new ValidationError(sf, `must be an object, got ${String(s)}`);
  if (s.setId !== setId) throw new ValidationError(`${sf}.setId`, `must be ${setId} (setIds order), got ${s.setId}`);
  checkCoordinates(s.set, `${sf}.set`);
  checkCoordinates(s.transition, `${sf}.transition`);
  if (s.outcome !== null) checkCoordinates(s.outcome, `${sf}.outcome`);
  const members: SetSources['members'] = isArray(s.members) ? s.members : [];
  if (members.length === 0) throw new ValidationError(`${sf}.members`, 'must list every member');
  members.forEach((m, k) => {
    if (typeof m !== 'object' || m === null) throw new ValidationError(`${sf}.members[${k}]`, `must be an object, got ${String(m)}`);
    checkNonEmpty(m.outputId, `${sf}.members[${k}].outputId`);
    checkCoordinates(m.source, `${sf}.members[${k}].source`);
  });
}
