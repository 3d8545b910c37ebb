import * as fs from 'fs';
import * as path from 'path';
import type { Kafka } from 'kafkajs';
import { ErrorCode, errorMessage, SrpoError } from '@srpo/core';
import { AdvantageGroup, EventCodec, KafkaCoordinates, topicCatalog, type ContentKeySource } from '@srpo/events';
import { rematerialize, type RematerializeProgress, type RematerializeResult, type RematerializeSettings } from '@srpo/materializer';
import { resolveObjectiveConfig, type ObjectiveConfig } from '@srpo/srpo';
import { ledgerEntryFromGroup, type AuditStore, type UpdateRecord } from '@srpo/store';
import { DEFAULT_MODEL, IsolatedRun, readUpdateHyperparameters, runLocation, TfPolicyTrainer, type UpdateHyperparameters } from '@srpo/trainer';
import { AuditService, ErasedContentError, recomputeStep, type CheckpointOrigin } from './audit.service';
import { adoptionOf } from './lineage-adoption';

/** Changes a counterfactual replay applies on top of every recorded update's hyperparameters. */
export interface ReplayOverrides {
  objective?: Partial<Pick<ObjectiveConfig, 'objective' | 'eventReduction' | 'clipLow' | 'clipHigh'>>;
  lr?: number;
  epochs?: number;
  maxGradNorm?: number;
}

export interface ReplayOptions {
  /** Run name: `[A-Za-z0-9._-]+`; names the run directory and the topic prefix `srpo.replay.<run>.`. */
  run: string;
  /** Where the run's SQLite store and checkpoints go (`<dir>/<run>/`). */
  runDir: string;
  /** Source updates: only this policy (required when the store holds several). */
  policyId?: string;
  /** Epoch ms, inclusive / exclusive, on the original commit time. */
  from?: number;
  to?: number;
  /**
   * Start at the first update whose every group was read at or after these
   * offsets: `{ "<advantage-groups topic>": { "<partition>": offset } }` (a consumer
   * group's committed offsets, for instance). Partitions not listed do not restrict.
   */
  fromOffsets?: Record<string, Record<string, number>>;
  overrides?: ReplayOverrides;
  /** Prefix of the run's own derived topics (PolicyUpdate/PolicyVersion); default `srpo.replay.<run>.`. */
  topicPrefix?: string;
  onProgress?: (p: ReplayProgress) => void;
  /**
   * Re-derive sets and groups from the raw events (the whole raw log up to its
   * end offsets at the start) into the run's own topics, and train on those
   * instead of the recorded AdvantageGroup events.
   */
  rematerialize?: { settings: RematerializeSettings; sourcePrefix: string; onProgress?: (p: RematerializeProgress) => void };
}

/** A recorded group whose re-derived counterpart is not identical. */
export interface GroupDifference {
  groupId: string;
  closeReason: AdvantageGroup['closeReason'];
  updateId: string;
  detail: string;
}

export interface RematerializeReport {
  /** Raw events re-processed, and the rate of the whole re-materialization (read, process, write). */
  events: number;
  eventsPerSecond: number;
  readMs: number;
  processMs: number;
  writeMs: number;
  setsComplete: number;
  setsInvalid: number;
  deadLetters: number;
  /** Episodes rebuilt with their latest outcome revision (docs/rewards.md, "Replay"). */
  revisedOutcomes: number;
  groups: number;
  /** Recorded groups of the replayed updates compared with their re-derived counterparts. */
  compared: number;
  identical: number;
  /** Every compared group that came out different; a SIZE group here fails the replay. */
  differences: GroupDifference[];
  sizeGroupsIdentical: boolean;
  /** The raw range read: exclusive end offset per `topic:partition`. */
  sourceEnds: Record<string, number>;
}

export interface ReplayProgress {
  done: number;
  total: number;
  events: number;
  eventsPerSecond: number;
  etaMs: number;
}

export type DivergenceCause = 'different inputs' | 'different config' | 'different backend' | 'erased content' | 'adoption' | 'inherited' | 'unexplained';

export interface ReplayRow {
  updateId: string;
  versionAfter: number;
  originalHash: string;
  replayHash: string | null;
  match: boolean;
  /** Set when the hashes differ. */
  cause?: DivergenceCause;
  detail?: string;
  originalLoss: number;
  replayLoss: number | null;
}

export interface ReplayReport {
  run: string;
  runDir: string;
  topicPrefix: string;
  backend: string;
  counterfactual: boolean;
  rows: ReplayRow[];
  matched: number;
  /** First row whose hash differs, with its cause. */
  firstDivergence?: ReplayRow;
  complete: boolean;
  /** The checkpoint the run started from, or the anchor it was rebuilt from when the learner had pruned it. */
  startingCheckpoint?: CheckpointOrigin;
  rematerialized?: RematerializeReport;
}

