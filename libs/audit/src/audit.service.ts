import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { fileURLToPath } from 'url';
import type { Kafka } from 'kafkajs';
import { ErrorCode, errorMessage, SrpoError } from '@srpo/core';
import { EventCodec, readRanges, type AdvantageGroup, type ContentKeySource, type KafkaCoordinates } from '@srpo/events';
import { groupWithout } from '@srpo/materializer';
import { checkpointVersionDir, CheckpointStore } from '@srpo/policy';
import { readEpisodeEvents, traceEpisode, type EpisodeEvents, type EpisodeTrace } from './episode-trace';
import { verifyAdoption } from './lineage-adoption';
// A recorded Hugging Face policy's checkpoint loads through the hf-llama family @srpo/hf registers.
import '@srpo/hf';
import type { CorrectionConfig, ObjectiveConfig } from '@srpo/srpo';
import { ledgerEntryFromGroup, type AuditStore, type GroupLedgerRecord, type UpdateDetail } from '@srpo/store';
import {
  DEFAULT_MODEL,
  prefetchMemberSchemas,
  readableGroups,
  readUpdateHyperparameters,
  TfPolicyTrainer,
  trainingSetsFromGroup,
  type CheckpointInfo,
  type StepHyperparameters,
  type StepResult,
  type UpdateHyperparameters,
} from '@srpo/trainer';

/** One check of `verify`, in the order they ran. */
export interface VerifyCheck {
  name: 'record' | 'source-events' | 'erased-content' | 'checkpoint-before' | 'backend' | 'recompute' | 'adoption';
  ok: boolean;
  detail: string;
}

/** Where the weights an update is recomputed from came from. */
export interface CheckpointOrigin {
  /** The version loaded into the trainer. */
  version: number;
  weightsHash: string;
  /** The checkpoint read from disk: `version` itself, or the nearest earlier kept one it was rebuilt from. */
  fromVersion: number;
  fromDir: string;
  /** Recorded updates re-applied on top of `fromVersion`, each checked against its record (0: `version` was on disk). */
  reapplied: number;
}

export interface VerifyReport {
  updateId: string;
  /** True only when every check passed and the recomputed weights hash equals the recorded one. */
  ok: boolean;
  checks: VerifyCheck[];
  recordedWeightsHashAfter: string;
  /** Absent when verification stopped before recomputing. */
  recomputedWeightsHashAfter?: string;
  recordedLoss: number;
  recomputedLoss?: number;
  recordedBackend: string;
  backend: string;
  /** Set once `checkpoint-before` passed: the checkpoint read and the updates re-applied to reach `versionBefore`. */
  startingCheckpoint?: CheckpointOrigin;
  /** First failed check's detail; absent when ok. */
  failure?: string;
  /** Sets of the update whose content has been erased since (docs/erasure.md): the update cannot be recomputed. */
  erasedSetIds?: string[];
}

export interface SetTrace {
  setId: string;
  policyId: string;
  groupId: string;
  groupKey: string;
  /** The AdvantageGroup event the set arrived in. */
  groupSource: KafkaCoordinates;
  advantage: number;
  /** Index of the set within its group. */
  position: number;
  /** The ActiveSet event on the repartition topic. */
  setSource: KafkaCoordinates;
  transition: KafkaCoordinates;
  outcome: KafkaCoordinates | null;
  outputs: { outputId: string; source: KafkaCoordinates }[];
  update: { updateId: string; versionBefore: number; versionAfter: number; weightsHashAfter: string; committedAtMs: number; loss: number };
}

export interface AuditServiceOptions {
  store: AuditStore;
  /** Absent: verify cannot fetch source events (show and trace still work). */
  kafka?: Kafka;
  /** Name of the backend this process runs on (`initTfBackend(...).name`). */
  backend: string;
  /**
   * Checkpoint root to load from instead of the URIs in the record (checkpoints
   * copied to another machine). Layout `<root>/<policy>/v<N>/`.
   */
  checkpointDir?: string;
  /** Decodes fetched events; give it the registry when events are Confluent-framed. */
  codec?: EventCodec;
  /**
   * Read source events from topics with this prefix instead of the recorded one
   * (a mirrored or restored copy of the log); `from` is the recorded prefix.
   */
  sourcePrefix?: { from: string; to: string };
  timeoutMs?: number;
  /** Content keys of sealed members (the store's KeyStore, docs/erasure.md); absent: sealed sets count as erased. */
  keys?: ContentKeySource;
}

