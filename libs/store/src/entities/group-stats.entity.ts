import 'reflect-metadata';
import { Column, Entity, PrimaryColumn } from 'typeorm';
import { bigintColumn } from '../json-columns';

/**
 * Statistics of one trained group, written in the transaction of its update
 * (so a row exists exactly when the group is in the ledger). Kept apart from
 * the ledger: they describe the group for people, they are not an input of
 * verify or replay. Append-only.
 */
@Entity({ name: 'update_group_stats' })
export class GroupStatsEntity {
  @PrimaryColumn({ name: 'policy_id', type: 'varchar', length: 200 })
  policyId!: string;

  @PrimaryColumn({ name: 'group_id', type: 'varchar', length: 512 })
  groupId!: string;

  @Column({ name: 'update_id', type: 'varchar', length: 200 })
  updateId!: string;

  @Column({ name: 'version_after', type: 'integer' })
  versionAfter!: number;

  /** The sets' workflow kind; null when they disagree. */
  @Column({ name: 'workflow_kind', type: 'varchar', length: 32, nullable: true })
  workflowKind!: string | null;

  @Column({ name: 'set_count', type: 'integer' })
  setCount!: number;

  @Column({ name: 'member_count', type: 'integer' })
  memberCount!: number;

  @Column({ name: 'reward_mean', type: 'double precision' })
  rewardMean!: number;

  @Column({ name: 'success_count', type: 'integer' })
  successCount!: number;

  /** Sets whose success flag is known (not null); the success rate is successCount / successKnown. */
  @Column({ name: 'success_known', type: 'integer' })
  successKnown!: number;

  @Column({ name: 'lag_max', type: 'integer' })
  lagMax!: number;

  @Column({ name: 'lag_mean', type: 'double precision' })
  lagMean!: number;

  @Column({ name: 'fill_latency_ms', type: 'bigint', transformer: bigintColumn })
  fillLatencyMs!: number;

  @Column({ name: 'group_event_time_ms', type: 'bigint', transformer: bigintColumn })
  groupEventTimeMs!: number;

  @Column({ name: 'created_at_ms', type: 'bigint', transformer: bigintColumn })
  createdAtMs!: number;
}