/**
 * Re-runs recorded updates into an isolated run: its own SQLite store and
 * checkpoints under `<runDir>/<run>/` and its own PolicyUpdate/PolicyVersion
 * topics; source topics are only read. Each update is recomputed through
 * {@link recomputeStep} (the learner's own step) on the AdvantageGroup events
 * at the ledger's coordinates, with the recorded mini-batch boundaries, from
 * the checkpoint the first replayed update started from. Without overrides on
 * the same backend every weights hash must match the original's.
 */
export class ReplayService {
  private readonly codec: EventCodec;

  constructor(
    /** `codec`: give it the schema registry when the recorded events are Confluent-framed. */
    private readonly source: { store: AuditStore; kafka: Kafka; backend: string; checkpointDir?: string; codec?: EventCodec; keys?: ContentKeySource },
  ) {
    this.codec = source.codec ?? new EventCodec();
  }

  async replay(options: ReplayOptions): Promise<ReplayReport> {
    const location = runLocation(options.runDir, options.run);
    const originals = await this.startingAt(await this.sourceUpdates(options), options.fromOffsets);
    const topicPrefix = options.topicPrefix ?? `srpo.replay.${options.run}.`;
    // The run's own events are single-object, as the learner's: no registry codec for them. Each record keeps its original's code version.
    const run = await IsolatedRun.open(location, { kafka: this.source.kafka, topicPrefix, backend: this.source.backend });
    try {
      return await this.replayInto(run, originals, options);
    } finally {
      await run.close();
    }
  }

