import { MigrationInterface, QueryRunner } from 'typeorm';
import { dialectOf, pgSchema } from './migration-dialect';

/** Tables whose rows, once written, are never changed or removed. */
export const APPEND_ONLY_TABLES = ['update_records', 'update_groups', 'skipped_groups'] as const;

/**
 * Database-level guard for the audit tables: UPDATE and DELETE raise (and
 * TRUNCATE on PostgreSQL), whoever issues them. The store never tries either;
 * this catches hand-written SQL and future code. Triggers have no portable
 * syntax, so this migration branches on the dialect.
 */
export class AppendOnlyGuards1767225600001 implements MigrationInterface {
  name = 'AppendOnlyGuards1767225600001';

  async up(qr: QueryRunner): Promise<void> {
    const dialect = dialectOf(qr);
    if (dialect === 'sqlite') {
      for (const t of APPEND_ONLY_TABLES) {
        for (const op of ['UPDATE', 'DELETE']) {
          await qr.query(
            `CREATE TRIGGER "${t}_no_${op.toLowerCase()}" BEFORE ${op} ON "${t}" ` + `BEGIN SELECT RAISE(ABORT, '${t} is append-only: ${op} refused'); END`,
          );
        }
      }
      return;
    }
    const s = pgSchema(qr);
    await qr.query(
      `CREATE FUNCTION ${s}"srpo_refuse_audit_change"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP USING ERRCODE = 'restrict_violation';
END
$$`,
    );
    for (const t of APPEND_ONLY_TABLES) {
      await qr.query(`CREATE TRIGGER "${t}_append_only" BEFORE UPDATE OR DELETE ON ${s}"${t}" FOR EACH ROW EXECUTE PROCEDURE ${s}"srpo_refuse_audit_change"()`);
      await qr.query(`CREATE TRIGGER "${t}_no_truncate" BEFORE TRUNCATE ON ${s}"${t}" FOR EACH STATEMENT EXECUTE PROCEDURE ${s}"srpo_refuse_audit_change"()`);
    }
  }

  async down(qr: QueryRunner): Promise<void> {
    const dialect = dialectOf(qr);
    if (dialect === 'sqlite') {
      for (const t of APPEND_ONLY_TABLES) {
        for (const op of ['update', 'delete']) await qr.query(`DROP TRIGGER IF EXISTS "${t}_no_${op}"`);
      }
      return;
    }
    const s = pgSchema(qr);
    for (const t of APPEND_ONLY_TABLES) {
      await qr.query(`DROP TRIGGER IF EXISTS "${t}_no_truncate" ON ${s}"${t}"`);
      await qr.query(`DROP TRIGGER IF EXISTS "${t}_append_only" ON ${s}"${t}"`);
    }
    await qr.query(`DROP FUNCTION IF EXISTS ${s}"srpo_refuse_audit_change"()`);
  }
}
