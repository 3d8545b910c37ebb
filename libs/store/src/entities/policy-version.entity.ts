import 'reflect-metadata';
import { Column, Entity, PrimaryColumn } from 'typeorm';
import { bigintColumn } from '../json-columns';

/** One set of weights of a policy: (policyId, version) is the primary key, so a version exists once. */
@Entity({ name: 'policy_versions' })
export class PolicyVersionEntity {
  @PrimaryColumn({ name: 'policy_id', type: 'varchar', length: 200 })
  policyId!: string;

  @PrimaryColumn({ name: 'version', type: 'integer' })
  version!: number;

  @Column({ name: 'weights_hash', type: 'varchar', length: 64 })
  weightsHash!: string;

  @Column({ name: 'checkpoint_uri', type: 'text' })
  checkpointUri!: string;

  /** The update that produced this version; null for the initial weights. */
  @Column({ name: 'update_id', type: 'varchar', length: 200, nullable: true })
  updateId!: string | null;

  @Column({ name: 'created_at_ms', type: 'bigint', transformer: bigintColumn })
  createdAtMs!: number;
}
