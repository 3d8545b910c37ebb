import { createHash } from 'crypto';
import { ErrorCode, errorMessage, Logger, SrpoError } from '@srpo/core';
import { EventCodec, type ContentKeySource, type PolicyUpdate, type PolicyVersion } from '@srpo/events';
import { groupWithout } from '@srpo/materializer';
import { eventsFor, groupStatsFromGroup, ledgerEntryFromGroup, type AuditStore, type SkippedGroupInput, type UpdateDetail } from '@srpo/store';
import type { LearnerEventsPublisher } from './events-publisher';
import type { PolicyTrainer, SetProbe, StepResult, TrainerCallOptions, TrainingSet } from './policy-trainer';
import { RunRecorder } from './run-recorder';
import { erasedSetIds, fetchMemberKeys, prefetchMemberSchemas, type ContentKeys } from './training-sets';
import type { LearnerHyperparameters } from './update-hyperparameters';
import type { ReadyGroup, UpdateCycleMetrics, UpdateCycleOptions, UpdateCycleState, UpdateFaultPoints } from './update-cycle-ports';
import { isFiniteStep, nonFiniteLoss, pickTemperature, triageGroup, type Candidate, type SkippedGroup, type SkippedGroupInfo } from './update-triage';

/** The collaborators of an {@link UpdateCycle}. */
export interface UpdateCycleDeps {
  store: AuditStore;
  trainer: PolicyTrainer;
  publisher: LearnerEventsPublisher;
  /** Epoch ms recorded with updates, skips and events (tests and replays control it). */
  clock: () => number;
  faults: UpdateFaultPoints;
  state: UpdateCycleState;
  metrics: UpdateCycleMetrics;
  /** Content keys of sealed members (the store's KeyStore); without it, sealed sets count as erased. */
  keys?: ContentKeySource;
}

/** What one call of {@link UpdateCycle.applyBatch} did. */
export interface UpdateOutcome {
  /** The committed update; undefined when no group was trained on. */
  update?: UpdateDetail;
  /** Groups recorded as skipped by this call. */
  skipped: SkippedGroupInfo[];
  /** Groups already applied or skipped earlier (redeliveries, duplicates within the batch). */
  redelivered: string[];
  /** Groups of other policies, ignored (another learner's input). */
  foreign: string[];
}

/**
 * Applies mini-batches of ready advantage groups as SRPO updates, one update
 * per call, in this order:
 *
 * 1. triage: groups of other policies are ignored; groups already in the
 *    ledger (or already skipped) are redeliveries and change nothing; stale,
 *    future-version and malformed groups are recorded as skipped with their
 *    reason (never silently dropped);
 * 2. the SRPO step on the rest (ratios against the recorded behaviour log-probs); a
 *    non-finite step is rolled back, the groups of sets that are non-finite on their own
 *    are skipped as `non-finite-set`, and the rest is stepped again (docs/objective.md);
 * 3. the checkpoint of the new version (its own directory);
 * 4. one database transaction: update record, ledger rows, policy version;
 * 5. PolicyUpdate and PolicyVersion events;
 * 6. checkpoint retention (SRPO_CHECKPOINT_KEEP_LAST / _KEEP_EVERY): older
 *    checkpoints retention no longer keeps are deleted; a failure there is
 *    logged and never fails the committed update.
 *
 * The caller (the consumer runner) commits the batch's offsets after the
 * returned promise resolves. A crash before step 4 leaves no record: the
 * restart restores the previous version and the redelivered batch is applied
 * again. A crash after step 4 leaves the groups in the ledger: their
 * redelivery is recognised, and the events are published again at start
 * (at least once). SRPO_CRASH_AT kills the process at each boundary for tests
 * (`faults.reached`).
 *
 * Framework-free: the learner app's `UpdateService` builds one from its config and
 * providers and forwards to it; the collaborators are interfaces ({@link UpdateCycleDeps}).
 */