  /** Replays `originals` (a chain, oldest first) into `run`. */
  private async replayInto(run: IsolatedRun, originals: UpdateRecord[], options: ReplayOptions): Promise<ReplayReport> {
    const first = originals[0];
    const runDir = run.location.dir;
    const topicPrefix = run.topics.prefix;
    const audit = new AuditService({
      store: this.source.store,
      kafka: this.source.kafka,
      backend: this.source.backend,
      checkpointDir: this.source.checkpointDir,
      keys: this.source.keys,
      codec: this.codec,
    });
    let remat: RematerializeResult | undefined;
    if (options.rematerialize) {
      remat = await rematerialize({
        kafka: this.source.kafka,
        source: topicCatalog({ prefix: options.rematerialize.sourcePrefix }),
        targetPrefix: topicPrefix,
        settings: options.rematerialize.settings,
        codec: this.codec,
        groupId: `${topicPrefix}rematerializer`,
        onProgress: options.rematerialize.onProgress,
      });
    }
    const firstHyper = readUpdateHyperparameters(await this.source.store.getUpdate(first.updateId));
    const h0 = this.applied(firstHyper, options.overrides);
    const trainer = new TfPolicyTrainer({
      policyId: first.policyId,
      model: DEFAULT_MODEL,
      lr: h0.lr,
      epochs: h0.epochs,
      maxGradNorm: h0.maxGradNorm,
      microBatchTokens: h0.microBatchTokens,
    });
    const report: ReplayReport = {
      run: options.run,
      runDir,
      topicPrefix,
      backend: this.source.backend,
      counterfactual: hasOverrides(options.overrides),
      rows: [],
      matched: 0,
      complete: false,
      ...(remat
        ? {
            rematerialized: {
              events: remat.events,
              eventsPerSecond: remat.eventsPerSecond,
              readMs: remat.readMs,
              processMs: remat.processMs,
              writeMs: remat.writeMs,
              setsComplete: remat.setsComplete,
              setsInvalid: remat.setsInvalid,
              deadLetters: remat.deadLetters,
              revisedOutcomes: remat.revisedOutcomes,
              groups: remat.groups.size,
              compared: 0,
              identical: 0,
              differences: [],
              sizeGroupsIdentical: true,
              sourceEnds: Object.fromEntries(remat.sourceEnds),
            },
          }
        : {}),
    };
    try {
      // The starting point: the checkpoint the first replayed update was computed from, verified against its record (rebuilt from an anchor if pruned).
      const start = await audit.loadStartingPoint(trainer, first.policyId, first.versionBefore, first.weightsHashBefore);
      report.startingCheckpoint = start;
      await trainer.save(run.checkpointDir(first.policyId, first.versionBefore));
      await run.recorder.registerPolicy(first.policyId, {
        version: first.versionBefore,
        weightsHash: start.weightsHash,
        checkpointUri: run.checkpointUri(first.policyId, first.versionBefore),
        createdAtMs: first.committedAtMs,
      });
      const started = Date.now();
      let events = 0;
      let hashBefore = start.weightsHash;
      let diverged: ReplayRow | undefined;
      for (const [i, summary] of originals.entries()) {
        const original = await this.source.store.getUpdate(summary.updateId);
        const adopted = adoptionOf(original);
        if (adopted) {
          // No step to redo: the weights came from another lineage (docs/erasure.md), which is replayed as its own run.
          const row = {
            updateId: original.updateId,
            versionAfter: original.versionAfter,
            originalHash: original.weightsHashAfter,
            replayHash: null,
            match: false,
          };
          report.rows.push({
            ...row,
            originalLoss: original.loss,
            replayLoss: null,
            cause: 'adoption',
            detail: `adopted v${adopted.sourceVersion} of run ${adopted.run}; the run stops here`,
          });
          report.firstDivergence ??= report.rows[report.rows.length - 1];
          break;
        }
        const recorded = readUpdateHyperparameters(original);
        const hyper = this.applied(recorded, options.overrides);
        const row: ReplayRow = {
          updateId: original.updateId,
          versionAfter: original.versionAfter,
          originalHash: original.weightsHashAfter,
          replayHash: null,
          match: false,
          originalLoss: original.loss,
          replayLoss: null,
        };
        report.rows.push(row);
        let groups: AdvantageGroup[];
        try {
          groups = await audit.fetchGroups(original.groups);
        } catch (e) {
          row.cause = 'different inputs';
          row.detail = errorMessage(e);
          report.firstDivergence ??= row;
          break;
        }
        let sources: KafkaCoordinates[] = original.groups.map((g) => g.source);
        let differences: GroupDifference[] = [];
        if (remat && report.rematerialized) {
          const picked = this.rederived(groups, original.updateId, remat);
          differences = picked.differences;
          const r = report.rematerialized;
          r.compared += groups.length;
          r.identical += groups.length - differences.length;
          r.differences.push(...differences);
          r.sizeGroupsIdentical &&= differences.every((d) => d.closeReason !== 'SIZE');
          if (picked.groups.length === 0) {
            row.cause = 'different inputs';
            row.detail = `no re-derived group holds any set of this update: ${differences.map((d) => d.detail).join('; ')}`;
            report.firstDivergence ??= row;
            break;
          }
          groups = picked.groups.map((g) => g.group);
          sources = picked.groups.map((g) => g.source);
        }
        events += groups.length;
        const wallStart = Date.now();
        // The trainer is rebuilt only if lr/epochs/grad-norm change mid-run; otherwise it carries its state like the live learner.
        let result: Awaited<ReturnType<typeof recomputeStep>>;
        try {
          // Sets erased since are left out, their groups renormalized: the run then says so (docs/erasure.md).
          result = await recomputeStep(trainer, this.codec, groups, hyper.objective, hyper.correction, this.source.keys, 'leave-out');
        } catch (e) {
          if (!(e instanceof ErasedContentError)) throw e;
          row.cause = 'erased content';
          row.detail = `every set of this update holds erased content (${e.setIds.length}); the run stops here`;
          report.firstDivergence ??= row;
          break;
        }
        if (result.groups.length < groups.length) sources = sources.filter((_, k) => result.groups.some((g) => g.groupId === groups[k].groupId));
        // The ledger of the run records what it trained on: without the erased sets.
        groups = result.groups;
        row.replayHash = result.weightsHash;
        row.replayLoss = result.loss;
        row.match = result.weightsHash === original.weightsHashAfter;
        if (row.match) report.matched++;
        else if (result.erasedSetIds.length > 0) {
          row.cause = 'erased content';
          row.detail = `${result.erasedSetIds.length} set(s) hold erased content and were left out: ${result.erasedSetIds.slice(0, 5).join(', ')}`;
          diverged ??= row;
          report.firstDivergence ??= row;
        } else if (differences.length > 0) {
          row.cause = 'different inputs';
          row.detail = `re-derived groups differ from the recorded ones: ${differences.map((d) => `${d.groupId} (${d.closeReason}): ${d.detail}`).join('; ')}`;
          diverged ??= row;
          report.firstDivergence ??= row;
        } else {
          const cause = divergenceCause(recorded, hyper, original.backend, this.source.backend, hashBefore, original.weightsHashBefore, diverged);
          row.cause = cause.cause;
          row.detail = cause.detail;
          diverged ??= row;
          report.firstDivergence ??= row;
        }
        await trainer.save(run.checkpointDir(original.policyId, original.versionAfter));
        const detail = await run.recorder.recordUpdate(
          {
            updateId: original.updateId,
            policyId: original.policyId,
            versionBefore: original.versionBefore,
            weightsHashBefore: hashBefore,
            weightsHashAfter: result.weightsHash,
            // The recorded hyperparameters with what this run changed: the ones it really trained with.
            hyperparameters: hyper,
            seed: original.seed,
            codeVersion: original.codeVersion,
            result,
            wallTimeMs: Date.now() - wallStart,
            checkpointUri: run.checkpointUri(original.policyId, original.versionAfter),
            // Replays keep the original commit time, so time windows and comparisons line up.
            committedAtMs: original.committedAtMs,
          },
          groups.map((g, k) => ledgerEntryFromGroup(g, sources[k])),
        );
        await run.recorder.publish(detail);
        hashBefore = result.weightsHash;
        const elapsed = Math.max(1, Date.now() - started);
        options.onProgress?.({
          done: i + 1,
          total: originals.length,
          events,
          eventsPerSecond: (events * 1000) / elapsed,
          etaMs: ((originals.length - i - 1) * elapsed) / (i + 1),
        });
      }
      report.complete = report.rows.length === originals.length && report.rows.every((r) => r.replayHash !== null);
      fs.writeFileSync(path.join(runDir, 'replay.json'), JSON.stringify({ ...report, overrides: options.overrides ?? {} }, null, 2));
      return report;
    } finally {
      trainer.dispose();
    }
  }

