import * as path from 'path';
import { fileURLToPath } from 'url';
import type { Kafka } from 'kafkajs';
import { ErrorCode, errorMessage, SrpoError } from '@srpo/core';
import { EventCodec, readRanges, type AdvantageGroup, type KafkaCoordinates } from '@srpo/events';
import { CheckpointStore } from '@srpo/policy';
import { resolveObjectiveConfig, type ObjectiveConfig } from '@srpo/srpo';
import { ledgerEntryFromGroup, type AuditStore, type GroupLedgerRecord, type UpdateDetail } from '@srpo/store';
import { TfPolicyTrainer, type StepResult } from '../policy-trainer';
import { trainingSetsFromGroup } from '../update.service';
import { DEFAULT_MODEL } from '../learner-config';

/** The recorded hyperparameters an update can be recomputed with. */
export interface ReplayHyperparameters {
  objective: ObjectiveConfig;
  lr: number;
  epochs: number;
  maxGradNorm: number;
}

/** One check of `verify`, in the order they ran. */
export interface VerifyCheck {
  name: 'record' | 'source-events' | 'checkpoint-before' | 'backend' | 'recompute';
  ok: boolean;
  detail: string;
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
  /** First failed check's detail; absent when ok. */
  failure?: string;
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
  /**
   * Read source events from topics with this prefix instead of the recorded one
   * (a mirrored or restored copy of the log); `from` is the recorded prefix.
   */
  sourcePrefix?: { from: string; to: string };
  timeoutMs?: number;
}

/**
 * Audits recorded updates: prints them, traces sets to the update that used
 * them, and recomputes an update from its recorded inputs to check its weights
 * hash. Recomputation goes through the learner's own code (trainingSetsFromGroup
 * and TfPolicyTrainer.step), never a copy, so a match means the learner's path
 * really produced those weights. Usable without Nest (the CLI builds it directly).
 */
export class AuditService {
  private readonly codec = new EventCodec();

  constructor(private readonly options: AuditServiceOptions) {}

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

    let hyper: ReplayHyperparameters;
    try {
      hyper = recordedHyperparameters(detail);
    } catch (e) {
      return fail('record', errorMessage(e));
    }
    report.checks.push({ name: 'record', ok: true, detail: `${detail.groups.length} group(s), objective ${hyper.objective.objective}, lr ${hyper.lr}, epochs ${hyper.epochs}` });

    let groups: AdvantageGroup[];
    try {
      groups = await this.fetchGroups(detail.groups);
    } catch (e) {
      return fail('source-events', errorMessage(e));
    }
    report.checks.push({ name: 'source-events', ok: true, detail: `${groups.length} AdvantageGroup event(s) at their recorded coordinates match the ledger` });

    const trainer = new TfPolicyTrainer({ policyId: detail.policyId, model: DEFAULT_MODEL, lr: hyper.lr, epochs: hyper.epochs, maxGradNorm: hyper.maxGradNorm });
    try {
      const dir = await this.checkpointDirFor(detail.policyId, detail.versionBefore);
      try {
        const info = await trainer.load(dir);
        if (info.version !== detail.versionBefore || info.weightsHash !== detail.weightsHashBefore) {
          return fail(
            'checkpoint-before',
            `${dir} holds version ${info.version} with weights ${info.weightsHash}; the record says version ${detail.versionBefore} with ${detail.weightsHashBefore}`,
          );
        }
      } catch (e) {
        return fail('checkpoint-before', `cannot load version ${detail.versionBefore} from ${dir}: ${errorMessage(e)}`);
      }
      report.checks.push({ name: 'checkpoint-before', ok: true, detail: `version ${detail.versionBefore} (${detail.weightsHashBefore}) loaded and verified` });

      // Informational: hashes are only expected to agree on one backend, so a mismatch names it as the likely cause.
      const sameBackend = detail.backend === this.options.backend;
      report.checks.push({
        name: 'backend',
        ok: true,
        detail: sameBackend ? `recorded on ${detail.backend}, recomputed on the same` : `recorded on ${detail.backend}, recomputed on ${this.options.backend}: hashes may differ`,
      });

      const result = await recomputeStep(trainer, this.codec, groups, hyper.objective);
      report.recomputedLoss = result.loss;
      report.recomputedWeightsHashAfter = result.weightsHash;
      if (result.weightsHash !== detail.weightsHashAfter) {
        const cause = sameBackend ? 'the inputs, hyperparameters or starting checkpoint differ from what the learner used' : `different backend (${detail.backend} vs ${this.options.backend})`;
        return fail('recompute', `weights hash ${result.weightsHash} after recomputation, recorded ${detail.weightsHashAfter} (${cause})`);
      }
      report.checks.push({ name: 'recompute', ok: true, detail: `weights hash ${result.weightsHash} equals the record (loss ${result.loss}, recorded ${detail.loss})` });
      report.ok = true;
      return report;
    } finally {
      trainer.dispose();
    }
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

/** Loaded-checkpoint trainer + recorded groups → one step, exactly as UpdateService does it. */
export async function recomputeStep(
  trainer: TfPolicyTrainer,
  codec: EventCodec,
  groups: readonly AdvantageGroup[],
  objective: ObjectiveConfig,
): Promise<StepResult & { weightsHash: string }> {
  const sets = groups.flatMap((g) => trainingSetsFromGroup(codec, g));
  const result = await trainer.step(sets, objective);
  return { ...result, weightsHash: await trainer.weightsHash() };
}

/** The hyperparameters UpdateService records, validated; INTEGRITY_FAILED naming the first bad field. */
export function recordedHyperparameters(detail: UpdateDetail): ReplayHyperparameters {
  const h = detail.hyperparameters;
  const num = (name: string): number => {
    const v = h[name];
    if (typeof v !== 'number' || !Number.isFinite(v)) throw new SrpoError(ErrorCode.INTEGRITY_FAILED, `hyperparameters.${name} is missing or not a number`);
    return v;
  };
  if (h.objective === undefined) throw new SrpoError(ErrorCode.INTEGRITY_FAILED, 'hyperparameters.objective is missing');
  return {
    objective: resolveObjectiveConfig(h.objective, 'hyperparameters.objective'),
    lr: num('lr'),
    epochs: num('epochs'),
    maxGradNorm: num('maxGradNorm'),
  };
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