export class UpdateCycle {
  // The learner's log lines keep the name they have always had.
  private readonly log = new Logger('update-service');
  private tail: Promise<unknown> = Promise.resolve();
  private readonly pending: { update: PolicyUpdate; version: PolicyVersion }[] = [];
  /** Set when a failed update could not be rolled back: the weights in memory are then unknown. */
  private broken?: SrpoError;
  private readonly codec: EventCodec;
  private readonly recorder: RunRecorder;
  private readonly store: AuditStore;
  private readonly trainer: PolicyTrainer;
  private readonly publisher: LearnerEventsPublisher;
  private readonly clock: () => number;
  private readonly faults: UpdateFaultPoints;
  private readonly state: UpdateCycleState;
  private readonly metrics: UpdateCycleMetrics;
  private readonly keys?: ContentKeySource;

  constructor(
    private readonly config: UpdateCycleOptions,
    deps: UpdateCycleDeps,
  ) {
    this.store = deps.store;
    this.trainer = deps.trainer;
    this.publisher = deps.publisher;
    this.clock = deps.clock;
    this.faults = deps.faults;
    this.state = deps.state;
    this.metrics = deps.metrics;
    this.keys = deps.keys;
    this.codec = new EventCodec(undefined, { registry: config.schemaRegistry });
    this.recorder = new RunRecorder({ store: this.store, backend: config.backend, codeVersion: config.codeVersion });
  }

  /**
   * Applies one mini-batch (serialised: concurrent calls run one after another). `options.yieldPoint`
   * is awaited between the step's micro-batches, passes and epochs (and between probed sets): the
   * consumer's heartbeats while the update computes. It changes nothing the update computes.
   */
  applyBatch(batch: readonly ReadyGroup[], options: TrainerCallOptions = {}): Promise<UpdateOutcome> {
    const run = this.tail.then(() => this.apply(batch, options));
    this.tail = run.catch(() => undefined);
    return run;
  }

  /** Events not yet acknowledged by the publisher, oldest first. */
  pendingPublications(): number {
    return this.pending.length;
  }

  /**
   * Queues the latest committed update's events again and tries to send them.
   * Called at start, after the state is restored: a crash between commit and publish
   * must not lose them. The committed update is the one the restored state names (the
   * latest update is read once, by the restore). A failure is logged and kept queued;
   * the next batch sends it first.
   */
  async republishLatest(): Promise<void> {
    const updateId = this.state.committedUpdateId();
    if (updateId === undefined) return;
    const detail = await this.store.getUpdate(updateId);
    this.pending.push(eventsFor(detail));
    try {
      await this.flushPending();
    } catch (e) {
      this.log.warn('republishing the latest update failed; it stays queued', { updateId, error: errorMessage(e) });
    }
  }

  /**
   * The group without its sets of erased content (docs/erasure.md), renormalized as the group
   * stage would have emitted it from the others, so one user's erasure never voids the sets of
   * the others beside it; the ledger records the sets trained on. null when none is left.
   */
  private withoutErasedSets(r: ReadyGroup, keys: ContentKeys): ReadyGroup | null {
    const erased = erasedSetIds(this.codec, r.group, keys);
    if (erased.size === 0) return r;
    this.metrics.setsErased.inc(erased.size);
    this.log.info('sets of erased content left out', { groupId: r.group.groupId, sets: erased.size, ...r.source });
    const group = groupWithout(r.group, erased);
    return group === null ? null : { ...r, group };
  }