  /**
   * The re-derived groups to train an update on, in the recorded order: the one
   * with the recorded group's id (same key, same set ids) when it exists;
   * otherwise (a deadline group that closed with other members) the re-derived
   * groups holding the recorded sets. Each recorded group that is not re-derived
   * identically, setSource aside (it points into the run's own active-sets
   * topic), is reported with its first differing field.
   */
  private rederived(
    recorded: AdvantageGroup[],
    updateId: string,
    remat: RematerializeResult,
  ): { groups: { group: AdvantageGroup; source: KafkaCoordinates }[]; differences: GroupDifference[] } {
    const picked = new Map<string, { group: AdvantageGroup; source: KafkaCoordinates }>();
    const differences: GroupDifference[] = [];
    // What the learner would have read: the written bytes decoded, so Avro's number types match the recorded events'.
    const take = (groupId: string) => {
      const g = remat.groups.get(groupId);
      if (!g) return undefined;
      const known = picked.get(groupId);
      if (known) return known;
      const value = { group: this.codec.decodeAs('AdvantageGroup', g.bytes), source: g.source };
      picked.set(groupId, value);
      return value;
    };
    for (const original of recorded) {
      const same = take(original.groupId);
      if (same) {
        const diff = firstDifference(withoutSetSources(original), withoutSetSources(same.group), 'group');
        if (diff) differences.push({ groupId: original.groupId, closeReason: original.closeReason, updateId, detail: diff });
        continue;
      }
      const holders = new Set<string>();
      const lost: string[] = [];
      for (const s of original.sets) {
        const holder = remat.groupOfSet.get(s.set.setId);
        if (holder) holders.add(holder);
        else lost.push(s.set.setId);
      }
      for (const h of holders) take(h);
      const parts = [...holders].map((h) => `${h} (${remat.groups.get(h)?.group.closeReason})`);
      differences.push({
        groupId: original.groupId,
        closeReason: original.closeReason,
        updateId,
        detail: `re-derived with other members: its sets are in ${parts.join(', ') || 'no group'}${lost.length > 0 ? `; not grouped: ${lost.join(', ')}` : ''}`,
      });
    }
    return { groups: [...picked.values()], differences };
  }

  private async sourceUpdates(options: ReplayOptions): Promise<UpdateRecord[]> {
    const all: UpdateRecord[] = [];
    let from = options.from;
    // Paged by commit time; the page boundary repeats rows with equal times, filtered by id.
    for (;;) {
      const page = await this.source.store.listUpdates({ policyId: options.policyId, from, to: options.to, limit: 1000 });
      const fresh = page.filter((u) => !all.some((a) => a.updateId === u.updateId));
      all.push(...fresh);
      if (page.length < 1000 || fresh.length === 0) break;
      from = page[page.length - 1].committedAtMs;
    }
    if (all.length === 0) throw new SrpoError(ErrorCode.NOT_FOUND, 'no recorded updates in the requested range');
    const policies = new Set(all.map((u) => u.policyId));
    if (policies.size > 1)
      throw new SrpoError(ErrorCode.VALIDATION_FAILED, `the range holds updates of several policies (${[...policies].join(', ')}); pass --policy`, {
        field: 'policy',
      });
    all.sort((a, b) => a.versionAfter - b.versionAfter);
    for (let i = 1; i < all.length; i++) {
      if (all[i].versionBefore !== all[i - 1].versionAfter) {
        throw new SrpoError(
          ErrorCode.INTEGRITY_FAILED,
          `recorded updates are not a chain: v${all[i - 1].versionAfter} is followed by an update from v${all[i].versionBefore}`,
        );
      }
    }
    return all;
  }

