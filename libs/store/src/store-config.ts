import * as path from 'path';
import { ConfigError, type EnvReader } from '@srpo/core';

/**
 * Where the audit record lives. SQLite (through better-sqlite3) is the embedded
 * default; PostgreSQL is for shared deployments. `schema` isolates a PostgreSQL
 * store inside a database (tests use one schema per file); it must exist.
 */
export type StoreConfig = { kind: 'sqlite'; path: string } | { kind: 'postgres'; url: string; schema?: string };

/** A printable description without credentials (for logs and errors). */
export function describeStore(config: StoreConfig): string {
  if (config.kind === 'sqlite') return `sqlite:${config.path}`;
  let where = 'postgres';
  try {
    const u = new URL(config.url);
    where = `postgres://${u.hostname}${u.port ? ':' + u.port : ''}${u.pathname}`;
  } catch {
    // An unparsable URL is reported by the driver; never echo it, it may hold a password.
  }
  return config.schema ? `${where} (schema ${config.schema})` : where;
}

/**
 * The store from the environment, as the learner and the CLI both read it:
 * SRPO_DATABASE_URL (postgres:// or postgresql://; optional SRPO_DATABASE_SCHEMA), else SQLite
 * at SRPO_SQLITE_PATH (default `.srpo/learner.sqlite`, relative to `cwd`).
 */
export function readStore(r: EnvReader, cwd: string): StoreConfig {
  const url = r.optionalStr('SRPO_DATABASE_URL');
  if (url === undefined) {
    if (r.has('SRPO_DATABASE_SCHEMA')) throw new ConfigError('SRPO_DATABASE_SCHEMA', 'only applies to PostgreSQL; set SRPO_DATABASE_URL too');
    return { kind: 'sqlite', path: path.resolve(cwd, r.str('SRPO_SQLITE_PATH', '.srpo/learner.sqlite')) };
  }
  let scheme: string;
  try {
    scheme = new URL(url).protocol;
  } catch {
    // Never echo the URL: it may carry a password.
    throw new ConfigError('SRPO_DATABASE_URL', 'is not a valid URL (expected postgres://user:password@host:port/database)');
  }
  if (scheme !== 'postgres:' && scheme !== 'postgresql:') {
    throw new ConfigError('SRPO_DATABASE_URL', `scheme must be postgres:// or postgresql://, got ${scheme}//; leave it unset for SQLite`);
  }
  const schema = r.optionalStr('SRPO_DATABASE_SCHEMA');
  return schema === undefined ? { kind: 'postgres', url } : { kind: 'postgres', url, schema };
}
