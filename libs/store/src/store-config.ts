/**
 * Where the audit record lives. SQLite (through better-sqlite3) is the embedded
 * default; PostgreSQL is for shared deployments. `schema` isolates a PostgreSQL
 * store inside a database (tests use one schema per file); it must exist.
 */
export type StoreConfig =
  | { kind: 'sqlite'; path: string }
  | { kind: 'postgres'; url: string; schema?: string };

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
