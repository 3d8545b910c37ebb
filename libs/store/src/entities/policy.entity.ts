import 'reflect-metadata';
import { Column, Entity, PrimaryColumn } from 'typeorm';
import { bigintColumn, jsonColumn } from '../json-columns';

/** A trained policy and the version the learner last committed for it. */
@Entity({ name: 'policies' })
export class PolicyEntity {
  @PrimaryColumn({ name: 'policy_id', type: 'varchar', length: 200 })
  policyId!: string;

  /** Agent roles that act with this policy (JSON array of strings). */
  @Column({ name: 'roles', type: 'text', transformer: jsonColumn })
  roles!: string[];

  @Column({ name: 'current_version', type: 'integer' })
  currentVersion!: number;

  /** Epoch ms supplied by the caller, so a replay writes identical rows. */
  @Column({ name: 'created_at_ms', type: 'bigint', transformer: bigintColumn })
  createdAtMs!: number;
}
