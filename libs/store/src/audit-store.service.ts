import { DataSource, EntityManager, EntityTarget, In, ObjectLiteral, QueryFailedError } from 'typeorm';
import type { QueryDeepPartialEntity } from 'typeorm/query-builder/QueryPartialEntity';
import { ErrorCode, errorMessage, Logger, SrpoError, ValidationError } from '@srpo/core';
import type {
  GroupLedgerInput,
  GroupLedgerRecord,
  GroupStatsInput,
  GroupStatsQuery,
  GroupStatsRecord,
  InitialVersion,
  PolicyRecord,
  PolicyVersionRecord,
  SetSources,
  SkippedGroupInput,
  SkippedGroupRecord,
  UpdateDetail,
  UpdateQuery,
  UpdateRecord,
  UpdateRecordInput,
} from './audit-types';
import { createDataSource, type DataSourceOptions } from './data-source';
import { GroupStatsEntity, PolicyEntity, PolicyVersionEntity, SkippedGroupEntity, UpdateGroupEntity, UpdateRecordEntity } from './entities';
import { describeStore, type StoreConfig } from './store-config';

const MAX_ID_LENGTH = 200;
const MAX_GROUP_ID_LENGTH = 512;
const HASH = /^[0-9a-f]{64}$/;
/** Ids per IN (...) list; well under SQLite's and PostgreSQL's bound-parameter limits. */
const IN_CHUNK = 500;
export const DEFAULT_LIST_LIMIT = 100;
export const MAX_LIST_LIMIT = 1000;
/** Several groups per update: the dashboard needs more stats rows than updates. */
export const DEFAULT_GROUP_STATS_LIMIT = 1000;
export const MAX_GROUP_STATS_LIMIT = 20_000;

/**
 * The learner's audit record: policies, their versions, one append-only record
 * per update and the ledger of consumed groups.
 *
 * Audit rows are append-only by construction: there is no method that changes
 * or deletes an update record, a ledger row or a skipped-group row (and the
 * database refuses it too, see the append-only migration). Every method throws
 * {@link SrpoError}: CONFLICT for a group or version that is already recorded,
 * NOT_FOUND for unknown ids, VALIDATION_FAILED for malformed input and
 * UNAVAILABLE (retriable) when the database cannot be reached.
 */
export class AuditStore {
  private readonly log = new Logger('audit-store');
  /**
   * TypeORM's better-sqlite3 driver runs everything on ONE connection: a second
   * transaction started while one is open becomes a savepoint inside it, and a
   * read in between sees uncommitted rows. So on SQLite every operation waits
   * for the previous one. PostgreSQL has a pool and real isolation.
   */
  private readonly exclusive: boolean;
  private tail: Promise<unknown> = Promise.resolve();

  constructor(readonly dataSource: DataSource) {
    const type = dataSource.options.type;
    this.exclusive = type === 'better-sqlite3' || type === 'sqlite';
  }

  /** Creates the data source, connects and runs pending migrations. */
  static async open(config: StoreConfig, options: DataSourceOptions = {}): Promise<AuditStore> {
    const ds = createDataSource(config, options);
    try {
      await ds.initialize();
    } catch (e) {
      throw new SrpoError(ErrorCode.UNAVAILABLE, `audit store ${describeStore(config)}: cannot open: ${errorMessage(e)}`, { retriable: true, cause: e });
    }
    const store = new AuditStore(ds);
    store.log.info('audit store open', { store: describeStore(config) });
    return store;
  }

  async close(): Promise<void> {
    if (this.dataSource.isInitialized) await this.dataSource.destroy();
  }

  /** Round trip to the database (health checks). */
  async ping(): Promise<void> {
    await this.run('ping', () => this.dataSource.query('SELECT 1'));
  }

