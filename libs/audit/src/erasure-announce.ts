import { Partitioners, type Kafka } from 'kafkajs';
import { ErrorCode, errorMessage, retry, SrpoError } from '@srpo/core';
import { ensureTopics, MAX_ERASURE_KEY_IDS, validateErasure, type Erasure, type EventCodec, type TopicSpec } from '@srpo/events';
import type { ErasureRecord } from '@srpo/store';

/**
 * The Erasure events announcing one recorded erasure: one event, or several of the same id
 * when it deleted more than {@link MAX_ERASURE_KEY_IDS} keys (readers take their union).
 */
export function erasureEvents(record: ErasureRecord): Erasure[] {
  const events: Erasure[] = [];
  for (let i = 0; i === 0 || i < record.keyIds.length; i += MAX_ERASURE_KEY_IDS) {
    events.push({
      erasureId: record.erasureId,
      scope: record.scope,
      target: record.target,
      keyIds: record.keyIds.slice(i, i + MAX_ERASURE_KEY_IDS),
      eventTimeMs: record.erasedAtMs,
    });
  }
  for (const e of events) validateErasure(e);
  return events;
}

/**
 * Writes a recorded erasure to the erasures topic (created if missing), acknowledged by every
 * in-sync replica, retrying retriable failures for about a minute. Announcing twice is harmless:
 * readers apply an erasure once. A failure names the erasure, which stands in the store either way.
 */
export async function announceErasure(kafka: Kafka, topic: TopicSpec, codec: EventCodec, record: ErasureRecord): Promise<number> {
  const events = erasureEvents(record);
  const producer = kafka.producer({ idempotent: true, createPartitioner: Partitioners.DefaultPartitioner });
  try {
    await retry(
      async () => {
        const admin = kafka.admin();
        await admin.connect();
        try {
          await ensureTopics(admin, [topic]);
        } finally {
          await admin.disconnect();
        }
        await producer.connect();
        await producer.send({ topic: topic.name, acks: -1, messages: events.map((e) => ({ key: e.erasureId, value: codec.encode('Erasure', e) })) });
      },
      { maxAttempts: 6, initialDelayMs: 1_000, maxDelayMs: 15_000 },
    );
  } catch (e) {
    throw new SrpoError(
      ErrorCode.UNAVAILABLE,
      `erasure ${record.erasureId} is recorded in the store (its keys are deleted) but was not announced on ${topic.name}: ${errorMessage(e)}; ` +
        `run \`srpo erase --announce ${record.erasureId}\` once Kafka is reachable`,
      { retriable: true },
    );
  } finally {
    await producer.disconnect().catch(() => undefined);
  }
  return events.length;
}
