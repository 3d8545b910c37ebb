import { Inject, Injectable, OnApplicationBootstrap, OnApplicationShutdown } from '@nestjs/common';
import { errorMessage, Logger } from '@srpo/core';
import type { AuditStore } from '@srpo/store';
import type { LearnerEventsPublisher, PolicyTrainer } from '@srpo/trainer';
import type { GroupSource } from './group-source';
import { LearnerStateService } from './learner-state.service';
import { AUDIT_STORE, EVENTS_PUBLISHER, GROUP_SOURCE, POLICY_TRAINER } from './learner-tokens';
import { UpdateService } from './update.service';

/**
 * Start and stop order. Start: restore the committed policy, prune
 * checkpoints retention no longer keeps, re-send the
 * latest update's events, then start consuming. Stop: stop consuming (the
 * batch in flight finishes), then release the publisher, the store and the
 * model.
 */
@Injectable()
export class LearnerLifecycle implements OnApplicationBootstrap, OnApplicationShutdown {
  private readonly log = new Logger('learner');

  constructor(
    private readonly state: LearnerStateService,
    private readonly updates: UpdateService,
    @Inject(GROUP_SOURCE) private readonly source: GroupSource,
    @Inject(EVENTS_PUBLISHER) private readonly publisher: LearnerEventsPublisher,
    @Inject(AUDIT_STORE) private readonly store: AuditStore,
    @Inject(POLICY_TRAINER) private readonly trainer: PolicyTrainer,
  ) {}

  async onApplicationBootstrap(): Promise<void> {
    await this.state.restore();
    // A backlog from a run without retention (or a crash mid-prune) is cleared before consuming, not spread over the next updates.
    await this.state.pruneCheckpoints();
    await this.updates.republishLatest();
    // The update yields to the consumer between micro-batches: heartbeats leave while it computes.
    await this.source.start(async (batch, context) => {
      await this.updates.applyBatch(batch, { yieldPoint: () => context.keepAlive() });
    });
    this.log.info('learner started', { ...this.state.current() });
  }

  async onApplicationShutdown(signal?: string): Promise<void> {
    this.log.info('learner stopping', { signal });
    const steps: [string, () => Promise<void> | void][] = [
      ['group source', () => this.source.stop()],
      ['publisher', () => (hasDisconnect(this.publisher) ? this.publisher.disconnect() : undefined)],
      ['audit store', () => this.store.close()],
      ['policy', () => this.trainer.dispose()],
    ];
    for (const [what, step] of steps) {
      try {
        await step();
      } catch (e) {
        this.log.warn('shutdown step failed', { what, error: errorMessage(e) });
      }
    }
  }
}

function hasDisconnect(p: LearnerEventsPublisher): p is LearnerEventsPublisher & { disconnect(): Promise<void> } {
  return typeof (p as { disconnect?: unknown }).disconnect === 'function';
}