  private async startingAt(chain: UpdateRecord[], fromOffsets: ReplayOptions['fromOffsets']): Promise<UpdateRecord[]> {
    if (!fromOffsets) return chain;
    for (let i = 0; i < chain.length; i++) {
      const detail = await this.source.store.getUpdate(chain[i].updateId);
      const after = detail.groups.every((g) => {
        const min = fromOffsets[g.source.topic]?.[String(g.source.partition)];
        return min === undefined || g.source.offset >= min;
      });
      if (after) return chain.slice(i);
    }
    throw new SrpoError(ErrorCode.NOT_FOUND, 'no recorded update read its groups at or after the given offsets');
  }

  private applied(recorded: UpdateHyperparameters, o: ReplayOverrides | undefined): UpdateHyperparameters {
    if (!o) return recorded;
    return {
      ...recorded,
      objective: o.objective ? resolveObjectiveConfig({ ...recorded.objective, ...o.objective }, 'objective') : recorded.objective,
      lr: o.lr ?? recorded.lr,
      epochs: o.epochs ?? recorded.epochs,
      maxGradNorm: o.maxGradNorm ?? recorded.maxGradNorm,
    };
  }
}

function hasOverrides(o: ReplayOverrides | undefined): boolean {
  return (
    !!o && (o.lr !== undefined || o.epochs !== undefined || o.maxGradNorm !== undefined || (o.objective !== undefined && Object.keys(o.objective).length > 0))
  );
}

function divergenceCause(
  recorded: UpdateHyperparameters,
  used: UpdateHyperparameters,
  recordedBackend: string,
  backend: string,
  hashBefore: string,
  recordedHashBefore: string,
  earlier: ReplayRow | undefined,
): { cause: DivergenceCause; detail: string } {
  if (JSON.stringify(recorded) !== JSON.stringify(used)) {
    return { cause: 'different config', detail: `recorded ${JSON.stringify(recorded)}, replayed with ${JSON.stringify(used)}` };
  }
  if (hashBefore !== recordedHashBefore && earlier) {
    return { cause: 'inherited', detail: `started from weights ${hashBefore}, the original from ${recordedHashBefore} (diverged at ${earlier.updateId})` };
  }
  if (recordedBackend !== backend) return { cause: 'different backend', detail: `recorded on ${recordedBackend}, replayed on ${backend}` };
  return { cause: 'unexplained', detail: 'same inputs, config and backend gave different weights: nondeterminism in the step' };
}

function withoutSetSources(g: AdvantageGroup): Omit<AdvantageGroup, 'sets'> & { sets: Omit<AdvantageGroup['sets'][number], 'setSource'>[] } {
  return { ...g, sets: g.sets.map(({ setSource: _ignored, ...rest }) => rest) };
}

/** Path and values of the first difference between two decoded events (Buffers compared by content), or null. */
function firstDifference(a: unknown, b: unknown, at: string): string | null {
  if (Buffer.isBuffer(a) || Buffer.isBuffer(b)) {
    return Buffer.isBuffer(a) && Buffer.isBuffer(b) && a.equals(b) ? null : `${at}: bytes differ`;
  }
  if (Array.isArray(a) || Array.isArray(b)) {
    if (!Array.isArray(a) || !Array.isArray(b)) return `${at}: ${JSON.stringify(a)} vs ${JSON.stringify(b)}`;
    if (a.length !== b.length) return `${at}: ${a.length} entries recorded, ${b.length} re-derived`;
    for (let i = 0; i < a.length; i++) {
      const d = firstDifference(a[i], b[i], `${at}[${i}]`);
      if (d) return d;
    }
    return null;
  }
  if (a !== null && b !== null && typeof a === 'object' && typeof b === 'object') {
    const keys = new Set([...Object.keys(a), ...Object.keys(b)]);
    for (const k of keys) {
      const d = firstDifference((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k], `${at}.${k}`);
      if (d) return d;
    }
    return null;
  }
  return Object.is(a, b) ? null : `${at}: recorded ${JSON.stringify(a)}, re-derived ${JSON.stringify(b)}`;
}
