import 'reflect-metadata';
import * as fs from 'fs';
import * as path from 'path';
import { DataSource } from 'typeorm';
import { STORE_ENTITIES } from './entities';
import { STORE_MIGRATIONS } from './migrations';
import type { StoreConfig } from './store-config';

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
    if (config.path !== ':memory:') fs.mkdirSync(path.dirname(path.resolve(config.path)), { recursive: true });
    return new DataSource({
      type: 'better-sqlite3',
      database: config.path,
      // WAL lets readers (the HTTP API) proceed while the learner writes.
      enableWAL: config.path !== ':memory:',
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
