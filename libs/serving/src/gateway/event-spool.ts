import * as fs from 'fs';
import * as path from 'path';
import { ErrorCode, errorMessage, Logger, SrpoError } from '@srpo/core';
import type { AgentEvent } from '@srpo/events';

/** Where spooled events go once the broker is back: the SDK's `emitBatch`. */
export type EventSender = (events: AgentEvent[]) => Promise<unknown>;

const EVENTS = 'events.jsonl';
const SENT = 'sent';
const REJECTED = 'rejected.jsonl';

/** The spool's disk budget by default: 256 MiB of spooled batches (JSON lines). */
export const DEFAULT_SPOOL_MAX_BYTES = 256 * 1024 * 1024;

export interface EventSpoolOptions {
  /** How often a failed replay is retried (default 1 s). */
  retryMs?: number;
  /** Bytes of spooled batches the spool holds at most; an append past it is refused (default {@link DEFAULT_SPOOL_MAX_BYTES}). */
  maxBytes?: number;
}

/**
 * A local durable buffer for events that Kafka could not take, replayed in order once it can.
 *
 * - `events.jsonl` holds one batch per line (JSON). A batch is appended and fsynced before
 *   {@link append} resolves, so a spooled completion survives a crash of the gateway.
 * - `sent` holds how many lines have been written to Kafka; it is rewritten (write, fsync,
 *   rename) after each batch is acknowledged. A crash between the two resends one batch, which
 *   the materializer drops as exact duplicates.
 * - While anything is spooled, new batches are spooled behind it, so events reach Kafka in the
 *   order the gateway accepted them (an outcome never overtakes its episode's outputs).
 * - Once everything is sent, both files are cleared.
 * - **Bounded.** Memory holds each line's offset and length, never its bytes (a broker down for
 *   hours filled the heap before); the file holds at most `maxBytes`, and an append past it
 *   throws `UNAVAILABLE` (the gateway answers 503 and returns nothing unrecorded).
 * - **A batch the broker refuses for good** (an error kafkajs marks not retriable, such as
 *   `MESSAGE_TOO_LARGE`) is moved to `rejected.jsonl` with its error, counted and logged at
 *   error level, and the replay goes on: one such batch used to block every batch behind it,
 *   retried forever. Nothing is deleted: `rejected.jsonl` keeps the batch for the operator.
 */
export class EventSpool {
  private readonly log = new Logger('gateway-spool');
  /** Byte offset and length (newline excluded) of every line of `events.jsonl`. */
  private index: { offset: number; length: number }[] = [];
  private bytes = 0;
  private sent = 0;
  private draining?: Promise<void>;
  private timer?: NodeJS.Timeout;
  private readonly retryMs: number;
  readonly maxBytes: number;
  /** Batches spooled, replayed and rejected since start. */
  readonly totals = { spooled: 0, replayed: 0, rejected: 0 };

  constructor(
    private readonly dir: string,
    private readonly send: EventSender,
    options: EventSpoolOptions | number = {},
  ) {
    const o = typeof options === 'number' ? { retryMs: options } : options;
    this.retryMs = o.retryMs ?? 1000;
    this.maxBytes = o.maxBytes ?? DEFAULT_SPOOL_MAX_BYTES;
  }

  /** Reads what an earlier run left unsent, and starts replaying it. */
  open(): void {
    fs.mkdirSync(this.dir, { recursive: true });
    const file = path.join(this.dir, EVENTS);
    this.index = indexLines(file);
    this.bytes = this.index.reduce((n, l) => n + l.length + 1, 0);
    // A torn last line (a crash mid-append, never acknowledged to a client) is cut off, so appends start on a line.
    if (fs.existsSync(file) && fs.statSync(file).size !== this.bytes) fs.truncateSync(file, this.bytes);
    const sentFile = path.join(this.dir, SENT);
    this.sent = fs.existsSync(sentFile) ? Math.min(Number(fs.readFileSync(sentFile, 'utf8')) || 0, this.index.length) : 0;
    if (this.pending > 0) this.log.info('spooled events left by an earlier run; replaying them', { batches: this.pending, dir: this.dir });
    this.timer = setInterval(() => void this.drain(), this.retryMs);
    this.timer.unref();
  }

  /** Batches not yet acknowledged by Kafka. */
  get pending(): number {
    return this.index.length - this.sent;
  }

  /** Bytes the spool file holds now (acknowledged lines included until it is cleared). */
  get sizeBytes(): number {
    return this.bytes;
  }