  /**
   * Registers a policy with its initial weights (version row without an update)
   * unless it exists; returns the stored policy either way. An existing policy
   * is returned unchanged: its history is what it is.
   */
  async ensurePolicy(policyId: string, roles: readonly string[], initial: InitialVersion): Promise<PolicyRecord> {
    checkId(policyId, 'policyId');
    if (!Array.isArray(roles) || roles.some((r) => typeof r !== 'string' || r.length === 0)) {
      throw new ValidationError('roles', 'must be an array of non-empty strings');
    }
    checkVersion(initial.version, 'initial.version');
    checkHash(initial.weightsHash, 'initial.weightsHash');
    checkNonEmpty(initial.checkpointUri, 'initial.checkpointUri');
    checkEpochMs(initial.createdAtMs, 'initial.createdAtMs');
    const existing = await this.getPolicy(policyId);
    if (existing) return existing;
    try {
      await this.transaction(async (em) => {
        await insertRows(em, PolicyEntity, { policyId, roles: [...roles], currentVersion: initial.version, createdAtMs: initial.createdAtMs });
        await insertRows(em, PolicyVersionEntity, {
          policyId,
          version: initial.version,
          weightsHash: initial.weightsHash,
          checkpointUri: initial.checkpointUri,
          updateId: null,
          createdAtMs: initial.createdAtMs,
        });
      });
    } catch (e) {
      // Another process registered it first: theirs stands.
      if (!isUniqueViolation(e)) throw dbError('ensurePolicy', e);
    }
    const stored = await this.getPolicy(policyId);
    if (!stored) throw new SrpoError(ErrorCode.INTEGRITY_FAILED, `policy ${policyId} vanished right after it was registered`);
    this.log.info('policy registered', { policyId, version: stored.currentVersion });
    return stored;
  }

  /**
   * Writes one update in a single transaction: the update record, a ledger row
   * per group, the groups' statistics when given (at most one per group), the
   * new policy version, and the policy's current version (only if it still
   * equals `versionBefore`). All or nothing.
   *
   * @throws SrpoError CONFLICT when a group is already in the ledger or was
   *   skipped, when the policy is no longer at `versionBefore`, or when the
   *   update id or version exists; nothing is written then.
   */
  async recordUpdate(record: UpdateRecordInput, groups: readonly GroupLedgerInput[], stats: readonly GroupStatsInput[] = []): Promise<UpdateDetail> {
    checkUpdateRecord(record);
    checkGroups(groups);
    checkGroupStats(stats, groups);
    const createdAt = new Date(record.committedAtMs).toISOString();
    const ledger: GroupLedgerRecord[] = groups.map((g, position) => ({
      ...copyGroup(g),
      policyId: record.policyId,
      updateId: record.updateId,
      position,
      createdAtMs: record.committedAtMs,
    }));
    const groupIds = groups.map((g) => g.groupId);
    try {
      await this.transaction(async (em) => {
        const policy = await em.findOneBy(PolicyEntity, { policyId: record.policyId });
        if (!policy) throw new SrpoError(ErrorCode.NOT_FOUND, `policy ${record.policyId} is not registered`, { field: 'policyId' });
        if (policy.currentVersion !== record.versionBefore) {
          throw new SrpoError(
            ErrorCode.CONFLICT,
            `policy ${record.policyId} is at version ${policy.currentVersion}, the update starts from ${record.versionBefore}`,
            { field: 'versionBefore', details: { currentVersion: policy.currentVersion } },
          );
        }
        const applied = await appliedIn(em, record.policyId, groupIds);
        if (applied.size > 0) {
          throw new SrpoError(ErrorCode.CONFLICT, `groups already applied for policy ${record.policyId}: ${[...applied].join(', ')}`, {
            field: 'groups',
            details: { groupIds: [...applied] },
          });
        }
        const skipped = await skippedIn(em, record.policyId, groupIds);
        if (skipped.size > 0) {
          throw new SrpoError(ErrorCode.CONFLICT, `groups already skipped for policy ${record.policyId}: ${[...skipped].join(', ')}`, {
            field: 'groups',
            details: { groupIds: [...skipped] },
          });
        }
        await insertRows(em, UpdateRecordEntity, { ...copyRecord(record), createdAt });
        await insertRows(
          em,
          UpdateGroupEntity,
          ledger.map((g) => ({
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
          })),
        );
        if (stats.length > 0) {
          await insertRows(
            em,
            GroupStatsEntity,
            stats.map((g) => ({
              ...copyStats(g),
              policyId: record.policyId,
              updateId: record.updateId,
              versionAfter: record.versionAfter,
              createdAtMs: record.committedAtMs,
            })),
          );
        }
        await insertRows(em, PolicyVersionEntity, {
          policyId: record.policyId,
          version: record.versionAfter,
          weightsHash: record.weightsHashAfter,
          checkpointUri: record.checkpointUri,
          updateId: record.updateId,
          createdAtMs: record.committedAtMs,
        });
        const bumped = await em
          .createQueryBuilder()
          .update(PolicyEntity)
          .set({ currentVersion: record.versionAfter })
          .where('policy_id = :policyId AND current_version = :before', { policyId: record.policyId, before: record.versionBefore })
          .execute();
        if (bumped.affected !== 1) {
          throw new SrpoError(ErrorCode.CONFLICT, `policy ${record.policyId} moved away from version ${record.versionBefore} during the update`, {
            field: 'versionBefore',
          });
        }
      });
    } catch (e) {
      if (e instanceof SrpoError) throw e;
      if (isUniqueViolation(e)) {
        throw new SrpoError(
          ErrorCode.CONFLICT,
          `update ${record.updateId} conflicts with what is recorded (a group, the update id or version ${record.versionAfter} exists): ${errorMessage(e)}`,
          { cause: e },
        );
      }
      throw dbError('recordUpdate', e);
    }
    this.log.info('update recorded', {
      updateId: record.updateId,
      policyId: record.policyId,
      versionAfter: record.versionAfter,
      groups: groups.length,
    });
    return { ...copyRecord(record), createdAt, groups: ledger };
  }