/**
 * Audits recorded updates: prints them, traces sets to the update that used
 * them, and recomputes an update from its recorded inputs to check its weights
 * hash. Recomputation goes through the learner's own code (trainingSetsFromGroup
 * and TfPolicyTrainer.step), never a copy, so a match means the learner's path
 * really produced those weights. Usable without Nest (the CLI builds it directly).
 */
export class AuditService {
  private readonly codec: EventCodec;

  constructor(private readonly options: AuditServiceOptions) {
    this.codec = options.codec ?? new EventCodec();
  }

  show(updateId: string): Promise<UpdateDetail> {
    return this.options.store.getUpdate(updateId);
  }

  /** Which outputs, transition and outcome made a set, its group, advantage and consuming update; NOT_FOUND if no update consumed it. */
  async trace(setId: string): Promise<SetTrace[]> {
    const rows = await this.options.store.findGroupsWithSet(setId);
    if (rows.length === 0) throw new SrpoError(ErrorCode.NOT_FOUND, `no recorded update consumed set ${setId}`, { field: 'setId' });
    const out: SetTrace[] = [];
    for (const g of rows) {
      const position = g.setIds.indexOf(setId);
      const src = g.sources[position];
      const u = await this.options.store.getUpdate(g.updateId);
      out.push({
        setId,
        policyId: g.policyId,
        groupId: g.groupId,
        groupKey: g.groupKey,
        groupSource: g.source,
        advantage: g.advantages[position],
        position,
        setSource: src.set,
        transition: src.transition,
        outcome: src.outcome,
        outputs: src.members.map((m) => ({ outputId: m.outputId, source: m.source })),
        update: {
          updateId: u.updateId,
          versionBefore: u.versionBefore,
          versionAfter: u.versionAfter,
          weightsHashAfter: u.weightsHashAfter,
          committedAtMs: u.committedAtMs,
          loss: u.loss,
        },
      });
    }
    return out;
  }

  /**
   * Which recorded updates used a set of episode `episodeId`, with the outcome revision each set
   * was trained with and whether a later revision superseded it (docs/rewards.md). `events`
   * left out: read from the log (the partition of the episode in `topics`; needs `kafka`).
   */
  async traceEpisode(
    episodeId: string,
    source: { topics: { transitions: string; episodeOutcomes: string } } | { events: EpisodeEvents },
  ): Promise<EpisodeTrace> {
    let events: EpisodeEvents;
    if ('events' in source) events = source.events;
    else {
      if (!this.options.kafka)
        throw new SrpoError(ErrorCode.CONFIG_INVALID, 'tracing an episode reads its outcomes from Kafka: no Kafka client was given', { field: 'kafka' });
      const map = (topic: string) =>
        this.options.sourcePrefix && topic.startsWith(this.options.sourcePrefix.from)
          ? this.options.sourcePrefix.to + topic.slice(this.options.sourcePrefix.from.length)
          : topic;
      events = await readEpisodeEvents(
        this.options.kafka,
        { transitions: map(source.topics.transitions), episodeOutcomes: map(source.topics.episodeOutcomes) },
        episodeId,
        this.codec,
      );
    }
    return traceEpisode(this.options.store, episodeId, events);
  }

