import * as fs from 'fs';
import * as path from 'path';
import { pathToFileURL } from 'url';
import type { Kafka } from 'kafkajs';
import { ErrorCode, SrpoError, ValidationError } from '@srpo/core';
import { ensureTopics, topicCatalog, type EventCodec, type TopicCatalog } from '@srpo/events';
import { CheckpointStore } from '@srpo/policy';
import {
  AuditStore,
  eventsFor,
  type GroupLedgerInput,
  type GroupStatsInput,
  type InitialVersion,
  type UpdateDetail,
  type UpdateRecordInput,
} from '@srpo/store';
import type { LearnerEventsPublisher } from './events-publisher';
import { KafkaLearnerEventsPublisher } from './kafka-publisher';
import { hyperparametersJson, type RecordedHyperparameters } from './update-hyperparameters';

/** What a caller knows about one finished update; {@link RunRecorder.updateRecord} makes the stored record of it. */
export interface UpdateRecordFields {
  updateId: string;
  policyId: string;
  /** The version trained from; the update produces `versionBefore + 1` (one update is one version, however many optimizer steps it took). */
  versionBefore: number;
  weightsHashBefore: string;
  weightsHashAfter: string;
  hyperparameters: RecordedHyperparameters;
  seed: number;
  /** Default: the recorder's. A replay keeps the original's. */
  codeVersion?: string;
  /** The step's loss, gradient norm and diagnostics, as recorded. */
  result: { loss: number; gradNorm: number; diagnostics: Record<string, number> };
  wallTimeMs: number;
  checkpointUri: string;
  /** Epoch ms of the commit (replays pass the original's, so time windows line up). */
  committedAtMs: number;
}

export interface RunRecorderOptions {
  store: AuditStore;
  /** Recorded with every update: the TensorFlow backend (or trainer) that computed it. */
  backend: string;
  /** Recorded with every update that names none itself (a replay names each original's instead). */
  codeVersion?: string;
  /** Where {@link RunRecorder.publish} sends PolicyUpdate and PolicyVersion; absent: the caller publishes. */
  publisher?: LearnerEventsPublisher;
}

/**
 * The one place update records are built and written: the learner's updates, a replay's
 * re-runs and an offline run all go through it, so the stored record (typed hyperparameters
 * included, see {@link hyperparametersJson}) has one shape whoever trained.
 */
export class RunRecorder {
  constructor(readonly options: RunRecorderOptions) {}

  get store(): AuditStore {
    return this.options.store;
  }

  /** The stored form of an update, without writing it. */
  updateRecord(f: UpdateRecordFields): UpdateRecordInput {
    return {
      updateId: f.updateId,
      policyId: f.policyId,
      versionBefore: f.versionBefore,
      versionAfter: f.versionBefore + 1,
      weightsHashBefore: f.weightsHashBefore,
      weightsHashAfter: f.weightsHashAfter,
      hyperparameters: hyperparametersJson(f.hyperparameters),
      seed: f.seed,
      backend: this.options.backend,
      codeVersion: this.codeVersionOf(f),
      loss: f.result.loss,
      gradNorm: f.result.gradNorm,
      diagnostics: f.result.diagnostics,
      wallTimeMs: f.wallTimeMs,
      checkpointUri: f.checkpointUri,
      committedAtMs: f.committedAtMs,
    };
  }

  private codeVersionOf(f: UpdateRecordFields): string {
    const v = f.codeVersion ?? this.options.codeVersion;
    if (v === undefined) throw new ValidationError('codeVersion', `update ${f.updateId} names no code version and the run recorder has no default`);
    return v;
  }

  /** Writes the update, its ledger rows and group statistics in one transaction (see `AuditStore.recordUpdate`). */
  recordUpdate(f: UpdateRecordFields, groups: readonly GroupLedgerInput[], stats: readonly GroupStatsInput[] = []): Promise<UpdateDetail> {
    return this.options.store.recordUpdate(this.updateRecord(f), groups, stats);
  }

  /** Registers a policy (its id as its only role) at the version a run starts from; a no-op when already registered. */
  async registerPolicy(policyId: string, initial: InitialVersion): Promise<void> {
    await this.options.store.ensurePolicy(policyId, [policyId], initial);
  }

