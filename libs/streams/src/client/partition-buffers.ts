import type { FetchedRecord } from './stream-client';

interface Entry {
  topic: string;
  partition: number;
  /** Buffered records, strictly increasing offsets. */
  records: FetchedRecord[];
  /** Next offset not yet resolved; records below it are done and dropped. */
  position?: number;
  /** Bumped when the entry's buffer is dropped (seek, reopen): a taken batch from before is not given back. */
  epoch: number;
}

/** Records taken for one batch. */
export interface TakenRecords {
  topic: string;
  partition: number;
  records: FetchedRecord[];
  epoch: number;
}

/**
 * Per-partition buffers between a record-at-a-time consumer stream and the runner's
 * per-partition batches, robust to re-delivery: a stream that rewinds (to the committed
 * offsets after a rebalance, or when reopened for a seek) hands over records again, and
 * each partition's buffer keeps one copy of each offset, in order, none below what the
 * runner resolved. Pure: no client, no timers.
 */
export class PartitionBuffers {
  private readonly entries = new Map<string, Entry>();
  private cursor = 0;
  private buffered = 0;

  /** Records buffered over all partitions. */
  get size(): number {
    return this.buffered;
  }

  private entry(topic: string, partition: number): Entry {
    const key = `${topic}\u0000${partition}`;
    let e = this.entries.get(key);
    if (!e) {
      e = { topic, partition, records: [], epoch: 0 };
      this.entries.set(key, e);
    }
    return e;
  }

  /** Appends a fetched record; one at or below the buffer's tail is a re-delivery and replaces the tail from there. */
  push(topic: string, partition: number, record: FetchedRecord): void {
    const e = this.entry(topic, partition);
    if (e.position !== undefined && record.offset < e.position) return;
    while (e.records.length > 0 && e.records[e.records.length - 1].offset >= record.offset) {
      e.records.pop();
      this.buffered--;
    }
    e.records.push(record);
    this.buffered++;
  }

  /** Takes every buffered record of the next partition that has some (partitions in turn), or undefined. */
  take(): TakenRecords | undefined {
    const all = [...this.entries.values()];
    for (let i = 0; i < all.length; i++) {
      const e = all[(this.cursor + i) % all.length];
      if (e.records.length === 0) continue;
      this.cursor = (this.cursor + i + 1) % all.length;
      const records = e.records;
      e.records = [];
      this.buffered -= records.length;
      return { topic: e.topic, partition: e.partition, records, epoch: e.epoch };
    }
    return undefined;
  }

  /** Records up to `offset` are done. */
  resolve(topic: string, partition: number, offset: number): void {
    const e = this.entry(topic, partition);
    e.position = Math.max(e.position ?? 0, offset + 1);
  }

  /** Puts back what a batch left unresolved (merged with what arrived meanwhile), unless its buffer was dropped since. */
  giveBack(taken: TakenRecords): void {
    const e = this.entries.get(`${taken.topic}\u0000${taken.partition}`);
    if (!e || e.epoch !== taken.epoch) return;
    const byOffset = new Map<number, FetchedRecord>();
    for (const r of [...taken.records, ...e.records]) if (e.position === undefined || r.offset >= e.position) byOffset.set(r.offset, r);
    this.buffered -= e.records.length;
    e.records = [...byOffset.values()].sort((a, b) => a.offset - b.offset);
    this.buffered += e.records.length;
  }

  /** Rewinds one partition to `offset`: its buffer is dropped and records from `offset` on are taken again. */
  seek(topic: string, partition: number, offset: number): void {
    const e = this.entry(topic, partition);
    this.buffered -= e.records.length;
    e.records = [];
    e.position = offset;
    e.epoch++;
  }

  /** Drops every buffer (the stream is reopened); positions stay. */
  clear(): void {
    for (const e of this.entries.values()) {
      e.records = [];
      e.epoch++;
    }
    this.buffered = 0;
  }

  /** Forgets partitions this member no longer owns, with their positions (another member may move them on). */
  retainPartitions(partitions: ReadonlySet<number>): void {
    for (const [key, e] of this.entries) {
      if (partitions.has(e.partition)) continue;
      this.buffered -= e.records.length;
      this.entries.delete(key);
    }
  }
}
