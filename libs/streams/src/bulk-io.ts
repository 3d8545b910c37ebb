import { Kafka, Message, Partitioners } from 'kafkajs';

/** One record to write, with its partition chosen by the caller. */
export interface BulkMessage {
  topic: string;
  partition: number;
  key: string | Buffer | null;
  value: Buffer;
}

/**
 * Writes records in large requests with an idempotent, non-transactional
 * producer (acks=all, one request in flight, so each partition's records land
 * in the order given). For a replay's own topics, which only it writes: their
 * offsets are then known before writing (see {@link OffsetAllocator}).
 */
export async function bulkWrite(
  kafka: Kafka,
  messages: readonly BulkMessage[],
  options: { maxRequestBytes?: number; maxPartitionBytes?: number; onProgress?: (written: number) => void } = {},
): Promise<void> {
  if (messages.length === 0) return;
  const producer = kafka.producer({
    idempotent: true,
    maxInFlightRequests: 1,
    createPartitioner: Partitioners.DefaultPartitioner,
    allowAutoTopicCreation: false,
  });
  await producer.connect();
  try {
    const limit = options.maxRequestBytes ?? 2 * 1024 * 1024;
    // One partition's records of a request form one record batch, which the topic's max.message.bytes (4 MiB in the catalog) caps.
    const perPartition = options.maxPartitionBytes ?? 1024 * 1024;
    let i = 0;
    while (i < messages.length) {
      const byTopic = new Map<string, Message[]>();
      const partitionBytes = new Map<string, number>();
      let bytes = 0;
      for (; i < messages.length; i++) {
        const m = messages[i];
        const size = m.value.length + 64;
        const pk = `${m.topic}:${m.partition}`;
        const inPartition = partitionBytes.get(pk) ?? 0;
        if (bytes > 0 && (bytes + size > limit || inPartition + size > perPartition)) break;
        bytes += size;
        partitionBytes.set(pk, inPartition + size);
        const list = byTopic.get(m.topic) ?? [];
        list.push({ key: m.key, value: m.value, partition: m.partition });
        byTopic.set(m.topic, list);
      }
      await producer.sendBatch({ acks: -1, topicMessages: [...byTopic].map(([topic, msgs]) => ({ topic, messages: msgs })) });
      options.onProgress?.(i);
    }
  } finally {
    await producer.disconnect();
  }
}

/**
 * Offsets records will get on topics that only this process writes, starting
 * from their (checked) end offsets: lets a replay put coordinates into events
 * before writing them in bulk.
 */
export class OffsetAllocator {
  private readonly next = new Map<string, number>();

  constructor(start: ReadonlyMap<string, number> = new Map()) {
    for (const [k, v] of start) this.next.set(k, v);
  }

  take(topic: string, partition: number): number {
    const key = `${topic}:${partition}`;
    const offset = this.next.get(key) ?? 0;
    this.next.set(key, offset + 1);
    return offset;
  }

  /** Expected end offset per `topic:partition` once everything taken is written. */
  ends(): Map<string, number> {
    return new Map(this.next);
  }
}

const defaultPartitioner = Partitioners.DefaultPartitioner();

const partitionMetadataBySize = new Map<number, { partitionId: number; leader: number; partitionErrorCode: number; replicas: number[]; isr: number[] }[]>();

/** The partition the live runners' producers (kafkajs DefaultPartitioner, murmur2 of the key) give a keyed record. */
export function keyPartition(topic: string, key: string, partitions: number): number {
  let partitionMetadata = partitionMetadataBySize.get(partitions);
  if (!partitionMetadata) {
    partitionMetadata = Array.from({ length: partitions }, (_, partitionId) => ({ partitionId, leader: 0, partitionErrorCode: 0, replicas: [0], isr: [0] }));
    partitionMetadataBySize.set(partitions, partitionMetadata);
  }
  return defaultPartitioner({ topic, partitionMetadata, message: { key, value: null } });
}
