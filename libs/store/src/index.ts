/**
 * The audit store: TypeORM entities, migrations, one repository per table and
 * the {@link AuditStore} facade over SQLite (embedded default) or PostgreSQL.
 */
export * from './store-config';
export * from './json-columns';
export * from './audit-types';
export * from './entities';
export * from './migrations';
export * from './data-source';
export * from './repositories';
export * from './audit-store.service';
export * from './key-store.service';
export { DEFAULT_ERASURE_LIST_LIMIT, MAX_ERASURE_LIST_LIMIT, type RecentErasures } from './repositories/erasure.repository';
export { isUniqueViolation } from './store-errors';
export * from './ledger-entry';
export * from './group-stats';
export * from './policy-events';
