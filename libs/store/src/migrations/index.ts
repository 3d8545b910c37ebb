import { InitialSchema1767225600000 } from './1767225600000-initial-schema';
import { AppendOnlyGuards1767225600001, APPEND_ONLY_TABLES } from './1767225600001-append-only-guards';
import { GroupStats1767225600002, GROUP_STATS_TABLE } from './1767225600002-group-stats';
import { ERASURES_TABLE, SubjectKeys1767225600003 } from './1767225600003-subject-keys';

export { InitialSchema1767225600000, AppendOnlyGuards1767225600001, GroupStats1767225600002, SubjectKeys1767225600003 };
export { APPEND_ONLY_TABLES } from './1767225600001-append-only-guards';
export { GROUP_STATS_TABLE } from './1767225600002-group-stats';
export { ERASURES_TABLE } from './1767225600003-subject-keys';

/** Every table whose rows are never changed or removed, across all migrations. */
export const AUDIT_APPEND_ONLY_TABLES = [...APPEND_ONLY_TABLES, GROUP_STATS_TABLE, ERASURES_TABLE] as const;

/** In order; TypeORM runs the ones not yet recorded in its `migrations` table. */
export const STORE_MIGRATIONS = [InitialSchema1767225600000, AppendOnlyGuards1767225600001, GroupStats1767225600002, SubjectKeys1767225600003];
