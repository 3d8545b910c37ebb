import 'reflect-metadata';
import * as fs from 'fs';
import * as path from 'path';
import { DataSource } from 'typeorm';
import { STORE_ENTITIES } from './entities';
import { STORE_MIGRATIONS } from './migrations';
import type { StoreConfig } from './store-config';

/** The part of better-sqlite3's Database that {@link createDataSource} uses (TypeORM types it as any). */
interface SqlitePragmas {
  pragma(source: string): unknown;
}

export interface DataSourceOptions {
  /** Log every SQL statement (debugging only). */
  logging?: boolean;
}

/**
 * A TypeORM data source for the audit store; `initialize()` it (or use
 * {@link AuditStore.open}). The schema comes only from the migrations, which run
 * on initialize: `synchronize` is always off, so what is in the database is
 * exactly what the reviewed migrations created.
 */
export function createDataSource(config: StoreConfig, options: DataSourceOptions = {}): DataSource {
  const common = {
    entities: STORE_ENTITIES,
    migrations: STORE_MIGRATIONS,
    migrationsRun: true,
    synchronize: false,
    logging: options.logging ?? false,
  } as const;
  if (config.kind === 'sqlite') {
    const file = config.path !== ':memory:';
    if (file) fs.mkdirSync(path.dirname(path.resolve(config.path)), { recursive: true });
    return new DataSource({
      type: 'better-sqlite3',
      database: config.path,
      prepareDatabase: (db: SqlitePragmas) => {
        // WAL lets readers (the HTTP API) proceed while the learner writes.
        if (file) db.pragma('journal_mode = WAL');
        // After WAL, on purpose: better-sqlite3 is built with SQLITE_DEFAULT_WAL_SYNCHRONOUS=1, so entering
        // WAL would otherwise leave NORMAL, under which a power cut can lose the last committed
        // transactions (an update's ledger rows among them) although the learner already went on to
        // publish the version and commit its Kafka offsets. FULL syncs the WAL at every commit.
        db.pragma('synchronous = FULL');
        // Deleted content is overwritten with zeros, not left in free space: deleting a content key is
        // how `srpo erase` erases (docs/erasure.md), so the key must not survive in the file.
        db.pragma('secure_delete = ON');
      },
      ...common,
    });
  }
  return new DataSource({
    type: 'postgres',
    url: config.url,
    schema: config.schema,
    applicationName: 'srpo-store',
    connectTimeoutMS: 10_000,
    ...common,
  });
}
