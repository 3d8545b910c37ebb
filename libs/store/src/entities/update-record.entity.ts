import 'reflect-metadata';
import { Column, Entity, PrimaryColumn } from 'typeorm';
import { bigintColumn, jsonColumn, type JsonValue } from '../json-columns';

/**
 * The audit record of one applied update. Append-only: the store exposes no
 * way to change or delete a row, and database triggers refuse UPDATE and
 * DELETE (see the append-only migration).
 */
@Entity({ name: 'update_records' })
export class UpdateRecordEntity {
  @PrimaryColumn({ name: 'update_id', type: 'varchar', length: 200 })
  updateId!: string;

  @Column({ name: 'policy_id', type: 'varchar', length: 200 })
  policyId!: string;

  @Column({ name: 'version_before', type: 'integer' })
  versionBefore!: number;

  @Column({ name: 'version_after', type: 'integer' })
  versionAfter!: number;

  @Column({ name: 'weights_hash_before', type: 'varchar', length: 64 })
  weightsHashBefore!: string;

  @Column({ name: 'weights_hash_after', type: 'varchar', length: 64 })
  weightsHashAfter!: string;

  /** Objective config, learning rate, epochs, ... as JSON. */
  @Column({ name: 'hyperparameters', type: 'text', transformer: jsonColumn })
  hyperparameters!: Record<string, JsonValue>;

  @Column({ name: 'seed', type: 'bigint', transformer: bigintColumn })
  seed!: number;

  @Column({ name: 'backend', type: 'varchar', length: 64 })
  backend!: string;

  @Column({ name: 'code_version', type: 'varchar', length: 200 })
  codeVersion!: string;

  @Column({ name: 'loss', type: 'double precision' })
  loss!: number;

  @Column({ name: 'grad_norm', type: 'double precision' })
  gradNorm!: number;

  @Column({ name: 'diagnostics', type: 'text', transformer: jsonColumn })
  diagnostics!: Record<string, number>;

  @Column({ name: 'wall_time_ms', type: 'integer' })
  wallTimeMs!: number;

  @Column({ name: 'checkpoint_uri', type: 'text' })
  checkpointUri!: string;

  /** Epoch ms supplied by the caller (never a database default), so replays are deterministic. */
  @Column({ name: 'committed_at_ms', type: 'bigint', transformer: bigintColumn })
  committedAtMs!: number;

  /** `committedAtMs` as ISO-8601 UTC, for people reading the table with SQL. */
  @Column({ name: 'created_at', type: 'varchar', length: 32 })
  createdAt!: string;
}