  /** Appends one batch durably (fsync) behind everything already spooled; throws `UNAVAILABLE` when the spool is full. */
  append(events: AgentEvent[]): void {
    const line = JSON.stringify(events, (_k, v: unknown) => (typeof v === 'bigint' ? Number(v) : v));
    const length = Buffer.byteLength(line);
    if (this.bytes + length + 1 > this.maxBytes) {
      throw new SrpoError(
        ErrorCode.UNAVAILABLE,
        `the gateway's spool is full (${this.bytes} of ${this.maxBytes} bytes, ${this.pending} batches waiting for Kafka)`,
        { retriable: true },
      );
    }
    writeDurably(path.join(this.dir, EVENTS), `${line}\n`);
    this.index.push({ offset: this.bytes, length });
    this.bytes += length + 1;
    this.totals.spooled++;
  }

  /** Sends what is spooled, in order, stopping at the first retriable failure (retried on the next tick). */
  drain(): Promise<void> {
    this.draining ??= this.drainOnce()
      .catch((e) => this.log.error('spool replay failed', { error: errorMessage(e) }))
      .finally(() => (this.draining = undefined));
    return this.draining;
  }

  async close(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await this.draining;
  }

  private async drainOnce(): Promise<void> {
    while (this.pending > 0) {
      const line = this.readLine(this.sent);
      try {
        await this.send(JSON.parse(line) as AgentEvent[]);
        this.totals.replayed++;
      } catch (e) {
        if (!isPermanentRefusal(e)) {
          this.log.warn('spooled events still cannot be sent; retrying', { batches: this.pending, error: errorMessage(e) });
          return;
        }
        writeDurably(path.join(this.dir, REJECTED), `${JSON.stringify({ error: errorMessage(e), batch: JSON.parse(line) as unknown })}\n`);
        this.totals.rejected++;
        this.log.error('Kafka refused a spooled batch for good; kept in rejected.jsonl, the replay goes on', {
          error: errorMessage(e),
          file: path.join(this.dir, REJECTED),
        });
      }
      this.sent++;
      this.writeSent();
    }
    if (this.index.length > 0) this.clear();
  }

  private readLine(i: number): string {
    const { offset, length } = this.index[i];
    const buf = Buffer.alloc(length);
    const fd = fs.openSync(path.join(this.dir, EVENTS), 'r');
    try {
      fs.readSync(fd, buf, 0, length, offset);
    } finally {
      fs.closeSync(fd);
    }
    return buf.toString('utf8');
  }

  private writeSent(): void {
    const tmp = path.join(this.dir, `${SENT}.tmp`);
    writeDurably(tmp, String(this.sent), 'w');
    fs.renameSync(tmp, path.join(this.dir, SENT));
  }

  /** Everything sent: start both files afresh (events first, so a crash in between resends nothing it should not). */
  private clear(): void {
    fs.writeFileSync(path.join(this.dir, EVENTS), '');
    this.index = [];
    this.bytes = 0;
    this.sent = 0;
    this.writeSent();
    this.log.info('spool drained: every spooled event is in Kafka', { replayed: this.totals.replayed, rejected: this.totals.rejected });
  }
}

/** Writes `text` (`a`: at the end of the file, `w`: as its whole content) and fsyncs it before returning. */
function writeDurably(file: string, text: string, flag: 'a' | 'w' = 'a'): void {
  const fd = fs.openSync(file, flag);
  try {
    fs.writeSync(fd, text);
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}

/** Offsets of the complete lines of `file` (a torn last line, from a crash mid-append, is dropped: its batch was never acknowledged to a client). */
function indexLines(file: string): { offset: number; length: number }[] {
  if (!fs.existsSync(file)) return [];
  const data = fs.readFileSync(file);
  const out: { offset: number; length: number }[] = [];
  let start = 0;
  for (let i = 0; i < data.length; i++) {
    if (data[i] !== 0x0a) continue;
    if (i > start) out.push({ offset: start, length: i - start });
    start = i + 1;
  }
  return out;
}

/**
 * A refusal that sending again cannot change: a Kafka protocol error kafkajs marks not retriable
 * (MESSAGE_TOO_LARGE, INVALID_RECORD, ...), anywhere in the cause chain (kafkajs wraps it in a
 * KafkaJSNonRetriableError), or the SDK's validation and size errors. A broker out of reach (a
 * connection error, even once kafkajs's retries are spent), a timeout or anything unknown is retried.
 */
function isPermanentRefusal(error: unknown): boolean {
  if (error instanceof SrpoError) return error.code === ErrorCode.VALIDATION_FAILED || error.code === ErrorCode.PAYLOAD_TOO_LARGE;
  let e: unknown = error;
  for (let depth = 0; depth < 6 && typeof e === 'object' && e !== null; depth++) {
    const k = e as { name?: unknown; retriable?: unknown; cause?: unknown };
    if (k.name === 'KafkaJSProtocolError' && k.retriable === false) return true;
    e = k.cause === e ? undefined : k.cause;
  }
  return false;
}