  private async apply(batch: readonly ReadyGroup[], options: TrainerCallOptions): Promise<UpdateOutcome> {
    if (this.broken) throw this.broken;
    await this.flushPending();
    const { policyId, maxPolicyLag } = this.config;
    const before = this.state.current();
    const outcome: UpdateOutcome = { skipped: [], redelivered: [], foreign: [] };

    // 1. Triage.
    const ours: ReadyGroup[] = [];
    const seen = new Set<string>();
    for (const r of batch) {
      if (r.group.policyId !== policyId) outcome.foreign.push(r.group.groupId);
      else if (seen.has(r.group.groupId)) outcome.redelivered.push(r.group.groupId);
      else {
        seen.add(r.group.groupId);
        ours.push(r);
      }
    }
    const ids = ours.map((r) => r.group.groupId);
    await prefetchMemberSchemas(
      this.codec,
      ours.map((r) => r.group),
    );
    const [applied, skippedBefore, keys] = await Promise.all([
      this.store.isGroupApplied(policyId, ids),
      this.store.skippedGroupIds(policyId, ids),
      fetchMemberKeys(
        this.codec,
        this.keys,
        ours.map((r) => r.group),
      ),
    ]);
    const skips: SkippedGroup[] = [];
    const candidates: Candidate[] = [];
    const usedIds = new Set<string>();
    for (const r of ours) {
      const id = r.group.groupId;
      if (applied.has(id) || skippedBefore.has(id)) {
        outcome.redelivered.push(id);
        continue;
      }
      const ready = this.withoutErasedSets(r, keys);
      if (ready === null) {
        skips.push({ ready: r, info: { groupId: id, reason: 'erased', detail: 'every set holds erased content', lag: null } });
        continue;
      }
      const verdict = triageGroup(this.codec, this.trainer, policyId, ready.group, before.version, maxPolicyLag, usedIds, keys);
      if ('reason' in verdict) skips.push({ ready, info: { groupId: id, ...verdict } });
      else candidates.push({ ready, ...verdict });
    }
    // One temperature per update: keep the one most sets were sampled at (ties: the lower).
    let eligible = pickTemperature(candidates, skips);
    await this.recordSkips(skips, before.version, outcome);
    if (outcome.redelivered.length > 0) this.metrics.groupsRedelivered.inc(outcome.redelivered.length);
    if (eligible.length === 0) return outcome;

    // 2. Step (a non-finite one: the offending sets' groups are isolated, the rest is stepped again).
    const started = Date.now();
    const stepped = await this.finiteStep(eligible, before.version, outcome, options);
    if (!stepped) return outcome;
    const { result, trained } = stepped;
    eligible = trained;
    const sets = eligible.flatMap((c) => c.sets);
    const versionAfter = before.version + 1;
    this.faults.reached('after-step', { policyId, versionAfter });

    // 3. Checkpoint.
    const groupIds = eligible.map((c) => c.ready.group.groupId);
    const updateId = `${policyId}.v${versionAfter}.${createHash('sha256').update(groupIds.join('\n')).digest('hex').slice(0, 12)}`;
    let weightsHashAfter: string;
    try {
      weightsHashAfter = (await this.trainer.save(this.state.checkpointDir(versionAfter))).weightsHash;
    } catch (e) {
      await this.rollbackAfter(e);
      throw new SrpoError(ErrorCode.UNAVAILABLE, `update ${updateId}: writing the checkpoint failed: ${errorMessage(e)}`, { retriable: true, cause: e });
    }
    this.faults.reached('after-checkpoint', { updateId });

    // 4. One transaction.
    const checkpointUri = this.state.checkpointUri(versionAfter);
    const temperature = eligible[0].temperature;
    const hyperparameters: LearnerHyperparameters = {
      objective: this.config.objective,
      lr: this.config.lr,
      epochs: this.config.epochs,
      maxGradNorm: this.config.maxGradNorm,
      microBatchTokens: this.config.microBatchTokens,
      maxPolicyLag: this.config.maxPolicyLag,
      setsPerUpdate: this.config.setsPerUpdate,
      temperature,
      correction: this.config.correction,
    };
    let detail: UpdateDetail;
    try {
      detail = await this.recorder.recordUpdate(
        {
          updateId,
          policyId,
          versionBefore: before.version,
          weightsHashBefore: before.weightsHash,
          weightsHashAfter,
          hyperparameters,
          seed: this.config.seed,
          result,
          wallTimeMs: Date.now() - started,
          checkpointUri,
          committedAtMs: this.clock(),
        },
        eligible.map((c) => ledgerEntryFromGroup(c.ready.group, c.ready.source)),
        eligible.map((c) => groupStatsFromGroup(c.ready.group, before.version, this.codec)),
      );
    } catch (e) {
      await this.rollbackAfter(e);
      throw e;
    }
    this.faults.reached('after-db', { updateId });
    this.state.advance({ policyId, version: versionAfter, weightsHash: weightsHashAfter, checkpointUri }, updateId);
    outcome.update = detail;
    this.observe(detail, eligible);

    // 5. Publish (after the commit; a failure keeps the events queued and fails the batch so it is retried).
    this.pending.push(eventsFor(detail));
    await this.flushPending();
    this.faults.reached('after-publish', { updateId });

    // 6. Retention: only now, so every checkpoint a restart or rollback could load is already superseded by a committed one.
    await this.state.pruneCheckpoints();
    this.log.info('update applied', {
      updateId,
      policyId,
      versionAfter,
      groups: groupIds.length,
      sets: sets.length,
      loss: result.loss,
      skipped: outcome.skipped.length,
      redelivered: outcome.redelivered.length,
    });
    return outcome;
  }

