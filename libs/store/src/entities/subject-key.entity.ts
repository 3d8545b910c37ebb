import 'reflect-metadata';
import { Column, Entity, Index, PrimaryColumn } from 'typeorm';
import { bigintColumn } from '../json-columns';

/**
 * A content key (docs/erasure.md): the AES-256 key that seals the user content of one data
 * subject's events in one episode. The only table whose rows are deleted: deleting a row is
 * erasure, since every copy of the content (topics, sets, groups, changelogs) stays sealed
 * under it. `subject_id` is '' for events that name no subject (their episode can still be erased).
 */
@Entity({ name: 'subject_keys' })
@Index('ux_subject_keys_subject_episode', ['subjectId', 'episodeId'], { unique: true })
export class SubjectKeyEntity {
  @PrimaryColumn({ name: 'key_id', type: 'varchar', length: 64 })
  keyId!: string;

  @Column({ name: 'subject_id', type: 'varchar', length: 256 })
  subjectId!: string;

  @Column({ name: 'episode_id', type: 'varchar', length: 256 })
  episodeId!: string;

  /** The 32-byte key, hex. */
  @Column({ name: 'key_hex', type: 'varchar', length: 64 })
  keyHex!: string;

  @Column({ name: 'created_at_ms', type: 'bigint', transformer: bigintColumn })
  createdAtMs!: number;
}
