/**
 * One repository per audit-store table, each with the validation of what goes
 * into its table and the mapping between rows and the records of
 * audit-types.ts. {@link AuditStore} composes them; it owns the operations
 * that span tables.
 */
export { DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT } from './field-checks';
export { DEFAULT_GROUP_STATS_LIMIT, MAX_GROUP_STATS_LIMIT, GroupStatsRepository } from './group-stats.repository';
export { PolicyRepository } from './policy.repository';
export { PolicyVersionRepository } from './policy-version.repository';
export { SkippedGroupRepository } from './skipped-group.repository';
export { UpdateGroupRepository } from './update-group.repository';
export { UpdateRecordRepository } from './update-record.repository';
export { storeRepositories, type StoreRepositories } from './store-repositories';
