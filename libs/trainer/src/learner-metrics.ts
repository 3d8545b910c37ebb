import { Counter, Gauge, Registry } from 'prom-client';

/**
 * The learner's Prometheus metrics, in a registry of its own (not prom-client's
 * global one) so several app instances in one process (tests) never collide.
 * Framework-free: the learner app provides it as a class provider (no constructor
 * dependencies, so no decorator is needed).
 */
export class LearnerMetrics {
  readonly registry = new Registry();
  /** Updates committed. */
  readonly updates = new Counter({ name: 'learner_updates_total', help: 'Updates committed to the audit store', registers: [this.registry] });
  /** Groups trained on (in the ledger of a committed update). */
  readonly groupsConsumed = new Counter({
    name: 'learner_groups_consumed_total',
    help: 'Advantage groups applied by committed updates',
    registers: [this.registry],
  });
  readonly groupsSkipped = new Counter({
    name: 'learner_groups_skipped_total',
    help: 'Advantage groups consumed without training on them, by reason',
    labelNames: ['reason'] as const,
    registers: [this.registry],
  });
  /** Sets left out of their group because their content was erased (docs/erasure.md). */
  readonly setsErased = new Counter({
    name: 'learner_sets_erased_total',
    help: 'Active sets not trained on because the content key of a member was deleted by an erasure',
    registers: [this.registry],
  });
  readonly groupsRedelivered = new Counter({
    name: 'learner_groups_redelivered_total',
    help: 'Redelivered advantage groups recognised as already applied or skipped',
    registers: [this.registry],
  });
  readonly loss = new Gauge({ name: 'learner_loss', help: 'Objective loss of the last update', registers: [this.registry] });
  readonly gradNorm = new Gauge({ name: 'learner_grad_norm', help: 'Pre-clip global gradient norm of the last update', registers: [this.registry] });
  readonly clipFrac = new Gauge({
    name: 'learner_clip_frac',
    help: 'Share of units whose clip was active in the last update, by side',
    labelNames: ['side'] as const,
    registers: [this.registry],
  });
  readonly policyLag = new Gauge({
    name: 'learner_policy_lag',
    help: 'Largest version lag (current version minus a member version) among the groups of the last update',
    registers: [this.registry],
  });
  /** `mismatch/*` and `losses/kl` of the last update that computed them (docs/objective.md, section 7), by diagnostic name. */
  readonly mismatch = new Gauge({
    name: 'learner_mismatch',
    help: 'Engine/learner mismatch diagnostics (mismatch/log_ratio_mean, mismatch/k3, mismatch/truncated_frac, mismatch/masked_frac, ...) and losses/kl of the last update',
    labelNames: ['stat'] as const,
    registers: [this.registry],
  });
  readonly checkpointsPruned = new Counter({
    name: 'learner_checkpoints_pruned_total',
    help: 'Checkpoint directories deleted by retention (SRPO_CHECKPOINT_KEEP_LAST / SRPO_CHECKPOINT_KEEP_EVERY)',
    registers: [this.registry],
  });
  readonly checkpointsRetained = new Gauge({
    name: 'learner_checkpoints_retained',
    help: 'Checkpoint directories of the policy left on disk after the last pruning',
    registers: [this.registry],
  });
  readonly policyVersion = new Gauge({ name: 'learner_policy_version', help: 'Current policy version', registers: [this.registry] });

  async render(): Promise<{ contentType: string; body: string }> {
    return { contentType: this.registry.contentType, body: await this.registry.metrics() };
  }
}
