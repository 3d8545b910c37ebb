import * as path from 'path';
import { pathToFileURL } from 'url';
import { ErrorCode, errorMessage, Logger, SrpoError } from '@srpo/core';
import { CheckpointStore } from '@srpo/policy';
import type { AuditStore } from '@srpo/store';
import { checkpointsToPrune, removeCheckpointDirs, type CheckpointRetention } from './checkpoint-retention';
import type { LearnerMetrics } from './learner-metrics';
import type { PolicyTrainer } from './policy-trainer';

/** The weights the learner holds, as committed in the audit store. */
export interface PolicyState {
  policyId: string;
  version: number;
  weightsHash: string;
  checkpointUri: string;
}

/** What {@link CommittedPolicyState} needs of the learner's configuration. */
export interface CommittedPolicyStateOptions {
  policyId: string;
  /** Agent roles recorded for the policy when it is first registered. */
  policyRoles: string[];
  /** Seed of version 0 (unless `modelDir` gives it). */
  seed: number;
  /** A Hugging Face model directory as version 0 (named in the error when it no longer matches). */
  modelDir?: string;
  /** Absolute; checkpoints are `<dir>/<policyId>/v<version>/`. */
  checkpointDir: string;
  checkpointRetention: CheckpointRetention;
}

/** The metrics the state moves. */
export type CommittedPolicyStateMetrics = Pick<LearnerMetrics, 'policyVersion' | 'checkpointsPruned' | 'checkpointsRetained'>;

/**
 * Owns the learner's current policy state and brings it back on start.
 *
 * The audit store is the source of truth: a checkpoint counts only once the
 * update that produced it is recorded. A checkpoint directory newer than the
 * latest record is the leftover of a crash between writing the checkpoint and
 * committing the record; it is ignored (and overwritten by the next update).
 *
 * Framework-free: the learner app's `LearnerStateService` is this class with its
 * collaborators injected by NestJS.
 */
export class CommittedPolicyState {
  private readonly log = new Logger('learner-state');
  private readonly checkpoints: CheckpointStore;
  private state?: PolicyState;
  /** The update that produced the committed version (undefined at version 0). */
  private updateId?: string;

  constructor(
    private readonly config: CommittedPolicyStateOptions,
    private readonly store: AuditStore,
    private readonly trainer: PolicyTrainer,
    private readonly clock: () => number,
    private readonly metrics: CommittedPolicyStateMetrics,
  ) {
    this.checkpoints = new CheckpointStore(config.checkpointDir);
  }

  /**
   * Loads the newest checkpoint that has an update record, verifying its
   * weights hash against the record, or creates version 0 from SRPO_SEED (and
   * registers the policy) when no update exists.
   *
   * @throws SrpoError INTEGRITY_FAILED when the recorded checkpoint is missing or
   *   does not match its record, or the seed no longer gives the registered version 0.
   */
  async restore(): Promise<PolicyState> {
    const { policyId } = this.config;
    const latest = await this.store.latestUpdate(policyId);
    const onDisk = await this.checkpoints.versions(policyId);
    const recorded = latest?.versionAfter ?? 0;
    const leftovers = onDisk.filter((v) => v > recorded);
    if (leftovers.length > 0) {
      this.log.warn('ignoring checkpoints without an update record (an update was interrupted before its commit)', {
        policyId,
        versions: leftovers,
        recordedVersion: recorded,
      });
    }
    let state: PolicyState;
    if (latest) {
      const info = await this.loadVerified(latest.versionAfter, latest.weightsHashAfter);
      state = { policyId, version: info.version, weightsHash: info.weightsHash, checkpointUri: latest.checkpointUri };
      const policy = await this.store.getPolicy(policyId);
      if (policy && policy.currentVersion !== latest.versionAfter) {
        throw new SrpoError(
          ErrorCode.INTEGRITY_FAILED,
          `policy ${policyId} is at version ${policy.currentVersion} but its latest update produced ${latest.versionAfter}`,
        );
      }
    } else {
      state = await this.initialState();
    }
    this.state = state;
    this.updateId = latest?.updateId;
    this.metrics.policyVersion.set(state.version);
    this.log.info('policy restored', { ...state });
    return { ...state };
  }

  /** The committed state; CONFLICT before {@link restore}. */
  current(): PolicyState {
    if (!this.state) throw new SrpoError(ErrorCode.CONFLICT, 'learner state not restored yet');
    return { ...this.state };
  }

  /**
   * The id of the update that produced the committed version, as {@link restore} read it
   * (or {@link advance} was told); undefined at version 0. Lets the start re-send that
   * update's events without reading the latest update from the store a second time.
   */
  committedUpdateId(): string | undefined {
    this.current();
    return this.updateId;
  }