  /**
   * Publishes a committed update's PolicyUpdate and PolicyVersion, rebuilt from its record.
   * `objectiveName` defaults to the recorded objective (offline runs name their own).
   */
  async publish(detail: UpdateDetail, objectiveName?: string): Promise<void> {
    const publisher = this.options.publisher;
    if (!publisher) throw new SrpoError(ErrorCode.CONFLICT, 'this run recorder has no publisher: the caller publishes its events');
    const { update, version } = eventsFor(detail, objectiveName);
    await publisher.publish(update, version);
  }
}

const RUN_NAME = /^[A-Za-z0-9._-]+$/;

/** Where an isolated run (a replay, an offline run) lives: `<runsDir>/<run>/`. */
export interface RunLocation {
  run: string;
  /** Absolute. */
  dir: string;
  /** The run's own SQLite audit store, `<dir>/store.sqlite`. */
  storePath: string;
  /** The run's checkpoints, `<dir>/checkpoints/<policy>/v<N>/`. */
  checkpoints: CheckpointStore;
}

/**
 * The location of a new run, checked before anything is read or written: the name must be
 * `[A-Za-z0-9._-]+` (it names a directory and topics) and the run must not exist yet.
 *
 * @throws ValidationError `run` for a bad name; SrpoError CONFLICT when the run's store exists
 */
export function runLocation(runsDir: string, run: string): RunLocation {
  if (!RUN_NAME.test(run) || run === '.' || run === '..') throw new ValidationError('run', `must match [A-Za-z0-9._-]+, got "${run}"`);
  const dir = path.resolve(runsDir, run);
  const storePath = path.join(dir, 'store.sqlite');
  if (fs.existsSync(storePath))
    throw new SrpoError(ErrorCode.CONFLICT, `run ${run} already exists in ${dir}; pick another name or remove it`, { field: 'run' });
  return { run, dir, storePath, checkpoints: new CheckpointStore(path.join(dir, 'checkpoints')) };
}

export interface IsolatedRunOptions {
  kafka: Kafka;
  /** Prefix of the run's own PolicyUpdate/PolicyVersion topics, e.g. `srpo.replay.<run>.`. */
  topicPrefix: string;
  backend: string;
  /** Default code version of the run's records (see {@link RunRecorderOptions.codeVersion}). */
  codeVersion?: string;
  /** Encodes the run's own events; default single-object encoding, as the learner's. */
  codec?: EventCodec;
}

/**
 * A run set up apart from the live learner: its directory, its own SQLite store and
 * checkpoints under it, and its own policy-updates/policy-versions topics with a publisher
 * on them (source topics are only ever read). Replays and offline runs are both this.
 */
export class IsolatedRun {
  private constructor(
    readonly location: RunLocation,
    readonly topics: TopicCatalog,
    readonly recorder: RunRecorder,
    private readonly publisher: KafkaLearnerEventsPublisher,
  ) {}

  /** Creates the directory and topics, then opens the store (so a failed topic creation leaves no store that would block a retry). */
  static async open(location: RunLocation, options: IsolatedRunOptions): Promise<IsolatedRun> {
    fs.mkdirSync(location.dir, { recursive: true });
    const topics = topicCatalog({ prefix: options.topicPrefix });
    const admin = options.kafka.admin();
    await admin.connect();
    try {
      await ensureTopics(admin, [topics.policyUpdates, topics.policyVersions]);
    } finally {
      await admin.disconnect();
    }
    const store = await AuditStore.open({ kind: 'sqlite', path: location.storePath });
    const publisher = new KafkaLearnerEventsPublisher({ kafka: options.kafka, topics, codec: options.codec });
    return new IsolatedRun(location, topics, new RunRecorder({ store, backend: options.backend, codeVersion: options.codeVersion, publisher }), publisher);
  }

  get store(): AuditStore {
    return this.recorder.store;
  }

  /** The directory a checkpoint of the run goes to. */
  checkpointDir(policyId: string, version: number): string {
    return this.location.checkpoints.dirFor(policyId, version);
  }

  /** The `file:` URI recorded for that checkpoint. */
  checkpointUri(policyId: string, version: number): string {
    return pathToFileURL(path.resolve(this.checkpointDir(policyId, version))).href;
  }

  /** Disconnects the publisher (a failure there is ignored: everything was acknowledged) and closes the store. */
  async close(): Promise<void> {
    await this.publisher.disconnect().catch(() => undefined);
    await this.store.close();
  }
}