  /** Which of `groupIds` are in the ledger of `policyId` (i.e. were applied by some update). */
  async isGroupApplied(policyId: string, groupIds: readonly string[]): Promise<Set<string>> {
    return this.run('isGroupApplied', () => appliedIn(this.dataSource.manager, policyId, groupIds));
  }

  /** Which of `groupIds` were recorded as skipped for `policyId`. */
  async skippedGroupIds(policyId: string, groupIds: readonly string[]): Promise<Set<string>> {
    return this.run('skippedGroupIds', () => skippedIn(this.dataSource.manager, policyId, groupIds));
  }

  /**
   * Records groups that were consumed without training on them, in one
   * transaction. Idempotent: entries already recorded (a redelivery) are left
   * as they are and not returned.
   *
   * @returns the entries this call recorded
   */
  async recordSkipped(entries: readonly SkippedGroupInput[]): Promise<SkippedGroupRecord[]> {
    entries.forEach((e, i) => checkSkipped(e, `entries[${i}]`));
    const seen = new Set<string>();
    const unique = entries.filter((e) => {
      const key = `${e.policyId}\u0000${e.groupId}`;
      if (seen.has(key)) return false;
      seen.add(key);
      return true;
    });
    if (unique.length === 0) return [];
    const recorded: SkippedGroupRecord[] = [];
    try {
      await this.transaction(async (em) => {
        const byPolicy = new Map<string, SkippedGroupInput[]>();
        for (const e of unique) byPolicy.set(e.policyId, [...(byPolicy.get(e.policyId) ?? []), e]);
        for (const [policyId, list] of byPolicy) {
          const present = await skippedIn(em, policyId, list.map((e) => e.groupId));
          const applied = await appliedIn(em, policyId, list.map((e) => e.groupId));
          for (const e of list) {
            if (present.has(e.groupId)) continue;
            if (applied.has(e.groupId)) {
              throw new SrpoError(ErrorCode.CONFLICT, `group ${e.groupId} of policy ${policyId} was applied; it cannot also be skipped`, {
                field: 'groupId',
              });
            }
            await insertRows(em, SkippedGroupEntity, {
              policyId: e.policyId,
              groupId: e.groupId,
              reason: e.reason,
              detail: e.detail,
              lag: e.lag,
              policyVersion: e.policyVersion,
              groupTopic: e.source.topic,
              groupPartition: e.source.partition,
              groupOffset: e.source.offset,
              createdAtMs: e.createdAtMs,
            });
            recorded.push(copySkipped(e));
          }
        }
      });
    } catch (e) {
      if (e instanceof SrpoError) throw e;
      if (isUniqueViolation(e)) throw new SrpoError(ErrorCode.CONFLICT, `skipped groups were recorded concurrently: ${errorMessage(e)}`, { retriable: true, cause: e });
      throw dbError('recordSkipped', e);
    }
    for (const r of recorded) this.log.info('group skipped', { policyId: r.policyId, groupId: r.groupId, reason: r.reason, lag: r.lag });
    return recorded;
  }

