import type { QueryRunner } from 'typeorm';
import { ErrorCode, SrpoError } from '@srpo/core';

/** The store's two dialects; triggers have no portable syntax, so migrations branch on this. */
export function dialectOf(qr: QueryRunner): 'sqlite' | 'postgres' {
  const type = qr.connection.options.type;
  if (type === 'better-sqlite3' || type === 'sqlite') return 'sqlite';
  if (type === 'postgres') return 'postgres';
  throw new SrpoError(ErrorCode.CONFIG_INVALID, `the audit store supports SQLite and PostgreSQL, not ${type}`);
}

/** `"schema".` for a PostgreSQL store in a schema of its own, else ''. */
export function pgSchema(qr: QueryRunner): string {
  const schema = (qr.connection.driver as { schema?: string }).schema;
  return schema ? `"${schema.replace(/"/g, '""')}".` : '';
}

/**
 * Makes table `t` append-only in the database: UPDATE and DELETE raise (TRUNCATE too on
 * PostgreSQL, through the function `srpo_refuse_audit_change` of the append-only migration).
 */
export async function addAppendOnlyTriggers(qr: QueryRunner, t: string): Promise<void> {
  if (dialectOf(qr) === 'sqlite') {
    for (const op of ['UPDATE', 'DELETE']) {
      await qr.query(
        `CREATE TRIGGER "${t}_no_${op.toLowerCase()}" BEFORE ${op} ON "${t}" BEGIN SELECT RAISE(ABORT, '${t} is append-only: ${op} refused'); END`,
      );
    }
    return;
  }
  const s = pgSchema(qr);
  await qr.query(`CREATE TRIGGER "${t}_append_only" BEFORE UPDATE OR DELETE ON ${s}"${t}" FOR EACH ROW EXECUTE PROCEDURE ${s}"srpo_refuse_audit_change"()`);
  await qr.query(`CREATE TRIGGER "${t}_no_truncate" BEFORE TRUNCATE ON ${s}"${t}" FOR EACH STATEMENT EXECUTE PROCEDURE ${s}"srpo_refuse_audit_change"()`);
}

/** Inverse of {@link addAppendOnlyTriggers}. */
export async function dropAppendOnlyTriggers(qr: QueryRunner, t: string): Promise<void> {
  if (dialectOf(qr) === 'sqlite') {
    for (const op of ['update', 'delete']) await qr.query(`DROP TRIGGER IF EXISTS "${t}_no_${op}"`);
    return;
  }
  const s = pgSchema(qr);
  await qr.query(`DROP TRIGGER IF EXISTS "${t}_no_truncate" ON ${s}"${t}"`);
  await qr.query(`DROP TRIGGER IF EXISTS "${t}_append_only" ON ${s}"${t}"`);
}
