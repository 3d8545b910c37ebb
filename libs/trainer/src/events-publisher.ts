import type { PolicyUpdate, PolicyVersion } from '@srpo/events';

/**
 * Where the learner announces its updates. Called after the update is
 * committed to the database; a failure leaves the pair queued in the
 * update cycle (UpdateCycle) and it is sent again before the next update (at least once:
 * readers dedupe on updateId / (policyId, version)).
 */
export interface LearnerEventsPublisher {
  publish(update: PolicyUpdate, version: PolicyVersion): Promise<void>;
}

/** Keeps what was published in memory (tests, and running without Kafka). */
export class InMemoryEventsPublisher implements LearnerEventsPublisher {
  readonly published: { update: PolicyUpdate; version: PolicyVersion }[] = [];
  /** Set to make the next publish calls fail (tests of the retry path). */
  failWith?: Error;

  async publish(update: PolicyUpdate, version: PolicyVersion): Promise<void> {
    if (this.failWith) throw this.failWith;
    this.published.push({ update, version });
  }
}
