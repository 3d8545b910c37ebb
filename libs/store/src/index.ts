/**
 * The audit store: TypeORM entities, migrations and the {@link AuditStore}
 * service over SQLite (embedded default) or PostgreSQL.
 */
export * from './store-config';
export * from './json-columns';
export * from './audit-types';
export * from './entities';
export * from './migrations';
export * from './data-source';
export * from './audit-store.service';
export * from './ledger-entry';
export * from './group-stats';
export * from './policy-events';