  /** Skipped groups of a policy, oldest first. */
  async listSkipped(policyId: string, limit = DEFAULT_LIST_LIMIT): Promise<SkippedGroupRecord[]> {
    const rows = await this.run('listSkipped', () =>
      this.dataSource.getRepository(SkippedGroupEntity).find({
        where: { policyId },
        order: { createdAtMs: 'ASC', groupId: 'ASC' },
        take: checkLimit(limit),
      }),
    );
    return rows.map(skippedFromEntity);
  }

  /** The update that produced the policy's highest version, or undefined before the first update. */
  async latestUpdate(policyId: string): Promise<UpdateRecord | undefined> {
    const row = await this.run('latestUpdate', () =>
      this.dataSource.getRepository(UpdateRecordEntity).findOne({ where: { policyId }, order: { versionAfter: 'DESC' } }),
    );
    return row ? recordFromEntity(row) : undefined;
  }

  /** An update with its ledger rows in order; NOT_FOUND if unknown. */
  async getUpdate(updateId: string): Promise<UpdateDetail> {
    const [row, groups] = await this.run('getUpdate', () =>
      Promise.all([
        this.dataSource.getRepository(UpdateRecordEntity).findOneBy({ updateId }),
        this.dataSource.getRepository(UpdateGroupEntity).find({ where: { updateId }, order: { position: 'ASC' } }),
      ]),
    );
    if (!row) throw new SrpoError(ErrorCode.NOT_FOUND, `no update ${updateId}`, { field: 'updateId' });
    return { ...recordFromEntity(row), groups: groups.map(groupFromEntity) };
  }

  /** Updates with `from <= committedAtMs < to`, oldest first (then by version). */
  async listUpdates(query: UpdateQuery = {}): Promise<UpdateRecord[]> {
    const limit = checkLimit(query.limit ?? DEFAULT_LIST_LIMIT);
    if (query.from !== undefined) checkEpochMs(query.from, 'from');
    if (query.to !== undefined) checkEpochMs(query.to, 'to');
    const qb = this.dataSource.getRepository(UpdateRecordEntity).createQueryBuilder('u');
    if (query.policyId !== undefined) qb.andWhere('u.policy_id = :policyId', { policyId: query.policyId });
    if (query.from !== undefined) qb.andWhere('u.committed_at_ms >= :from', { from: query.from });
    if (query.to !== undefined) qb.andWhere('u.committed_at_ms < :to', { to: query.to });
    qb.orderBy('u.committed_at_ms', 'ASC').addOrderBy('u.policy_id', 'ASC').addOrderBy('u.version_after', 'ASC').take(limit);
    const rows = await this.run('listUpdates', () => qb.getMany());
    return rows.map(recordFromEntity);
  }

  /** Statistics of trained groups with `from <= createdAtMs < to` (the update's commit time), oldest first. */
  async listGroupStats(query: GroupStatsQuery = {}): Promise<GroupStatsRecord[]> {
    const limit = query.limit ?? DEFAULT_GROUP_STATS_LIMIT;
    if (!Number.isInteger(limit) || limit < 1 || limit > MAX_GROUP_STATS_LIMIT) {
      throw new ValidationError('limit', `must be an integer in [1, ${MAX_GROUP_STATS_LIMIT}], got ${limit}`);
    }
    if (query.from !== undefined) checkEpochMs(query.from, 'from');
    if (query.to !== undefined) checkEpochMs(query.to, 'to');
    const qb = this.dataSource.getRepository(GroupStatsEntity).createQueryBuilder('s');
    if (query.policyId !== undefined) qb.andWhere('s.policy_id = :policyId', { policyId: query.policyId });
    if (query.from !== undefined) qb.andWhere('s.created_at_ms >= :from', { from: query.from });
    if (query.to !== undefined) qb.andWhere('s.created_at_ms < :to', { to: query.to });
    qb.orderBy('s.created_at_ms', 'ASC')
      .addOrderBy('s.policy_id', 'ASC')
      .addOrderBy('s.version_after', 'ASC')
      .addOrderBy('s.group_id', 'ASC')
      .take(limit);
    const rows = await this.run('listGroupStats', () => qb.getMany());
    return rows.map(statsFromEntity);
  }

