import { MigrationInterface, QueryRunner, Table, TableIndex } from 'typeorm';
import { addAppendOnlyTriggers, dropAppendOnlyTriggers } from './migration-dialect';

/** The erasure log; append-only like the audit tables. */
export const ERASURES_TABLE = 'erasures';

/**
 * Content keys for crypto-shredding, the log of erasures and the store's signing key, which signs
 * erasure certificates (docs/erasure.md). `subject_keys` is the one table whose rows are deleted,
 * on purpose: deleting a key is the erasure.
 */
export class SubjectKeys1767225600003 implements MigrationInterface {
  name = 'SubjectKeys1767225600003';

  async up(qr: QueryRunner): Promise<void> {
    await qr.createTable(
      new Table({
        name: 'subject_keys',
        columns: [
          { name: 'key_id', type: 'varchar', length: '64', isPrimary: true },
          { name: 'subject_id', type: 'varchar', length: '256' },
          { name: 'episode_id', type: 'varchar', length: '256' },
          { name: 'key_hex', type: 'varchar', length: '64' },
          { name: 'created_at_ms', type: 'bigint' },
        ],
        indices: [
          new TableIndex({ name: 'ux_subject_keys_subject_episode', columnNames: ['subject_id', 'episode_id'], isUnique: true }),
          new TableIndex({ name: 'ix_subject_keys_episode', columnNames: ['episode_id'] }),
        ],
      }),
    );
    await qr.createTable(
      new Table({
        name: ERASURES_TABLE,
        columns: [
          { name: 'erasure_id', type: 'varchar', length: '64', isPrimary: true },
          { name: 'scope', type: 'varchar', length: '16' },
          { name: 'target', type: 'varchar', length: '256' },
          { name: 'key_ids', type: 'text' },
          { name: 'erased_at_ms', type: 'bigint' },
        ],
      }),
    );
    await addAppendOnlyTriggers(qr, ERASURES_TABLE);
    await qr.createTable(
      new Table({
        name: 'signing_keys',
        columns: [
          { name: 'key_id', type: 'varchar', length: '64', isPrimary: true },
          { name: 'private_key_pem', type: 'text' },
          { name: 'public_key_pem', type: 'text' },
          { name: 'created_at_ms', type: 'bigint' },
        ],
      }),
    );
  }

  async down(qr: QueryRunner): Promise<void> {
    await qr.dropTable('signing_keys');
    await dropAppendOnlyTriggers(qr, ERASURES_TABLE);
    await qr.dropTable(ERASURES_TABLE);
    await qr.dropTable('subject_keys');
  }
}
