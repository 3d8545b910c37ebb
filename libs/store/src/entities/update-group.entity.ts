import 'reflect-metadata';
import { Column, Entity, PrimaryColumn } from 'typeorm';
import { bigintColumn, jsonColumn } from '../json-columns';
import type { SetSources } from '../audit-types';

/**
 * The ledger: one row per advantage group an update consumed. The primary key
 * (policyId, groupId) is what guarantees a group is never applied twice.
 * Append-only, like the update records.
 */
@Entity({ name: 'update_groups' })
export class UpdateGroupEntity {
  @PrimaryColumn({ name: 'policy_id', type: 'varchar', length: 200 })
  policyId!: string;

  @PrimaryColumn({ name: 'group_id', type: 'varchar', length: 512 })
  groupId!: string;

  @Column({ name: 'update_id', type: 'varchar', length: 200 })
  updateId!: string;

  /** Index of the group within its update (the order of PolicyUpdate.groupIds). */
  @Column({ name: 'position', type: 'integer' })
  position!: number;

  @Column({ name: 'group_key', type: 'text' })
  groupKey!: string;

  /** Where the AdvantageGroup event itself was read. */
  @Column({ name: 'group_topic', type: 'varchar', length: 255 })
  groupTopic!: string;

  @Column({ name: 'group_partition', type: 'integer' })
  groupPartition!: number;

  @Column({ name: 'group_offset', type: 'bigint', transformer: bigintColumn })
  groupOffset!: number;

  @Column({ name: 'set_ids', type: 'text', transformer: jsonColumn })
  setIds!: string[];

  /** One advantage per set, in `setIds` order. */
  @Column({ name: 'advantages', type: 'text', transformer: jsonColumn })
  advantages!: number[];

  /** Coordinates of every source event of every set (transition, outcome, outputs, the set itself). */
  @Column({ name: 'sources', type: 'text', transformer: jsonColumn })
  sources!: SetSources[];

  /** The group's advantage settings as the materializer wrote them (JSON text, verbatim). */
  @Column({ name: 'objective_config', type: 'text' })
  objectiveConfig!: string;

  @Column({ name: 'created_at_ms', type: 'bigint', transformer: bigintColumn })
  createdAtMs!: number;
}