  /**
   * The SRPO step on `eligible`, made finite if it can be: a step whose loss or gradient
   * norm is not finite is rolled back, every set is evaluated alone at the committed
   * weights ({@link PolicyTrainer.probe}), the groups of the sets that are non-finite on
   * their own are recorded as skipped (`non-finite-set`, naming the set), and the rest of
   * the mini-batch is stepped once more. Whatever is still non-finite then (or a step no
   * single set explains) is recorded as `non-finite-loss`, as before. Skipping whole groups
   * keeps the ledger exact: an update's groups are all it trained on.
   *
   * @returns the finite step and the groups it trained on; undefined when nothing was trained
   */
  private async finiteStep(
    eligible: Candidate[],
    version: number,
    outcome: UpdateOutcome,
    options: TrainerCallOptions,
  ): Promise<{ result: StepResult; trained: Candidate[] } | undefined> {
    const { policyId, objective, correction } = this.config;
    let result = await this.stepOrRollback(
      eligible.flatMap((c) => c.sets),
      options,
    );
    if (isFiniteStep(result)) return { result, trained: eligible };
    await this.rollbackAfter('non-finite loss');
    const batchDetail = `loss ${result.loss}, gradient norm ${result.gradNorm}`;
    const probes = new Map<string, SetProbe>(
      (
        await this.trainer.probe(
          eligible.flatMap((c) => c.sets),
          objective,
          correction,
          options,
        )
      ).map((p) => [p.setId, p]),
    );
    const bad: SkippedGroup[] = [];
    const rest: Candidate[] = [];
    for (const c of eligible) {
      const culprits = c.sets.map((s) => probes.get(s.setId)).filter((p): p is SetProbe => p !== undefined && !isFiniteStep(p));
      if (culprits.length === 0) {
        rest.push(c);
        continue;
      }
      const named = culprits.map((p) => `set ${p.setId} alone: loss ${p.loss}, gradient norm ${p.gradNorm}`).join('; ');
      bad.push({
        ready: c.ready,
        info: { groupId: c.ready.group.groupId, reason: 'non-finite-set', detail: `${named} (mini-batch step: ${batchDetail})`, lag: c.lag },
      });
    }
    if (bad.length === 0) {
      this.log.error('update produced a non-finite loss that no single set explains; weights discarded and its groups skipped', {
        policyId,
        detail: batchDetail,
      });
      await this.recordSkips(
        eligible.map((c) => nonFiniteLoss(c, batchDetail)),
        version,
        outcome,
      );
      return undefined;
    }
    this.log.error('sets that make the step non-finite on their own were isolated; their groups are skipped and the rest trained', {
      policyId,
      groups: bad.map((b) => b.info.groupId),
      detail: batchDetail,
    });
    await this.recordSkips(bad, version, outcome);
    if (rest.length === 0) return undefined;
    result = await this.stepOrRollback(
      rest.flatMap((c) => c.sets),
      options,
    );
    if (isFiniteStep(result)) return { result, trained: rest };
    await this.rollbackAfter('non-finite loss');
    const detail = `loss ${result.loss}, gradient norm ${result.gradNorm} after skipping ${bad.map((b) => b.info.groupId).join(', ')}`;
    this.log.error('update still non-finite after isolating sets; weights discarded and its groups skipped', { policyId, detail });
    await this.recordSkips(
      rest.map((c) => nonFiniteLoss(c, detail)),
      version,
      outcome,
    );
    return undefined;
  }

