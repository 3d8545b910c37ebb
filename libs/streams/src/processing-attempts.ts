import { ErrorCode, SrpoError } from '@srpo/core';
import type { KafkaCoordinates } from '@srpo/events';

/** Default processing attempts of one record before it is dead-lettered as poison. */
export const DEFAULT_MAX_PROCESSING_ATTEMPTS = 3;

/** A record the processor threw on in every one of its attempts. */
export interface PoisonRecord {
  attempts: number;
  /** The last throw's message (the dead letter's reason). */
  error: string;
}

/**
 * Counts, per input record (topic, partition, offset), how often the processor threw on it,
 * so that a record that makes it throw every time is dead-lettered after `maxAttempts`
 * instead of restarting its partition forever (a poison record). Only the processor's own
 * throws are counted here: the loop does not report infrastructure failures (an aborted or
 * fenced transaction, an unreachable broker) or errors the processor marks retriable.
 *
 * Counts are forgotten once the partition's position passes the record (its transaction
 * committed, with the record processed or dead-lettered) and when the partition is no
 * longer assigned (its next owner counts afresh). At most a few records per partition are
 * counted at a time: a chunk stops at its first throw.
 */
export class ProcessingAttempts {
  /** `topic` NUL `partition` -> offset -> failures so far. */
  private readonly failures = new Map<string, Map<number, PoisonRecord>>();

  constructor(readonly maxAttempts: number = DEFAULT_MAX_PROCESSING_ATTEMPTS) {
    if (!Number.isInteger(maxAttempts) || maxAttempts < 1)
      throw new SrpoError(ErrorCode.CONFIG_INVALID, `maxProcessingAttempts: must be an integer >= 1, got ${maxAttempts}`, { field: 'maxProcessingAttempts' });
  }

  /** Records one throw of the processor on `source`; returns the record's attempts so far. */
  failed(source: KafkaCoordinates, error: string): number {
    const key = partitionKey(source.topic, source.partition);
    let offsets = this.failures.get(key);
    if (!offsets) this.failures.set(key, (offsets = new Map<number, PoisonRecord>()));
    const attempts = (offsets.get(source.offset)?.attempts ?? 0) + 1;
    offsets.set(source.offset, { attempts, error });
    return attempts;
  }

  /** The record's failures when it has used up its attempts: it is dead-lettered instead of processed. */
  exhausted(source: KafkaCoordinates): PoisonRecord | undefined {
    const failure = this.failures.get(partitionKey(source.topic, source.partition))?.get(source.offset);
    return failure && failure.attempts >= this.maxAttempts ? failure : undefined;
  }

  /** The partition's committed position moved to `nextOffset`: records before it are done. */
  committed(topic: string, partition: number, nextOffset: number): void {
    const key = partitionKey(topic, partition);
    const offsets = this.failures.get(key);
    if (!offsets) return;
    for (const offset of offsets.keys()) if (offset < nextOffset) offsets.delete(offset);
    if (offsets.size === 0) this.failures.delete(key);
  }

  /** Forgets the counts of partitions this member no longer owns. */
  retain(partitions: ReadonlySet<number>): void {
    for (const key of [...this.failures.keys()]) if (!partitions.has(Number(key.slice(key.lastIndexOf('\0') + 1)))) this.failures.delete(key);
  }

  /** Records counted, for tests and metrics. */
  get size(): number {
    let n = 0;
    for (const offsets of this.failures.values()) n += offsets.size;
    return n;
  }
}

function partitionKey(topic: string, partition: number): string {
  return `${topic}\0${partition}`;
}
