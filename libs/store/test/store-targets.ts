import { randomBytes } from 'crypto';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { DataSource } from 'typeorm';
import { ensurePostgres } from '@srpo/testing';
import type { StoreConfig } from '../src/store-config';

/**
 * A fresh, isolated store location for one test: a temp SQLite file, or a new
 * schema in the real test PostgreSQL. `dispose()` removes it.
 */
export interface StoreTarget {
  config: StoreConfig;
  /** `"schema"."table"` on PostgreSQL, `"table"` on SQLite (for raw SQL in tests). */
  table(name: string): string;
  dispose(): Promise<void>;
}

export type StoreKind = StoreConfig['kind'];
export const STORE_KINDS: [StoreKind][] = [['sqlite'], ['postgres']];

export async function createStoreTarget(kind: StoreKind, label: string): Promise<StoreTarget> {
  const unique = `${label}_${Date.now().toString(36)}_${randomBytes(3).toString('hex')}`.replace(/[^a-z0-9_]/gi, '_').toLowerCase();
  if (kind === 'sqlite') {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-store-'));
    return {
      config: { kind: 'sqlite', path: path.join(dir, `${unique}.sqlite`) },
      table: (name) => `"${name}"`,
      dispose: async () => fs.rmSync(dir, { recursive: true, force: true }),
    };
  }
  const url = ensurePostgres();
  const schema = `test_${unique}`;
  await withClient(url, (c) => c.query(`CREATE SCHEMA "${schema}"`));
  return {
    config: { kind: 'postgres', url, schema },
    table: (name) => `"${schema}"."${name}"`,
    dispose: async () => {
      await withClient(url, (c) => c.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`));
    },
  };
}

/** An admin connection without entities or migrations (there are no pg typings in the repo; TypeORM has them). */
async function withClient<T>(url: string, fn: (c: DataSource) => Promise<T>): Promise<T> {
  const ds = new DataSource({ type: 'postgres', url });
  await ds.initialize();
  try {
    return await fn(ds);
  } finally {
    await ds.destroy();
  }
}