  /** `trainer.step`, rolling the weights back before rethrowing when it throws. */
  private async stepOrRollback(sets: TrainingSet[], options: TrainerCallOptions): Promise<StepResult> {
    try {
      return await this.trainer.step(sets, this.config.objective, this.config.correction, options);
    } catch (e) {
      await this.rollbackAfter(e);
      throw e;
    }
  }

  /** Puts the committed weights back; if even that fails, refuses every later batch until a restart. */
  private async rollbackAfter(cause: unknown): Promise<void> {
    try {
      await this.state.rollback();
    } catch (e) {
      this.broken = new SrpoError(
        ErrorCode.INTEGRITY_FAILED,
        `the weights could not be rolled back after a failed update (${errorMessage(cause)}): ${errorMessage(e)}; restart the learner`,
        { cause: e },
      );
      this.log.error('rollback failed; refusing further updates', { error: this.broken.message });
      throw this.broken;
    }
  }

  private async recordSkips(skips: SkippedGroup[], version: number, outcome: UpdateOutcome): Promise<void> {
    if (skips.length === 0) return;
    const now = this.clock();
    const entries: SkippedGroupInput[] = skips.map((s) => ({
      policyId: this.config.policyId,
      groupId: s.info.groupId,
      reason: s.info.reason,
      detail: s.info.detail,
      lag: s.info.lag,
      policyVersion: version,
      source: { ...s.ready.source },
      createdAtMs: now,
    }));
    const recorded = new Set((await this.store.recordSkipped(entries)).map((r) => r.groupId));
    for (const s of skips) {
      if (!recorded.has(s.info.groupId)) continue;
      outcome.skipped.push(s.info);
      this.metrics.groupsSkipped.inc({ reason: s.info.reason });
      this.log.warn('group skipped', { groupId: s.info.groupId, reason: s.info.reason, detail: s.info.detail, ...s.ready.source });
    }
  }

  private observe(detail: UpdateDetail, eligible: Candidate[]): void {
    this.metrics.updates.inc();
    this.metrics.groupsConsumed.inc(eligible.length);
    this.metrics.loss.set(detail.loss);
    this.metrics.gradNorm.set(detail.gradNorm);
    this.metrics.clipFrac.set({ side: 'low' }, detail.diagnostics['losses/clip_frac_low'] ?? Number.NaN);
    this.metrics.clipFrac.set({ side: 'high' }, detail.diagnostics['losses/clip_frac_high'] ?? Number.NaN);
    this.metrics.policyLag.set(Math.max(...eligible.map((c) => c.lag)));
    // Engine/learner mismatch and KL of the last update, where it computed them (docs/objective.md, section 7).
    for (const [name, value] of Object.entries(detail.diagnostics)) {
      if (name.startsWith('mismatch/') || name === 'losses/kl') this.metrics.mismatch.set({ stat: name }, value);
    }
  }

  private async flushPending(): Promise<void> {
    while (this.pending.length > 0) {
      const next = this.pending[0];
      await this.publisher.publish(next.update, next.version);
      this.pending.shift();
    }
  }
}