  /**
   * Fetches the update's AdvantageGroup events by their recorded coordinates,
   * loads the checkpoint it started from, redoes the step with the recorded
   * hyperparameters and compares the weights hash. Never throws for a failed
   * check: the report says which check failed and why.
   */
  async verify(updateId: string): Promise<VerifyReport> {
    const detail = await this.options.store.getUpdate(updateId);
    const report: VerifyReport = {
      updateId,
      ok: false,
      checks: [],
      recordedWeightsHashAfter: detail.weightsHashAfter,
      recordedLoss: detail.loss,
      recordedBackend: detail.backend,
      backend: this.options.backend,
    };
    const fail = (name: VerifyCheck['name'], msg: string): VerifyReport => {
      report.checks.push({ name, ok: false, detail: msg });
      report.failure = `${name}: ${msg}`;
      return report;
    };

    if (detail.hyperparameters.adoption !== undefined) {
      const checks = await verifyAdoption(detail, await this.checkpointDirFor(detail.policyId, detail.versionAfter));
      const failed = checks.find((c) => !c.ok);
      return { ...report, checks, ok: failed === undefined, ...(failed ? { failure: `${failed.name}: ${failed.detail}` } : {}) };
    }
    let hyper: UpdateHyperparameters;
    try {
      hyper = readUpdateHyperparameters(detail);
    } catch (e) {
      return fail('record', errorMessage(e));
    }
    report.checks.push({
      name: 'record',
      ok: true,
      detail: `${detail.groups.length} group(s), objective ${hyper.objective.objective}, lr ${hyper.lr}, epochs ${hyper.epochs}`,
    });

    let groups: AdvantageGroup[];
    try {
      groups = await this.fetchGroups(detail.groups);
    } catch (e) {
      return fail('source-events', errorMessage(e));
    }
    report.checks.push({ name: 'source-events', ok: true, detail: `${groups.length} AdvantageGroup event(s) at their recorded coordinates match the ledger` });
    const readable = await readableGroups(this.codec, this.options.keys, groups);
    if (readable.erasedSetIds.length > 0) {
      report.erasedSetIds = readable.erasedSetIds;
      return fail(
        'erased-content',
        `${readable.erasedSetIds.length} set(s) of this update hold content erased since (${readable.erasedSetIds.slice(0, 5).join(', ')}${readable.erasedSetIds.length > 5 ? ', ...' : ''}): it cannot be recomputed`,
      );
    }
    report.checks.push({ name: 'erased-content', ok: true, detail: 'no set of this update holds erased content' });

    const trainer = this.trainerFor(detail.policyId, hyper);
    try {
      let origin: CheckpointOrigin;
      try {
        origin = await this.loadStartingPoint(trainer, detail.policyId, detail.versionBefore, detail.weightsHashBefore);
      } catch (e) {
        return fail('checkpoint-before', errorMessage(e));
      }
      report.startingCheckpoint = origin;
      report.checks.push({
        name: 'checkpoint-before',
        ok: true,
        detail:
          origin.reapplied === 0
            ? `version ${detail.versionBefore} (${detail.weightsHashBefore}) loaded and verified`
            : `version ${detail.versionBefore} (${detail.weightsHashBefore}) was pruned: rebuilt from checkpoint v${origin.fromVersion} (${origin.fromDir}) by re-applying ${origin.reapplied} recorded update(s), every weights hash matching its record`,
      });

      // Informational: hashes are only expected to agree on one backend, so a mismatch names it as the likely cause.
      const sameBackend = detail.backend === this.options.backend;
      report.checks.push({
        name: 'backend',
        ok: true,
        detail: sameBackend
          ? `recorded on ${detail.backend}, recomputed on the same`
          : `recorded on ${detail.backend}, recomputed on ${this.options.backend}: hashes may differ`,
      });

      const result = await recomputeStep(trainer, this.codec, groups, hyper.objective, hyper.correction, this.options.keys);
      report.recomputedLoss = result.loss;
      report.recomputedWeightsHashAfter = result.weightsHash;
      if (result.weightsHash !== detail.weightsHashAfter) {
        const cause = sameBackend
          ? 'the inputs, hyperparameters or starting checkpoint differ from what the learner used'
          : `different backend (${detail.backend} vs ${this.options.backend})`;
        return fail('recompute', `weights hash ${result.weightsHash} after recomputation, recorded ${detail.weightsHashAfter} (${cause})`);
      }
      report.checks.push({
        name: 'recompute',
        ok: true,
        detail: `weights hash ${result.weightsHash} equals the record (loss ${result.loss}, recorded ${detail.loss})`,
      });
      report.ok = true;
      return report;
    } finally {
      trainer.dispose();
    }
  }

  /**
   * Loads `version` of a policy into `trainer` and checks it holds
   * `weightsHash`. When its checkpoint is no longer on disk (pruned by the
   * learner's retention), rebuilds it from the nearest earlier checkpoint still
   * there (an anchor, version 0 at worst) by re-applying the recorded updates
   * in between exactly as replay does: each one's groups fetched at their
   * recorded coordinates ({@link fetchGroups}), one {@link recomputeStep} with
   * its recorded hyperparameters, and its weights hash compared with its
   * record. A checkpoint that is there but does not load or does not match is
   * an error, never a reason to rebuild.
   *
   * @throws SrpoError INTEGRITY_FAILED naming the version and cause when a
   *   checkpoint, source group or intermediate weights hash disagrees with the record.
   */
  async loadStartingPoint(trainer: TfPolicyTrainer, policyId: string, version: number, weightsHash: string): Promise<CheckpointOrigin> {
    const dir = await this.checkpointDirFor(policyId, version);
    let info: CheckpointInfo;
    try {
      info = await trainer.load(dir);
    } catch (e) {
      if (vanished(e, dir)) return this.rebuild(trainer, policyId, version, weightsHash, dir);
      throw new SrpoError(e instanceof SrpoError ? e.code : ErrorCode.INTEGRITY_FAILED, `cannot load version ${version} from ${dir}: ${errorMessage(e)}`, {
        cause: e,
      });
    }
    if (info.version !== version || info.weightsHash !== weightsHash) {
      throw new SrpoError(
        ErrorCode.INTEGRITY_FAILED,
        `${dir} holds version ${info.version} with weights ${info.weightsHash}; the record says version ${version} with ${weightsHash}`,
      );
    }
    return { version, weightsHash, fromVersion: version, fromDir: dir, reapplied: 0 };
  }