  /** Called once an update is committed. */
  advance(next: PolicyState, updateId?: string): void {
    const cur = this.current();
    if (next.version !== cur.version + 1) {
      throw new SrpoError(ErrorCode.INTEGRITY_FAILED, `state must advance by one version (${cur.version} -> ${next.version})`);
    }
    this.state = { ...next };
    this.updateId = updateId;
    this.metrics.policyVersion.set(next.version);
  }

  /**
   * Puts the committed weights back into the trainer after a failed update
   * (its step may have changed the weights before something later failed).
   */
  async rollback(): Promise<void> {
    const cur = this.current();
    await this.loadVerified(cur.version, cur.weightsHash);
    this.log.warn('weights rolled back to the committed version', { policyId: cur.policyId, version: cur.version });
  }

  /**
   * Deletes the checkpoints retention no longer keeps (see
   * {@link checkpointsToPrune}), judged against the committed version: call it
   * only once an update is committed (or after {@link restore}). The committed
   * version, which restart and rollback load, is always kept; so is anything
   * newer. A failure is logged and left for the next call, which lists the
   * directory again: the update it follows is committed whatever happens here.
   */
  async pruneCheckpoints(): Promise<void> {
    const { policyId, checkpointRetention } = this.config;
    if (checkpointRetention.keepLast === 0) return;
    const committed = this.current().version;
    try {
      const onDisk = await this.checkpoints.versions(policyId);
      const decision = checkpointsToPrune(onDisk, committed, checkpointRetention);
      const result = await removeCheckpointDirs(path.dirname(this.checkpointDir(0)), decision.prune);
      this.metrics.checkpointsPruned.inc(result.removed.length);
      this.metrics.checkpointsRetained.set(decision.keep.length);
      if (decision.prune.length > 0 || result.sweptLeftovers > 0) {
        this.log.debug('checkpoints pruned', {
          policyId,
          committedVersion: committed,
          removed: result.removed.length,
          alreadyMissing: result.missing.length,
          sweptLeftovers: result.sweptLeftovers,
          kept: decision.keep.length,
        });
      }
    } catch (e) {
      this.log.warn('pruning checkpoints failed; retried after the next update', { policyId, committedVersion: committed, error: errorMessage(e) });
    }
  }

  checkpointDir(version: number): string {
    return path.resolve(this.checkpoints.dirFor(this.config.policyId, version));
  }

  checkpointUri(version: number): string {
    return pathToFileURL(this.checkpointDir(version)).href;
  }

  private async loadVerified(version: number, expectedHash: string): Promise<{ version: number; weightsHash: string }> {
    const dir = this.checkpointDir(version);
    let info;
    try {
      info = await this.trainer.load(dir);
    } catch (e) {
      if (e instanceof SrpoError && e.code === ErrorCode.NOT_FOUND) {
        throw new SrpoError(ErrorCode.INTEGRITY_FAILED, `version ${version} of ${this.config.policyId} is recorded but its checkpoint ${dir} is missing`, {
          cause: e,
        });
      }
      throw e;
    }
    if (info.version !== version || info.weightsHash !== expectedHash) {
      throw new SrpoError(
        ErrorCode.INTEGRITY_FAILED,
        `checkpoint ${dir} holds version ${info.version} with weights ${info.weightsHash}; the audit record says version ${version} with ${expectedHash}`,
      );
    }
    return info;
  }

  private async initialState(): Promise<PolicyState> {
    const { policyId, seed, policyRoles } = this.config;
    await this.trainer.init(seed);
    const weightsHash = await this.trainer.weightsHash();
    const registered = await this.store.getVersion(policyId, 0);
    if (registered && registered.weightsHash !== weightsHash) {
      throw new SrpoError(
        ErrorCode.INTEGRITY_FAILED,
        `policy ${policyId} was registered with initial weights ${registered.weightsHash}, but ${this.config.modelDir ? `SRPO_MODEL_DIR=${this.config.modelDir} gives` : `SRPO_SEED=${seed} and SRPO_MODEL_CONFIG give`} ${weightsHash}`,
      );
    }
    const dir = this.checkpointDir(0);
    const checkpointUri = this.checkpointUri(0);
    // Always rewritten: version 0 is a pure function of the seed, and this replaces whatever an earlier run left there.
    try {
      await this.trainer.save(dir);
    } catch (e) {
      throw new SrpoError(ErrorCode.UNAVAILABLE, `cannot write the initial checkpoint ${dir}: ${errorMessage(e)}`, { retriable: true, cause: e });
    }
    if (!registered) {
      await this.store.ensurePolicy(policyId, policyRoles, { version: 0, weightsHash, checkpointUri, createdAtMs: this.clock() });
    }
    return { policyId, version: 0, weightsHash, checkpointUri: registered?.checkpointUri ?? checkpointUri };
  }
}