  /**
   * Ledger rows whose group contains the set `setId` (normally one; a set id
   * reused across policies gives one per policy), oldest first. The set ids
   * live in a JSON text column, so the LIKE only narrows the scan; the exact
   * match is checked on the decoded list.
   */
  async findGroupsWithSet(setId: string): Promise<GroupLedgerRecord[]> {
    checkNonEmpty(setId, 'setId', MAX_GROUP_ID_LENGTH);
    const needle = JSON.stringify(setId).replace(/[\\%_]/g, (c) => '\\' + c);
    const rows = await this.run('findGroupsWithSet', () =>
      this.dataSource
        .getRepository(UpdateGroupEntity)
        .createQueryBuilder('g')
        .where("g.set_ids LIKE :needle ESCAPE '\\'", { needle: `%${needle}%` })
        .orderBy('g.created_at_ms', 'ASC')
        .addOrderBy('g.position', 'ASC')
        .getMany(),
    );
    return rows.map(groupFromEntity).filter((g) => g.setIds.includes(setId));
  }

  async getPolicy(policyId: string): Promise<PolicyRecord | undefined> {
    const row = await this.run('getPolicy', () => this.dataSource.getRepository(PolicyEntity).findOneBy({ policyId }));
    return row ? policyFromEntity(row) : undefined;
  }

  /** All policies, by id. */
  async listPolicies(): Promise<PolicyRecord[]> {
    const rows = await this.run('listPolicies', () => this.dataSource.getRepository(PolicyEntity).find({ order: { policyId: 'ASC' } }));
    return rows.map(policyFromEntity);
  }

  /** Versions of a policy, ascending; NOT_FOUND for an unknown policy. */
  async listVersions(policyId: string): Promise<PolicyVersionRecord[]> {
    const [policy, rows] = await this.run('listVersions', () =>
      Promise.all([
        this.dataSource.getRepository(PolicyEntity).findOneBy({ policyId }),
        this.dataSource.getRepository(PolicyVersionEntity).find({ where: { policyId }, order: { version: 'ASC' } }),
      ]),
    );
    if (!policy) throw new SrpoError(ErrorCode.NOT_FOUND, `no policy ${policyId}`, { field: 'policyId' });
    return rows.map(versionFromEntity);
  }

  async getVersion(policyId: string, version: number): Promise<PolicyVersionRecord | undefined> {
    const row = await this.run('getVersion', () => this.dataSource.getRepository(PolicyVersionEntity).findOneBy({ policyId, version }));
    return row ? versionFromEntity(row) : undefined;
  }

  private async run<T>(op: string, fn: () => Promise<T>): Promise<T> {
    try {
      return await this.serial(fn);
    } catch (e) {
      if (e instanceof SrpoError) throw e;
      throw dbError(op, e);
    }
  }

  private transaction(fn: (em: EntityManager) => Promise<void>): Promise<void> {
    return this.serial(() => this.dataSource.transaction(fn));
  }

  private serial<T>(fn: () => Promise<T>): Promise<T> {
    if (!this.exclusive) return fn();
    const next = this.tail.then(fn);
    this.tail = next.catch(() => undefined);
    return next;
  }
}

/** Typed insert: rows must be complete entities (the generic keeps TypeORM's deep partial types from exploding). */
async function insertRows<T extends ObjectLiteral>(em: EntityManager, target: EntityTarget<T>, rows: T | T[]): Promise<void> {
  await em.insert(target, rows as QueryDeepPartialEntity<T> | QueryDeepPartialEntity<T>[]);
}

async function appliedIn(em: EntityManager, policyId: string, groupIds: readonly string[]): Promise<Set<string>> {
  const out = new Set<string>();
  for (const chunk of chunks(groupIds)) {
    const rows = await em.find(UpdateGroupEntity, { select: { groupId: true }, where: { policyId, groupId: In(chunk) } });
    for (const r of rows) out.add(r.groupId);
  }
  return out;
}

