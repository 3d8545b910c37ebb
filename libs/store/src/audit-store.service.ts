import type { DataSource } from 'typeorm';
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
  SkippedGroupInput,
  SkippedGroupRecord,
  UpdateDetail,
  UpdateQuery,
  UpdateRecord,
  UpdateRecordInput,
} from './audit-types';
import { createDataSource, type DataSourceOptions } from './data-source';
import {
  DEFAULT_LIST_LIMIT,
  GroupStatsRepository,
  PolicyRepository,
  PolicyVersionRepository,
  SkippedGroupRepository,
  storeRepositories,
  UpdateGroupRepository,
  UpdateRecordRepository,
  type StoreRepositories,
} from './repositories';
import { dbError, isUniqueViolation } from './store-errors';
import { describeStore, type StoreConfig } from './store-config';

/**
 * The learner's audit record: policies, their versions, one append-only record
 * per update and the ledger of consumed groups.
 *
 * A facade over one repository per table (./repositories), which validate
 * their table's input and map rows to records. This class owns what spans
 * tables: the transactions (an update with its ledger rows, statistics and
 * version, all or nothing), the conflict checks across the ledger and the
 * skipped groups, serialising access on SQLite, and turning driver errors
 * into {@link SrpoError}s.
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
  /** Outside transactions: over the data source's manager. */
  private readonly repos: StoreRepositories;

  constructor(readonly dataSource: DataSource) {
    const type = dataSource.options.type;
    this.exclusive = type === 'better-sqlite3' || type === 'sqlite';
    this.repos = storeRepositories(dataSource.manager);
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
    PolicyRepository.validate(policyId, roles);
    PolicyVersionRepository.validate(initial);
    const existing = await this.getPolicy(policyId);
    if (existing) return existing;
    try {
      await this.transaction(async (r) => {
        await r.policies.insert(PolicyRepository.fromInput(policyId, roles, initial));
        await r.versions.insert(PolicyVersionRepository.fromInitial(policyId, initial));
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
    // Everything is validated before the first query: malformed input is refused the same way whatever is stored.
    UpdateGroupRepository.validate(groups);
    return this.insertUpdate(record, groups, stats);
  }

  /**
   * Records an adoption (`srpo erase --adopt`, docs/erasure.md): an update that trains on no group
   * and moves the policy to the weights of another lineage, which `record.hyperparameters.adoption`
   * names. Refused as {@link recordUpdate} refuses an update, and without that field.
   */
  async recordAdoption(record: UpdateRecordInput): Promise<UpdateDetail> {
    const adoption = record.hyperparameters.adoption;
    if (typeof adoption !== 'object' || adoption === null || Array.isArray(adoption))
      throw new ValidationError('hyperparameters.adoption', 'an adoption names the lineage it adopts');
    return this.insertUpdate(record, [], []);
  }

  private async insertUpdate(record: UpdateRecordInput, groups: readonly GroupLedgerInput[], stats: readonly GroupStatsInput[]): Promise<UpdateDetail> {
    UpdateRecordRepository.validate(record);
    const groupIds = groups.map((g) => g.groupId);
    GroupStatsRepository.validate(stats, groupIds);
    const update = UpdateRecordRepository.fromInput(record);
    const ledger = UpdateGroupRepository.fromInput(record, groups);
    const groupStats = GroupStatsRepository.fromInput(record, stats);
    try {
      await this.transaction(async (r) => {
        const policy = await r.policies.get(record.policyId);
        if (!policy) throw new SrpoError(ErrorCode.NOT_FOUND, `policy ${record.policyId} is not registered`, { field: 'policyId' });
        if (policy.currentVersion !== record.versionBefore) {
          throw new SrpoError(
            ErrorCode.CONFLICT,
            `policy ${record.policyId} is at version ${policy.currentVersion}, the update starts from ${record.versionBefore}`,
            { field: 'versionBefore', details: { currentVersion: policy.currentVersion } },
          );
        }
        const applied = await r.ledger.appliedIn(record.policyId, groupIds);
        if (applied.size > 0) {
          throw new SrpoError(ErrorCode.CONFLICT, `groups already applied for policy ${record.policyId}: ${[...applied].join(', ')}`, {
            field: 'groups',
            details: { groupIds: [...applied] },
          });
        }
        const skipped = await r.skipped.skippedIn(record.policyId, groupIds);
        if (skipped.size > 0) {
          throw new SrpoError(ErrorCode.CONFLICT, `groups already skipped for policy ${record.policyId}: ${[...skipped].join(', ')}`, {
            field: 'groups',
            details: { groupIds: [...skipped] },
          });
        }
        // In foreign-key order: the ledger, the statistics and the version refer to the update record.
        await r.updates.insert(update);
        await r.ledger.insert(ledger);
        await r.stats.insert(groupStats);
        await r.versions.insert(PolicyVersionRepository.fromUpdate(record));
        if (!(await r.policies.advanceVersion(record.policyId, record.versionBefore, record.versionAfter))) {
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
    return { ...update, groups: ledger };
  }

  /** Which of `groupIds` are in the ledger of `policyId` (i.e. were applied by some update). */
  async isGroupApplied(policyId: string, groupIds: readonly string[]): Promise<Set<string>> {
    return this.run('isGroupApplied', () => this.repos.ledger.appliedIn(policyId, groupIds));
  }

  /** Which of `groupIds` were recorded as skipped for `policyId`. */
  async skippedGroupIds(policyId: string, groupIds: readonly string[]): Promise<Set<string>> {
    return this.run('skippedGroupIds', () => this.repos.skipped.skippedIn(policyId, groupIds));
  }

  /**
   * Records groups that were consumed without training on them, in one
   * transaction. Idempotent: entries already recorded (a redelivery) are left
   * as they are and not returned.
   *
   * @returns the entries this call recorded
   */
  async recordSkipped(entries: readonly SkippedGroupInput[]): Promise<SkippedGroupRecord[]> {
    entries.forEach((e, i) => SkippedGroupRepository.validate(e, `entries[${i}]`));
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
      await this.transaction(async (r) => {
        const byPolicy = new Map<string, SkippedGroupInput[]>();
        for (const e of unique) byPolicy.set(e.policyId, [...(byPolicy.get(e.policyId) ?? []), e]);
        for (const [policyId, list] of byPolicy) {
          // Checked, not left to the foreign key: the caller learns which policy is unknown.
          if (!(await r.policies.get(policyId))) throw new SrpoError(ErrorCode.NOT_FOUND, `policy ${policyId} is not registered`, { field: 'policyId' });
          const present = await r.skipped.skippedIn(
            policyId,
            list.map((e) => e.groupId),
          );
          const applied = await r.ledger.appliedIn(
            policyId,
            list.map((e) => e.groupId),
          );
          for (const e of list) {
            if (present.has(e.groupId)) continue;
            if (applied.has(e.groupId)) {
              throw new SrpoError(ErrorCode.CONFLICT, `group ${e.groupId} of policy ${policyId} was applied; it cannot also be skipped`, {
                field: 'groupId',
              });
            }
            const entry = SkippedGroupRepository.fromInput(e);
            await r.skipped.insert(entry);
            recorded.push(entry);
          }
        }
      });
    } catch (e) {
      if (e instanceof SrpoError) throw e;
      if (isUniqueViolation(e))
        throw new SrpoError(ErrorCode.CONFLICT, `skipped groups were recorded concurrently: ${errorMessage(e)}`, { retriable: true, cause: e });
      throw dbError('recordSkipped', e);
    }
    for (const r of recorded) this.log.info('group skipped', { policyId: r.policyId, groupId: r.groupId, reason: r.reason, lag: r.lag });
    return recorded;
  }

  /** Skipped groups of a policy, oldest first. */
  async listSkipped(policyId: string, limit = DEFAULT_LIST_LIMIT): Promise<SkippedGroupRecord[]> {
    return this.run('listSkipped', () => this.repos.skipped.list(policyId, limit));
  }

  /** The update that produced the policy's highest version, or undefined before the first update. */
  async latestUpdate(policyId: string): Promise<UpdateRecord | undefined> {
    return this.run('latestUpdate', () => this.repos.updates.latest(policyId));
  }

  /** An update with its ledger rows in order; NOT_FOUND if unknown. */
  async getUpdate(updateId: string): Promise<UpdateDetail> {
    const detail = await this.run('getUpdate', async () => {
      // One after the other, record first: on PostgreSQL two parallel reads take
      // their snapshots independently, and the ledger read could predate the
      // commit the record read sees (an update with no groups). A record that is
      // visible was committed with its groups, so a later read finds them.
      const update = await this.repos.updates.get(updateId);
      return update ? { ...update, groups: await this.repos.ledger.listForUpdate(updateId) } : undefined;
    });
    if (!detail) throw new SrpoError(ErrorCode.NOT_FOUND, `no update ${updateId}`, { field: 'updateId' });
    return detail;
  }

  /** Updates with `from <= committedAtMs < to`, oldest first (then by version). */
  async listUpdates(query: UpdateQuery = {}): Promise<UpdateRecord[]> {
    return this.run('listUpdates', () => this.repos.updates.list(query));
  }

  /** Statistics of trained groups with `from <= createdAtMs < to` (the update's commit time), oldest first. */
  async listGroupStats(query: GroupStatsQuery = {}): Promise<GroupStatsRecord[]> {
    return this.run('listGroupStats', () => this.repos.stats.list(query));
  }

  /**
   * Ledger rows whose group contains the set `setId` (normally one; a set id
   * reused across policies gives one per policy), oldest first.
   */
  async findGroupsWithSet(setId: string): Promise<GroupLedgerRecord[]> {
    return this.run('findGroupsWithSet', () => this.repos.ledger.findWithSet(setId));
  }

  async getPolicy(policyId: string): Promise<PolicyRecord | undefined> {
    return this.run('getPolicy', () => this.repos.policies.get(policyId));
  }

  /** All policies, by id. */
  async listPolicies(): Promise<PolicyRecord[]> {
    return this.run('listPolicies', () => this.repos.policies.list());
  }

  /** Versions of a policy, ascending; NOT_FOUND for an unknown policy. */
  async listVersions(policyId: string): Promise<PolicyVersionRecord[]> {
    // Policy first, for the reason of getUpdate: a registered policy's initial version is already visible then.
    const versions = await this.run('listVersions', async () => ((await this.repos.policies.get(policyId)) ? this.repos.versions.list(policyId) : undefined));
    if (!versions) throw new SrpoError(ErrorCode.NOT_FOUND, `no policy ${policyId}`, { field: 'policyId' });
    return versions;
  }

  async getVersion(policyId: string, version: number): Promise<PolicyVersionRecord | undefined> {
    return this.run('getVersion', () => this.repos.versions.get(policyId, version));
  }

  /** `fn` in turn (on SQLite), with driver errors as SrpoErrors naming `op`. */
  private async run<T>(op: string, fn: () => Promise<T>): Promise<T> {
    try {
      return await this.serial(fn);
    } catch (e) {
      if (e instanceof SrpoError) throw e;
      throw dbError(op, e);
    }
  }

  /** One transaction, with repositories over its connection; the caller maps its errors. */
  private transaction(fn: (r: StoreRepositories) => Promise<void>): Promise<void> {
    return this.serial(() => this.dataSource.transaction((em) => fn(storeRepositories(em))));
  }

  private serial<T>(fn: () => Promise<T>): Promise<T> {
    if (!this.exclusive) return fn();
    const next = this.tail.then(fn);
    this.tail = next.catch(() => undefined);
    return next;
  }
}
