/**
 * One repository per audit-store table, each with the validation of what goes
 * into its table (static `validate`) and the mapping between input, records
 * of audit-types.ts and rows (`fromInput`, `toRow`, `fromRow`).
 *
 * Inserts take records built by `fromInput` from input `validate` accepted,
 * and nothing serialises access on SQLite here: {@link AuditStore} does both,
 * and owns the operations that span tables. Use the repositories directly
 * only inside its transactions or in tests.
 */
export { DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT } from './field-checks';
export { DEFAULT_GROUP_STATS_LIMIT, MAX_GROUP_STATS_LIMIT, GroupStatsRepository } from './group-stats.repository';
export { PolicyRepository } from './policy.repository';
export { PolicyVersionRepository } from './policy-version.repository';
export { SkippedGroupRepository } from './skipped-group.repository';
export { UpdateGroupRepository } from './update-group.repository';
export { UpdateRecordRepository } from './update-record.repository';
export { storeRepositories, type StoreRepositories } from './store-repositories';
export { SubjectKeyRepository, type ContentKeyRecord, type ErasureScope } from './subject-key.repository';
export { ErasureRepository, type ErasureRecord } from './erasure.repository';