  private async rebuild(target: TfPolicyTrainer, policyId: string, version: number, weightsHash: string, missingDir: string): Promise<CheckpointOrigin> {
    const policyDir = path.dirname(missingDir);
    const earlier = (await new CheckpointStore(path.dirname(policyDir)).versions(path.basename(policyDir))).filter((v) => v < version).reverse();
    const failed = (msg: string) =>
      new SrpoError(ErrorCode.INTEGRITY_FAILED, `version ${version} is not on disk (${missingDir}, pruned?) and rebuilding it failed: ${msg}`);
    const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-rebuild-'));
    let work: TfPolicyTrainer | undefined;
    try {
      let anchor: { version: number; dir: string; hash: string } | undefined;
      for (const v of earlier) {
        const dir = checkpointVersionDir(policyDir, v);
        const first = await this.options.store.getUpdate((await this.updateProducing(policyId, v + 1, failed)).updateId);
        work = this.trainerFor(policyId, readUpdateHyperparameters(first));
        let info: CheckpointInfo;
        try {
          info = await work.load(dir);
        } catch (e) {
          work.dispose();
          work = undefined;
          // Pruned between the listing and the load (the learner is running): the next earlier one will do.
          if (vanished(e, dir)) continue;
          throw failed(`cannot load checkpoint v${v} from ${dir}: ${errorMessage(e)}`);
        }
        const recorded = await this.options.store.getVersion(policyId, v);
        if (!recorded) throw failed(`checkpoint v${v} (${dir}) has no version record`);
        if (info.version !== v || info.weightsHash !== recorded.weightsHash) {
          throw failed(`${dir} holds version ${info.version} with weights ${info.weightsHash}; the record says version ${v} with ${recorded.weightsHash}`);
        }
        anchor = { version: v, dir, hash: info.weightsHash };
        break;
      }
      if (!anchor || !work) throw failed(`no earlier checkpoint of ${policyId} is left in ${policyDir} to start from`);
      let hash = anchor.hash;
      for (let v = anchor.version + 1; v <= version; v++) {
        const summary = await this.updateProducing(policyId, v, failed);
        const update = await this.options.store.getUpdate(summary.updateId);
        const at = `from v${anchor.version}, update ${update.updateId} (v${update.versionBefore} -> v${update.versionAfter})`;
        if (update.versionBefore !== v - 1 || update.weightsHashBefore !== hash) {
          throw failed(`${at} starts from v${update.versionBefore} with weights ${update.weightsHashBefore}, the rebuilt v${v - 1} has ${hash}`);
        }
        if (update.hyperparameters.adoption !== undefined) throw failed(`${at} is an adoption, not a step: its own checkpoint is needed (docs/erasure.md)`);
        let result: StepResult & { weightsHash: string };
        try {
          const hyper = readUpdateHyperparameters(update);
          const groups = await this.fetchGroups(update.groups);
          work = await this.withOptions(work, hyper, scratch);
          result = await recomputeStep(work, this.codec, groups, hyper.objective, hyper.correction, this.options.keys);
        } catch (e) {
          throw failed(`${at}: ${errorMessage(e)}`);
        }
        if (result.weightsHash !== update.weightsHashAfter) {
          const cause =
            update.backend === this.options.backend
              ? 'its inputs, hyperparameters or starting weights differ from what the learner used'
              : `different backend (${update.backend} vs ${this.options.backend})`;
          throw failed(`${at}: weights hash ${result.weightsHash} after re-applying it, recorded ${update.weightsHashAfter} (${cause})`);
        }
        hash = result.weightsHash;
      }
      if (hash !== weightsHash) throw failed(`the rebuilt v${version} has weights ${hash}, the update being checked records ${weightsHash} before it`);
      // Through a checkpoint, so the caller's trainer starts exactly as it would from the pruned directory.
      const rebuilt = path.join(scratch, 'rebuilt');
      await work.save(rebuilt);
      await target.load(rebuilt);
      return { version, weightsHash, fromVersion: anchor.version, fromDir: anchor.dir, reapplied: version - anchor.version };
    } finally {
      work?.dispose();
      fs.rmSync(scratch, { recursive: true, force: true });
    }
  }

