import { MigrationInterface, QueryRunner, Table, TableForeignKey, TableIndex } from 'typeorm';
import type { TableColumnOptions } from 'typeorm/schema-builder/options/TableColumnOptions';

/**
 * The audit schema. Written with TypeORM's schema API rather than SQL so one
 * migration serves SQLite and PostgreSQL; types are the portable subset
 * (varchar, text, integer, bigint, double precision).
 */
export class InitialSchema1767225600000 implements MigrationInterface {
  name = 'InitialSchema1767225600000';

  async up(qr: QueryRunner): Promise<void> {
    await qr.createTable(
      new Table({
        name: 'policies',
        columns: [varchar('policy_id', 200, { isPrimary: true }), text('roles'), integer('current_version'), bigint('created_at_ms')],
      }),
    );

    await qr.createTable(
      new Table({
        name: 'update_records',
        columns: [
          varchar('update_id', 200, { isPrimary: true }),
          varchar('policy_id', 200),
          integer('version_before'),
          integer('version_after'),
          varchar('weights_hash_before', 64),
          varchar('weights_hash_after', 64),
          text('hyperparameters'),
          bigint('seed'),
          varchar('backend', 64),
          varchar('code_version', 200),
          double('loss'),
          double('grad_norm'),
          text('diagnostics'),
          integer('wall_time_ms'),
          text('checkpoint_uri'),
          bigint('committed_at_ms'),
          varchar('created_at', 32),
        ],
        foreignKeys: [fk('fk_update_records_policy', ['policy_id'], 'policies', ['policy_id'])],
        indices: [
          // One update per produced version: two learners racing on a policy cannot both commit.
          new TableIndex({ name: 'uq_update_records_policy_version_after', columnNames: ['policy_id', 'version_after'], isUnique: true }),
          new TableIndex({ name: 'ix_update_records_committed_at', columnNames: ['committed_at_ms'] }),
        ],
      }),
    );

    await qr.createTable(
      new Table({
        name: 'policy_versions',
        columns: [
          varchar('policy_id', 200, { isPrimary: true }),
          integer('version', { isPrimary: true }),
          varchar('weights_hash', 64),
          text('checkpoint_uri'),
          varchar('update_id', 200, { isNullable: true }),
          bigint('created_at_ms'),
        ],
        foreignKeys: [
          fk('fk_policy_versions_policy', ['policy_id'], 'policies', ['policy_id']),
          fk('fk_policy_versions_update', ['update_id'], 'update_records', ['update_id']),
        ],
      }),
    );

    await qr.createTable(
      new Table({
        name: 'update_groups',
        columns: [
          varchar('policy_id', 200, { isPrimary: true }),
          varchar('group_id', 512, { isPrimary: true }),
          varchar('update_id', 200),
          integer('position'),
          text('group_key'),
          varchar('group_topic', 255),
          integer('group_partition'),
          bigint('group_offset'),
          text('set_ids'),
          text('advantages'),
          text('sources'),
          text('objective_config'),
          bigint('created_at_ms'),
        ],
        foreignKeys: [fk('fk_update_groups_update', ['update_id'], 'update_records', ['update_id'])],
      }),
    );
    await qr.createIndex('update_groups', new TableIndex({ name: 'ix_update_groups_update', columnNames: ['update_id'] }));

    await qr.createTable(
      new Table({
        name: 'skipped_groups',
        columns: [
          varchar('policy_id', 200, { isPrimary: true }),
          varchar('group_id', 512, { isPrimary: true }),
          varchar('reason', 64),
          text('detail', { isNullable: true }),
          integer('lag', { isNullable: true }),
          integer('policy_version'),
          varchar('group_topic', 255),
          integer('group_partition'),
          bigint('group_offset'),
          bigint('created_at_ms'),
        ],
        foreignKeys: [fk('fk_skipped_groups_policy', ['policy_id'], 'policies', ['policy_id'])],
      }),
    );
  }

  async down(qr: QueryRunner): Promise<void> {
    // Reverse order of the foreign keys.
    await qr.dropTable('skipped_groups');
    await qr.dropIndex('update_groups', 'ix_update_groups_update');
    await qr.dropTable('update_groups');
    await qr.dropTable('policy_versions');
    await qr.dropTable('update_records');
    await qr.dropTable('policies');
  }
}

type Extra = Partial<TableColumnOptions>;

function varchar(name: string, length: number, extra: Extra = {}): TableColumnOptions {
  return { name, type: 'varchar', length: String(length), isNullable: false, ...extra };
}
function text(name: string, extra: Extra = {}): TableColumnOptions {
  return { name, type: 'text', isNullable: false, ...extra };
}
function integer(name: string, extra: Extra = {}): TableColumnOptions {
  return { name, type: 'integer', isNullable: false, ...extra };
}
function bigint(name: string, extra: Extra = {}): TableColumnOptions {
  return { name, type: 'bigint', isNullable: false, ...extra };
}
function double(name: string): TableColumnOptions {
  return { name, type: 'double precision', isNullable: false };
}
function fk(name: string, columnNames: string[], referencedTableName: string, referencedColumnNames: string[]): TableForeignKey {
  return new TableForeignKey({ name, columnNames, referencedTableName, referencedColumnNames, onDelete: 'NO ACTION' });
}
