import { Inject, Injectable } from '@nestjs/common';
import type { AuditStore } from '@srpo/store';
import { CommittedPolicyState, LearnerMetrics, type PolicyTrainer } from '@srpo/trainer';
import type { LearnerConfig } from './learner-config';
import { AUDIT_STORE, CLOCK, LEARNER_CONFIG, POLICY_TRAINER, type Clock } from './learner-tokens';

/**
 * The learner's committed policy state ({@link CommittedPolicyState} of @srpo/trainer:
 * restore on start, advance, rollback, checkpoint retention), with its collaborators
 * injected by NestJS.
 */
@Injectable()
export class LearnerStateService extends CommittedPolicyState {
  constructor(
    @Inject(LEARNER_CONFIG) config: LearnerConfig,
    @Inject(AUDIT_STORE) store: AuditStore,
    @Inject(POLICY_TRAINER) trainer: PolicyTrainer,
    @Inject(CLOCK) clock: Clock,
    metrics: LearnerMetrics,
  ) {
    super(config, store, trainer, clock, metrics);
  }
}