  /** The recorded update that produced `version`. */
  private async updateProducing(policyId: string, version: number, failed: (msg: string) => SrpoError): Promise<{ updateId: string }> {
    const v = await this.options.store.getVersion(policyId, version);
    if (!v || v.updateId === null) throw failed(`no recorded update produced v${version} of ${policyId}`);
    return { updateId: v.updateId };
  }

  private trainerFor(policyId: string, h: StepHyperparameters): TfPolicyTrainer {
    return new TfPolicyTrainer({
      policyId,
      model: DEFAULT_MODEL,
      lr: h.lr,
      epochs: h.epochs,
      maxGradNorm: h.maxGradNorm,
      microBatchTokens: h.microBatchTokens,
    });
  }

  /**
   * The trainer to apply an update recorded with `h`: `work` itself, or, when
   * lr/epochs/clip changed (a learner restarted with other settings), a new
   * trainer loaded from a checkpoint of `work`, as that restart did.
   */
  private async withOptions(work: TfPolicyTrainer, h: StepHyperparameters, scratch: string): Promise<TfPolicyTrainer> {
    const o = work.options;
    if (o.lr === h.lr && o.epochs === h.epochs && o.maxGradNorm === h.maxGradNorm && (o.microBatchTokens ?? 0) === h.microBatchTokens) return work;
    const dir = path.join(scratch, `v${work.version}`);
    await work.save(dir);
    const next = this.trainerFor(o.policyId, h);
    try {
      await next.load(dir);
    } catch (e) {
      next.dispose();
      throw e;
    }
    work.dispose();
    return next;
  }

  /**
   * The AdvantageGroup events at the ledger's coordinates, in ledger order.
   * Each must decode and carry the recorded group id, set ids, advantages and
   * source coordinates; the first difference is an INTEGRITY_FAILED error.
   */
  async fetchGroups(ledger: readonly GroupLedgerRecord[]): Promise<AdvantageGroup[]> {
    const kafka = this.options.kafka;
    if (!kafka) throw new SrpoError(ErrorCode.CONFIG_INVALID, 'no Kafka connection configured: source events cannot be fetched');
    const byTopic = new Map<string, GroupLedgerRecord[]>();
    for (const g of ledger) {
      const topic = this.sourceTopic(g.source.topic);
      byTopic.set(topic, [...(byTopic.get(topic) ?? []), g]);
    }
    const found = new Map<string, Buffer | null>();
    for (const [topic, rows] of byTopic) {
      const records = await readRanges(
        kafka,
        topic,
        rows.map((g) => ({ partition: g.source.partition, from: g.source.offset, to: g.source.offset })),
        { timeoutMs: this.options.timeoutMs ?? 30_000 },
      );
      for (const r of records) found.set(`${topic}:${r.partition}:${r.offset}`, r.value);
    }
    return ledger.map((g) => {
      const at = `${this.sourceTopic(g.source.topic)}:${g.source.partition}:${g.source.offset}`;
      const value = found.get(at);
      if (!value) throw new SrpoError(ErrorCode.INTEGRITY_FAILED, `group ${g.groupId}: no event at ${at}`);
      let group: AdvantageGroup;
      try {
        group = this.codec.decodeAs('AdvantageGroup', value);
      } catch (e) {
        throw new SrpoError(ErrorCode.INTEGRITY_FAILED, `group ${g.groupId}: the event at ${at} is not an AdvantageGroup (${errorMessage(e)})`);
      }
      if (group.groupId !== g.groupId) {
        throw new SrpoError(ErrorCode.INTEGRITY_FAILED, `the event at ${at} is group ${group.groupId}, the ledger says ${g.groupId}`);
      }
      // The learner trained on fewer sets than the event holds when some were erased before the update
      // (UpdateCycle leaves them out and renormalizes): compare with the group as it trained on it.
      const trained = new Set(g.setIds);
      const left = group.sets.filter((gs) => !trained.has(gs.set.setId)).map((gs) => gs.set.setId);
      if (left.length > 0 && left.length < group.sets.length && g.setIds.every((id) => group.sets.some((gs) => gs.set.setId === id))) {
        group = groupWithout(group, new Set(left)) ?? group;
      }
      const difference = ledgerDifference(g, ledgerEntryFromGroup(group, g.source));
      if (difference) throw new SrpoError(ErrorCode.INTEGRITY_FAILED, `group ${g.groupId} at ${at} was altered: ${difference}`);
      return group;
    });
  }

