import { createHash } from 'crypto';
import type { Kafka } from 'kafkajs';
import { ErrorCode, SrpoError } from '@srpo/core';
import {
  ensureTopics,
  validateActionCredit,
  validateInferredTask,
  type ActionCredit,
  type EventCodec,
  type InferredTask,
  type KafkaCoordinates,
  type TopicCatalog,
} from '@srpo/events';
import type { BrewedTrajectory } from './brew';
import type { CreditMode } from './credits';
import type { AssembledTrajectories } from './trajectory';

/** What every InferredTask and ActionCredit of one offline run shares. */
export interface OfflineEventContext {
  runId: string;
  inferrer: string;
  creditMode: CreditMode;
  scorerPolicyId: string;
  scorerVersion: number;
  eventTimeMs: number;
}

/**
 * One InferredTask per trajectory, usable or not, then one per incomplete episode (excluded as
 * `incomplete-episode`), then one per episode whose sealed content did not open (excluded with its
 * reason: `erased-content`, `unopenable-content` or `sealed-content`).
 */
export function inferredTaskEvents(
  ctx: OfflineEventContext,
  brewed: readonly BrewedTrajectory[],
  incomplete: AssembledTrajectories['incomplete'],
  unopened: AssembledTrajectories['unopened'] = [],
): InferredTask[] {
  const left = (x: { episodeId: string; taskId: string; sources: KafkaCoordinates[] }, excludedReason: string): InferredTask => ({
    runId: ctx.runId,
    episodeId: x.episodeId,
    originalTaskId: x.taskId,
    inferrer: ctx.inferrer,
    usable: false,
    excludedReason,
    instructionTokenIds: [],
    label: '',
    successfulSteps: 0,
    failedSteps: 0,
    scorerPolicyId: ctx.scorerPolicyId,
    scorerVersion: ctx.scorerVersion,
    sources: x.sources,
    eventTimeMs: ctx.eventTimeMs,
  });
  return [
    ...brewed.map((b): InferredTask => ({
      runId: ctx.runId,
      episodeId: b.trajectory.episodeId,
      originalTaskId: b.trajectory.taskId,
      inferrer: ctx.inferrer,
      usable: b.exclusion === null,
      excludedReason: b.exclusion,
      instructionTokenIds: b.instruction?.tokens ?? [],
      label: b.instruction?.label ?? '',
      successfulSteps: b.trajectory.actions.filter((a) => a.successful).length,
      failedSteps: b.trajectory.actions.filter((a) => !a.successful).length,
      scorerPolicyId: ctx.scorerPolicyId,
      scorerVersion: ctx.scorerVersion,
      sources: b.trajectory.sources,
      eventTimeMs: ctx.eventTimeMs,
    })),
    ...incomplete.map((x) => left(x, 'incomplete-episode')),
    ...unopened.map((x) => left(x, x.reason)),
  ];
}

/** One ActionCredit per action of each usable trajectory. */
export function actionCreditEvents(ctx: OfflineEventContext, usable: readonly BrewedTrajectory[]): ActionCredit[] {
  return usable.flatMap((b) =>
    b.actions.map((c): ActionCredit => ({
      runId: ctx.runId,
      episodeId: b.trajectory.episodeId,
      outputId: c.action.outputId,
      step: c.action.step,
      role: c.action.role,
      creditMode: ctx.creditMode,
      successful: c.action.successful,
      prefixIndex: c.prefixIndex,
      nllBefore: c.nllBefore,
      nllAfter: c.nllAfter,
      credit: c.credit,
      weight: c.weight,
      source: c.action.source,
      eventTimeMs: ctx.eventTimeMs,
    })),
  );
}

/**
 * Validates, then publishes the tasks and the credits on their topics (created if missing),
 * and returns the coordinates of each, in order.
 */
export async function publishOfflineEvents(
  kafka: Kafka,
  codec: EventCodec,
  catalog: TopicCatalog,
  tasks: readonly InferredTask[],
  credits: readonly ActionCredit[],
  onProgress: (done: number, total: number) => void,
): Promise<{ taskCoords: KafkaCoordinates[]; creditCoords: KafkaCoordinates[] }> {
  tasks.forEach((t) => validateInferredTask(t));
  credits.forEach((c) => validateActionCredit(c));
  const admin = kafka.admin();
  await admin.connect();
  try {
    await ensureTopics(admin, [catalog.inferredTasks, catalog.actionCredits]);
  } finally {
    await admin.disconnect();
  }
  const total = tasks.length + credits.length;
  const taskCoords = await publish(kafka, codec, catalog.inferredTasks.name, 'InferredTask', tasks, (done) => onProgress(done, total));
  const creditCoords = await publish(kafka, codec, catalog.actionCredits.name, 'ActionCredit', credits, (done) => onProgress(tasks.length + done, total));
  return { taskCoords, creditCoords };
}

/** Partition of a key on the offline topics: chosen here, so every event's coordinates are known from the produce response. */
export function partitionFor(key: string, partitions: number): number {
  return createHash('sha256').update(key).digest().readUInt32BE(0) % partitions;
}

async function publish<T extends 'InferredTask' | 'ActionCredit'>(
  kafka: Kafka,
  codec: EventCodec,
  topic: string,
  type: T,
  values: readonly (T extends 'InferredTask' ? InferredTask : ActionCredit)[],
  onProgress: (done: number) => void,
): Promise<KafkaCoordinates[]> {
  const admin = kafka.admin();
  await admin.connect();
  let partitions: number;
  try {
    const meta = await admin.fetchTopicMetadata({ topics: [topic] });
    partitions = meta.topics[0].partitions.length;
  } finally {
    await admin.disconnect();
  }
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  const coords = new Array<KafkaCoordinates>(values.length);
  try {
    const chunk = 500;
    for (let start = 0; start < values.length; start += chunk) {
      const slice = values.slice(start, start + chunk);
      const messages = slice.map((v) => ({
        key: v.episodeId,
        value: codec.encode(type, v as never, { strict: true }),
        partition: partitionFor(v.episodeId, partitions),
      }));
      const meta = await producer.send({ topic, acks: -1, messages });
      const next = new Map(meta.map((m) => [m.partition, Number(m.baseOffset)]));
      messages.forEach((m, i) => {
        const offset = next.get(m.partition);
        if (offset === undefined) throw new SrpoError(ErrorCode.INTEGRITY_FAILED, `${topic}: the broker acknowledged no batch for partition ${m.partition}`);
        coords[start + i] = { topic, partition: m.partition, offset };
        next.set(m.partition, offset + 1);
      });
      onProgress(Math.min(start + chunk, values.length));
    }
  } finally {
    await producer.disconnect();
  }
  return coords;
}
