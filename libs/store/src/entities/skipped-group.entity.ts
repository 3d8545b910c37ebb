import 'reflect-metadata';
import { Column, Entity, PrimaryColumn } from 'typeorm';
import { bigintColumn } from '../json-columns';

/**
 * A group the learner consumed but did not train on (stale, malformed, ...),
 * so nothing is ever dropped silently. (policyId, groupId) is the primary key:
 * a redelivered skipped group is recognised and not recorded twice.
 */
@Entity({ name: 'skipped_groups' })
export class SkippedGroupEntity {
  @PrimaryColumn({ name: 'policy_id', type: 'varchar', length: 200 })
  policyId!: string;

  @PrimaryColumn({ name: 'group_id', type: 'varchar', length: 512 })
  groupId!: string;

  /** A short machine-readable reason (`stale`, `future-version`, ...). */
  @Column({ name: 'reason', type: 'varchar', length: 64 })
  reason!: string;

  /** Human-readable detail (the offending member, the validation message). */
  @Column({ name: 'detail', type: 'text', nullable: true })
  detail!: string | null;

  /** Current version minus the oldest member's version, when versions apply. */
  @Column({ name: 'lag', type: 'integer', nullable: true })
  lag!: number | null;

  /** The policy version the learner was at when it skipped the group. */
  @Column({ name: 'policy_version', type: 'integer' })
  policyVersion!: number;

  @Column({ name: 'group_topic', type: 'varchar', length: 255 })
  groupTopic!: string;

  @Column({ name: 'group_partition', type: 'integer' })
  groupPartition!: number;

  @Column({ name: 'group_offset', type: 'bigint', transformer: bigintColumn })
  groupOffset!: number;

  @Column({ name: 'created_at_ms', type: 'bigint', transformer: bigintColumn })
  createdAtMs!: number;
}
