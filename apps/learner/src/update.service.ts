import { Inject, Injectable } from '@nestjs/common';
import { KeyStore, type AuditStore } from '@srpo/store';
import {
  LearnerMetrics,
  UpdateCycle,
  type LearnerEventsPublisher,
  type PolicyTrainer,
  type ReadyGroup,
  type TrainerCallOptions,
  type UpdateOutcome,
} from '@srpo/trainer';
import { FaultInjector } from './fault-injection';
import type { LearnerConfig } from './learner-config';
import { LearnerStateService } from './learner-state.service';
import { AUDIT_STORE, BACKEND_INFO, CLOCK, EVENTS_PUBLISHER, FAULT_INJECTOR, LEARNER_CONFIG, POLICY_TRAINER, type Clock } from './learner-tokens';
import { backendLabel } from '@srpo/kernels';

/**
 * The learner's update cycle as a NestJS provider: builds the framework-free
 * {@link UpdateCycle} of @srpo/trainer (triage, step, checkpoint, one transaction,
 * publish, retention; its TSDoc has the order and the crash guarantees) from the
 * learner's config and injected services, and forwards to it.
 */
@Injectable()
export class UpdateService {
  private readonly cycle: UpdateCycle;
  private readonly faults: FaultInjector;

  constructor(
    @Inject(LEARNER_CONFIG) config: LearnerConfig,
    @Inject(AUDIT_STORE) store: AuditStore,
    @Inject(POLICY_TRAINER) trainer: PolicyTrainer,
    @Inject(EVENTS_PUBLISHER) publisher: LearnerEventsPublisher,
    @Inject(CLOCK) clock: Clock,
    @Inject(FAULT_INJECTOR) faults: FaultInjector,
    @Inject(BACKEND_INFO) backend: { name: string },
    state: LearnerStateService,
    metrics: LearnerMetrics,
  ) {
    this.faults = faults;
    this.cycle = new UpdateCycle(
      {
        policyId: config.policyId,
        maxPolicyLag: config.maxPolicyLag,
        objective: config.objective,
        correction: config.correction,
        lr: config.lr,
        epochs: config.epochs,
        maxGradNorm: config.maxGradNorm,
        microBatchTokens: config.microBatchTokens,
        setsPerUpdate: config.setsPerUpdate,
        seed: config.seed,
        codeVersion: config.codeVersion,
        backend: backendLabel(backend),
        schemaRegistry: config.schemaRegistry,
      },
      // Content keys of sealed members, read over the audit store's own connection (docs/erasure.md).
      { store, trainer, publisher, clock, faults, state, metrics, keys: new KeyStore(store.dataSource) },
    );
  }

  /** Applies one mini-batch (serialised: concurrent calls run one after another); `options.yieldPoint`: see {@link UpdateCycle.applyBatch}. */
  applyBatch(batch: readonly ReadyGroup[], options: TrainerCallOptions = {}): Promise<UpdateOutcome> {
    const { yieldPoint } = options;
    if (this.faults.slowMicroBatchMs === 0) return this.cycle.applyBatch(batch, options);
    return this.cycle.applyBatch(batch, {
      ...options,
      yieldPoint: async () => {
        this.faults.slowPiece();
        await yieldPoint?.();
      },
    });
  }

  /** Events not yet acknowledged by the publisher, oldest first. */
  pendingPublications(): number {
    return this.cycle.pendingPublications();
  }

  /** Re-sends the committed update's events (at start; see {@link UpdateCycle.republishLatest}). */
  republishLatest(): Promise<void> {
    return this.cycle.republishLatest();
  }
}