async function skippedIn(em: EntityManager, policyId: string, groupIds: readonly string[]): Promise<Set<string>> {
  const out = new Set<string>();
  for (const chunk of chunks(groupIds)) {
    const rows = await em.find(SkippedGroupEntity, { select: { groupId: true }, where: { policyId, groupId: In(chunk) } });
    for (const r of rows) out.add(r.groupId);
  }
  return out;
}

function chunks(ids: readonly string[]): string[][] {
  const unique = [...new Set(ids)];
  const out: string[][] = [];
  for (let i = 0; i < unique.length; i += IN_CHUNK) out.push(unique.slice(i, i + IN_CHUNK));
  return out;
}

// ---- mapping (entities are class instances; callers get plain objects) ----

function copyRecord(r: UpdateRecordInput): UpdateRecordInput {
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

function recordFromEntity(e: UpdateRecordEntity): UpdateRecord {
  return { ...copyRecord(e), createdAt: e.createdAt };
}

function copyGroup(g: GroupLedgerInput): GroupLedgerInput {
  return {
    groupId: g.groupId,
    groupKey: g.groupKey,
    source: { topic: g.source.topic, partition: g.source.partition, offset: g.source.offset },
    setIds: [...g.setIds],
    advantages: [...g.advantages],
    sources: g.sources,
    objectiveConfig: g.objectiveConfig,
  };
}

function groupFromEntity(e: UpdateGroupEntity): GroupLedgerRecord {
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

function copyStats(g: GroupStatsInput): GroupStatsInput {
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

function statsFromEntity(e: GroupStatsEntity): GroupStatsRecord {
  return { ...copyStats(e), policyId: e.policyId, updateId: e.updateId, versionAfter: e.versionAfter, createdAtMs: e.createdAtMs };
}

function copySkipped(e: SkippedGroupInput): SkippedGroupRecord {
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

function skippedFromEntity(e: SkippedGroupEntity): SkippedGroupRecord {
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

function policyFromEntity(e: PolicyEntity): PolicyRecord {
  return { policyId: e.policyId, roles: e.roles, currentVersion: e.currentVersion, createdAtMs: e.createdAtMs };
}

function versionFromEntity(e: PolicyVersionEntity): PolicyVersionRecord {
  return {
    policyId: e.policyId,
    version: e.version,
    weightsHash: e.weightsHash,
    checkpointUri: e.checkpointUri,
    updateId: e.updateId,
    createdAtMs: e.createdAtMs,
  };
}

// ---- validation ----

function checkNonEmpty(v: unknown, field: string, max = Number.POSITIVE_INFINITY): string {
  if (typeof v !== 'string' || v.length === 0) throw new ValidationError(field, 'must be a non-empty string');
  if (v.length > max) throw new ValidationError(field, `must be at most ${max} characters, got ${v.length}`);
  return v;
}

function checkId(v: unknown, field: string): string {
  return checkNonEmpty(v, field, MAX_ID_LENGTH);
}

function checkVersion(v: unknown, field: string): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > 2_147_483_647) {
    throw new ValidationError(field, `must be a non-negative 32-bit integer, got ${String(v)}`);
  }
  return v;
}

function checkHash(v: unknown, field: string): void {
  if (typeof v !== 'string' || !HASH.test(v)) throw new ValidationError(field, `must be a SHA-256 hex digest (64 lowercase hex digits), got ${JSON.stringify(v)}`);
}

function checkEpochMs(v: unknown, field: string): void {
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) throw new ValidationError(field, `must be epoch milliseconds (a non-negative integer), got ${String(v)}`);
}

function checkFinite(v: unknown, field: string): void {
  // SQLite stores NaN as NULL: a non-finite loss could not be read back as written.
  if (typeof v !== 'number' || !Number.isFinite(v)) throw new ValidationError(field, `must be a finite number, got ${String(v)}`);
}

function checkCoordinates(c: unknown, field: string): void {
  const x = c as { topic?: unknown; partition?: unknown; offset?: unknown } | null;
  if (typeof x !== 'object' || x === null) throw new ValidationError(field, 'must be {topic, partition, offset}');
  checkNonEmpty(x.topic, `${field}.topic`, 255);
  if (typeof x.partition !== 'number' || !Number.isInteger(x.partition) || x.partition < 0) {
    throw new ValidationError(`${field}.partition`, `must be a non-negative integer, got ${String(x.partition)}`);
  }
  if (typeof x.offset !== 'number' || !Number.isSafeInteger(x.offset) || x.offset < 0) {
    throw new ValidationError(`${field}.offset`, `must be a non-negative safe integer, got ${String(x.offset)}`);
  }
}

function checkLimit(limit: number): number {
  if (!Number.isInteger(limit) || limit < 1 || limit > MAX_LIST_LIMIT) throw new ValidationError('limit', `must be an integer in [1, ${MAX_LIST_LIMIT}], got ${limit}`);
  return limit;
}

function checkUpdateRecord(r: UpdateRecordInput): void {
  checkId(r.updateId, 'record.updateId');
  checkId(r.policyId, 'record.policyId');
  checkVersion(r.versionBefore, 'record.versionBefore');
  checkVersion(r.versionAfter, 'record.versionAfter');
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
  if (!Number.isInteger(r.wallTimeMs) || r.wallTimeMs < 0 || r.wallTimeMs > 2_147_483_647) {
    throw new ValidationError('record.wallTimeMs', `must be a non-negative 32-bit integer, got ${String(r.wallTimeMs)}`);
  }
  checkNonEmpty(r.checkpointUri, 'record.checkpointUri');
  checkEpochMs(r.committedAtMs, 'record.committedAtMs');
}

function checkGroups(groups: readonly GroupLedgerInput[]): void {
  if (!Array.isArray(groups) || groups.length === 0) throw new ValidationError('groups', 'an update consumes at least one group');
  const ids = new Set<string>();
  groups.forEach((g, i) => {
    const f = `groups[${i}]`;
    checkNonEmpty(g.groupId, `${f}.groupId`, MAX_GROUP_ID_LENGTH);
    if (ids.has(g.groupId)) throw new ValidationError(`${f}.groupId`, `${g.groupId} appears twice in one update`);
    ids.add(g.groupId);
    checkNonEmpty(g.groupKey, `${f}.groupKey`);
    checkCoordinates(g.source, `${f}.source`);
    const setIds: readonly string[] = Array.isArray(g.setIds) ? g.setIds : [];
    const advantages: readonly number[] = Array.isArray(g.advantages) ? g.advantages : [];
    const sources: readonly SetSources[] = Array.isArray(g.sources) ? g.sources : [];
    if (setIds.length === 0) throw new ValidationError(`${f}.setIds`, 'must list at least one set');
    if (advantages.length !== setIds.length) throw new ValidationError(`${f}.advantages`, `must hold one advantage per set (${setIds.length})`);
    advantages.forEach((a, j) => checkFinite(a, `${f}.advantages[${j}]`));
    if (sources.length !== setIds.length) throw new ValidationError(`${f}.sources`, `must hold the sources of every set (${setIds.length})`);
    sources.forEach((s, j) => {
      const sf = `${f}.sources[${j}]`;
      if (s.setId !== setIds[j]) throw new ValidationError(`${sf}.setId`, `must be ${setIds[j]} (setIds order), got ${s.setId}`);
      checkCoordinates(s.set, `${sf}.set`);
      checkCoordinates(s.transition, `${sf}.transition`);
      if (s.outcome !== null) checkCoordinates(s.outcome, `${sf}.outcome`);
      const members: SetSources['members'] = Array.isArray(s.members) ? s.members : [];
      if (members.length === 0) throw new ValidationError(`${sf}.members`, 'must list every member');
      members.forEach((m, k) => {
        checkNonEmpty(m.outputId, `${sf}.members[${k}].outputId`);
        checkCoordinates(m.source, `${sf}.members[${k}].source`);
      });
    });
    if (typeof g.objectiveConfig !== 'string') throw new ValidationError(`${f}.objectiveConfig`, 'must be a string');
  });
}

function checkGroupStats(stats: readonly GroupStatsInput[], groups: readonly GroupLedgerInput[]): void {
  if (!Array.isArray(stats)) throw new ValidationError('stats', 'must be an array');
  const ledger = new Set(groups.map((g) => g.groupId));
  const seen = new Set<string>();
  const count = (v: unknown, field: string): void => {
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > 2_147_483_647) throw new ValidationError(field, `must be a non-negative 32-bit integer, got ${String(v)}`);
  };
  stats.forEach((g, i) => {
    const f = `stats[${i}]`;
    if (!ledger.has(g.groupId)) throw new ValidationError(`${f}.groupId`, `${String(g.groupId)} is not one of the update's groups`);
    if (seen.has(g.groupId)) throw new ValidationError(`${f}.groupId`, `${g.groupId} appears twice`);
    seen.add(g.groupId);
    if (g.workflowKind !== null) checkNonEmpty(g.workflowKind, `${f}.workflowKind`, 32);
    count(g.setCount, `${f}.setCount`);
    count(g.memberCount, `${f}.memberCount`);
    count(g.successCount, `${f}.successCount`);
    count(g.successKnown, `${f}.successKnown`);
    if (g.successCount > g.successKnown) throw new ValidationError(`${f}.successCount`, `must not exceed successKnown (${g.successKnown})`);
    if (g.successKnown > g.setCount) throw new ValidationError(`${f}.successKnown`, `must not exceed setCount (${g.setCount})`);
    checkFinite(g.rewardMean, `${f}.rewardMean`);
    checkFinite(g.lagMean, `${f}.lagMean`);
    // A lag can be negative only for a member from the future, which the learner skips; the column is signed anyway.
    if (!Number.isInteger(g.lagMax) || Math.abs(g.lagMax) > 2_147_483_647) throw new ValidationError(`${f}.lagMax`, `must be a 32-bit integer, got ${String(g.lagMax)}`);
    // Clocks of producers and materializer may disagree: a negative latency is recorded as measured.
    if (!Number.isSafeInteger(g.fillLatencyMs)) throw new ValidationError(`${f}.fillLatencyMs`, `must be an integer, got ${String(g.fillLatencyMs)}`);
    checkEpochMs(g.groupEventTimeMs, `${f}.groupEventTimeMs`);
  });
}

function checkSkipped(e: SkippedGroupInput, f: string): void {
  checkId(e.policyId, `${f}.policyId`);
  checkNonEmpty(e.groupId, `${f}.groupId`, MAX_GROUP_ID_LENGTH);
  checkNonEmpty(e.reason, `${f}.reason`, 64);
  if (e.detail !== null && typeof e.detail !== 'string') throw new ValidationError(`${f}.detail`, 'must be a string or null');
  if (e.lag !== null && (!Number.isInteger(e.lag) || Math.abs(e.lag) > 2_147_483_647)) throw new ValidationError(`${f}.lag`, `must be an integer or null, got ${String(e.lag)}`);
  checkVersion(e.policyVersion, `${f}.policyVersion`);
  checkCoordinates(e.source, `${f}.source`);
  checkEpochMs(e.createdAtMs, `${f}.createdAtMs`);
}

// ---- driver errors ----

function driverCode(e: unknown): string | undefined {
  const d = e instanceof QueryFailedError ? (e.driverError as { code?: unknown }) : (e as { code?: unknown } | null);
  return d && typeof d.code === 'string' ? d.code : undefined;
}

/** Unique or primary-key violation on either dialect. */
export function isUniqueViolation(e: unknown): boolean {
  const code = driverCode(e);
  return code === '23505' || code === 'SQLITE_CONSTRAINT_UNIQUE' || code === 'SQLITE_CONSTRAINT_PRIMARYKEY';
}

const TRANSIENT = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'SQLITE_BUSY', 'SQLITE_LOCKED', '57P01', '57P02', '57P03', '53300', '40001', '40P01']);

function dbError(op: string, e: unknown): Error {
  const code = driverCode(e);
  const transient = code !== undefined && (TRANSIENT.has(code) || code.startsWith('08'));
  const message = errorMessage(e);
  if (transient || /Connection terminated|connect ECONNREFUSED|timeout/i.test(message)) {
    return new SrpoError(ErrorCode.UNAVAILABLE, `audit store ${op}: ${message}`, { retriable: true, cause: e, details: { code } });
  }
  // Anything else is a bug or a schema mismatch; keep the driver error for the stack.
  return new SrpoError(ErrorCode.INTEGRITY_FAILED, `audit store ${op} failed: ${message}`, { cause: e, details: { code } });
}
