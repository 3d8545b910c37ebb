import type { SchemaRegistryClient, AdvantageGroup, KafkaCoordinates } from '@srpo/events';
import type { CorrectionConfig, ObjectiveConfig } from '@srpo/srpo';
import type { PolicyState } from './committed-policy-state';
import type { LearnerMetrics } from './learner-metrics';

/*
 * What the update cycle ({@link UpdateCycle}) is given: its options and the collaborators
 * it drives, as interfaces. The learner app wires them from its config and NestJS
 * providers; specs, replays and offline runs can pass their own.
 */

/** A decoded AdvantageGroup with where it was read. */
export interface ReadyGroup {
  group: AdvantageGroup;
  source: KafkaCoordinates;
}

/** Step boundaries of an update at which a test can make the process crash (SRPO_CRASH_AT). */
export type UpdateBoundary = 'after-step' | 'after-checkpoint' | 'after-db' | 'after-publish';

/** The update cycle's settings (the learner's configuration, typed). */
export interface UpdateCycleOptions {
  policyId: string;
  /** A group with a member older than current version − lag is skipped as stale. */
  maxPolicyLag: number;
  objective: ObjectiveConfig;
  /** Engine/learner mismatch correction and KL penalty (docs/objective.md, section 7); absent: none. Recorded with each update that uses one. */
  correction?: CorrectionConfig;
  lr: number;
  epochs: number;
  maxGradNorm: number;
  microBatchTokens: number;
  setsPerUpdate: number;
  /** Recorded with every update. */
  seed: number;
  /** Recorded with every update. */
  codeVersion: string;
  /** Recorded with every update: the backend that computed the steps (e.g. `backendLabel(initTfBackend(...))`). */
  backend: string;
  /** Set when members are Confluent-framed: writer schemas are loaded by id from it. */
  schemaRegistry?: SchemaRegistryClient;
}

/** The committed policy state the cycle reads, advances and rolls back ({@link CommittedPolicyState}). */
export interface UpdateCycleState {
  current(): PolicyState;
  /** Called once an update is committed, with the update that produced `next`. */
  advance(next: PolicyState, updateId?: string): void;
  /** Puts the committed weights back into the trainer after a failed update. */
  rollback(): Promise<void>;
  /** Deletes the checkpoints retention no longer keeps; never fails the committed update. */
  pruneCheckpoints(): Promise<void>;
  checkpointDir(version: number): string;
  checkpointUri(version: number): string;
  /** The update that produced the committed version; undefined at version 0. */
  committedUpdateId(): string | undefined;
}

/** The metrics the cycle moves. */
export type UpdateCycleMetrics = Pick<
  LearnerMetrics,
  'updates' | 'groupsConsumed' | 'groupsSkipped' | 'groupsRedelivered' | 'loss' | 'gradNorm' | 'clipFrac' | 'policyLag' | 'mismatch' | 'setsErased'
>;

/** Called at every step boundary of an update (test-only fault injection; a no-op in production). */
export interface UpdateFaultPoints {
  reached(point: UpdateBoundary, fields?: Record<string, unknown>): void;
}