  private sourceTopic(recorded: string): string {
    const p = this.options.sourcePrefix;
    if (!p || !recorded.startsWith(p.from)) return recorded;
    return p.to + recorded.slice(p.from.length);
  }

  private async checkpointDirFor(policyId: string, version: number): Promise<string> {
    if (this.options.checkpointDir) return path.resolve(new CheckpointStore(this.options.checkpointDir).dirFor(policyId, version));
    const v = await this.options.store.getVersion(policyId, version);
    if (!v) throw new SrpoError(ErrorCode.NOT_FOUND, `policy ${policyId} has no recorded version ${version}`);
    return v.checkpointUri.startsWith('file:') ? fileURLToPath(v.checkpointUri) : v.checkpointUri;
  }
}

/**
 * Whether a failed load means the checkpoint is not there: no model.json, or
 * a directory that disappeared while it was read (a running learner pruned it
 * after the rename; its files are never removed under the `v<N>` name).
 */
function vanished(e: unknown, dir: string): boolean {
  return (e instanceof SrpoError && e.code === ErrorCode.NOT_FOUND) || !fs.existsSync(dir);
}

/**
 * Loaded-checkpoint trainer + recorded groups → one step, exactly as the update cycle (UpdateCycle)
 * does it. Sealed members are opened with `keys`; a set whose content was erased is refused
 * (`onErased: 'refuse'`, an {@link ErasedContentError}: the step cannot be the recorded one) or left
 * out with its group renormalized (`'leave-out'`: replay and the rebuild of a lineage after an erasure).
 */
export async function recomputeStep(
  trainer: TfPolicyTrainer,
  codec: EventCodec,
  groups: readonly AdvantageGroup[],
  objective: ObjectiveConfig,
  correction?: CorrectionConfig,
  keys?: ContentKeySource,
  onErased: 'refuse' | 'leave-out' = 'refuse',
): Promise<StepResult & { weightsHash: string; erasedSetIds: string[]; groups: AdvantageGroup[] }> {
  await prefetchMemberSchemas(codec, groups);
  const readable = await readableGroups(codec, keys, groups);
  if (readable.erasedSetIds.length > 0 && (onErased === 'refuse' || readable.groups.length === 0)) throw new ErasedContentError(readable.erasedSetIds);
  const sets = readable.groups.flatMap((g) => trainingSetsFromGroup(codec, g, readable.keys));
  const result = await trainer.step(sets, objective, correction);
  return { ...result, weightsHash: await trainer.weightsHash(), erasedSetIds: readable.erasedSetIds, groups: readable.groups };
}

/** A recomputation met sets whose content keys were deleted (docs/erasure.md). */
export class ErasedContentError extends SrpoError {
  constructor(readonly setIds: string[]) {
    super(ErrorCode.NOT_FOUND, `${setIds.length} set(s) hold erased content (${setIds.slice(0, 5).join(', ')}${setIds.length > 5 ? ', ...' : ''})`, {
      details: { setIds },
    });
  }
}

/** First field where a re-derived ledger entry differs from the recorded one; undefined when equal. */
function ledgerDifference(recorded: GroupLedgerRecord, now: ReturnType<typeof ledgerEntryFromGroup>): string | undefined {
  if (recorded.groupKey !== now.groupKey) return `groupKey ${now.groupKey}, recorded ${recorded.groupKey}`;
  if (JSON.stringify(recorded.setIds) !== JSON.stringify(now.setIds)) return `sets ${now.setIds.join(',')}, recorded ${recorded.setIds.join(',')}`;
  for (let i = 0; i < now.advantages.length; i++) {
    if (recorded.advantages[i] !== now.advantages[i]) return `set ${now.setIds[i]} advantage ${now.advantages[i]}, recorded ${recorded.advantages[i]}`;
  }
  if (JSON.stringify(recorded.sources) !== JSON.stringify(now.sources)) return 'source coordinates of its sets differ from the ledger';
  if (recorded.objectiveConfig !== now.objectiveConfig) return 'advantage settings differ from the ledger';
  return undefined;
}
