import { MigrationInterface, QueryRunner, Table, TableForeignKey, TableIndex } from 'typeorm';
import { addAppendOnlyTriggers, dropAppendOnlyTriggers } from './migration-dialect';

/** The table this migration adds; append-only like the other audit tables. */
export const GROUP_STATS_TABLE = 'update_group_stats';

/**
 * Per-group statistics of every trained group (reward, success, workflow kind,
 * policy lag, group-fill latency), for the dashboard. A table of its own rather
 * than columns on `update_groups`: adding columns on SQLite rebuilds the table,
 * which would drop its append-only triggers, and the ledger rows are what
 * verify and replay compare byte for byte. The triggers reuse the function
 * `srpo_refuse_audit_change` of the append-only migration on PostgreSQL.
 */
export class GroupStats1767225600002 implements MigrationInterface {
  name = 'GroupStats1767225600002';

  async up(qr: QueryRunner): Promise<void> {
    await qr.createTable(
      new Table({
        name: GROUP_STATS_TABLE,
        columns: [
          { name: 'policy_id', type: 'varchar', length: '200', isPrimary: true },
          { name: 'group_id', type: 'varchar', length: '512', isPrimary: true },
          { name: 'update_id', type: 'varchar', length: '200' },
          { name: 'version_after', type: 'integer' },
          { name: 'workflow_kind', type: 'varchar', length: '32', isNullable: true },
          { name: 'set_count', type: 'integer' },
          { name: 'member_count', type: 'integer' },
          { name: 'reward_mean', type: 'double precision' },
          { name: 'success_count', type: 'integer' },
          { name: 'success_known', type: 'integer' },
          { name: 'lag_max', type: 'integer' },
          { name: 'lag_mean', type: 'double precision' },
          { name: 'fill_latency_ms', type: 'bigint' },
          { name: 'group_event_time_ms', type: 'bigint' },
          { name: 'created_at_ms', type: 'bigint' },
        ],
        foreignKeys: [
          new TableForeignKey({
            name: 'fk_update_group_stats_update',
            columnNames: ['update_id'],
            referencedTableName: 'update_records',
            referencedColumnNames: ['update_id'],
            onDelete: 'NO ACTION',
          }),
        ],
        indices: [
          new TableIndex({ name: 'ix_update_group_stats_update', columnNames: ['update_id'] }),
          new TableIndex({ name: 'ix_update_group_stats_policy_created', columnNames: ['policy_id', 'created_at_ms'] }),
        ],
      }),
    );
    await addAppendOnlyTriggers(qr, GROUP_STATS_TABLE);
  }

  async down(qr: QueryRunner): Promise<void> {
    await dropAppendOnlyTriggers(qr, GROUP_STATS_TABLE);
    await qr.dropTable(GROUP_STATS_TABLE);
  }
}
