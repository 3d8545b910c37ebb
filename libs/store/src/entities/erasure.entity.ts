import 'reflect-metadata';
import { Column, Entity, PrimaryColumn } from 'typeorm';
import { bigintColumn } from '../json-columns';

/** One erasure (`srpo erase`), append-only: what was erased, when, and how many keys it deleted. */
@Entity({ name: 'erasures' })
export class ErasureEntity {
  @PrimaryColumn({ name: 'erasure_id', type: 'varchar', length: 64 })
  erasureId!: string;

  /** `subject` or `episode`. */
  @Column({ name: 'scope', type: 'varchar', length: 16 })
  scope!: string;

  /** The subject id or episode id erased. */
  @Column({ name: 'target', type: 'varchar', length: 256 })
  target!: string;

  /** The ids of the deleted keys, a JSON array (ids, never keys). */
  @Column({ name: 'key_ids', type: 'text' })
  keyIds!: string;

  @Column({ name: 'erased_at_ms', type: 'bigint', transformer: bigintColumn })
  erasedAtMs!: number;
}
