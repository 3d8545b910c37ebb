import { InitialSchema1767225600000 } from './1767225600000-initial-schema';
import { AppendOnlyGuards1767225600001 } from './1767225600001-append-only-guards';

export { InitialSchema1767225600000, AppendOnlyGuards1767225600001 };
export { APPEND_ONLY_TABLES } from './1767225600001-append-only-guards';

/** In order; TypeORM runs the ones not yet recorded in its `migrations` table. */
export const STORE_MIGRATIONS = [InitialSchema1767225600000, AppendOnlyGuards1767225600001];
