import * as fs from 'fs';
import * as path from 'path';
import { errorMessage, Logger } from '@srpo/core';
import type { AgentEvent } from '@srpo/events';

/** Where spooled events go once the broker is back: the SDK's `emitBatch`. */
export type EventSender = (events: AgentEvent[]) => Promise<unknown>;

const EVENTS = 'events.jsonl';
const SENT = 'sent';

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
 */
export class EventSpool {
  private readonly log = new Logger('gateway-spool');
  private lines: string[] = [];
  private sent = 0;
  private draining?: Promise<void>;
  private timer?: NodeJS.Timeout;
  /** Batches spooled and replayed since start. */
  readonly totals = { spooled: 0, replayed: 0 };

  constructor(
    private readonly dir: string,
    private readonly send: EventSender,
    private readonly retryMs = 1000,
  ) {}

  /** Reads what an earlier run left unsent, and starts replaying it. */
  open(): void {
    fs.mkdirSync(this.dir, { recursive: true });
    const file = path.join(this.dir, EVENTS);
    this.lines = fs.existsSync(file)
      ? fs
          .readFileSync(file, 'utf8')
          .split('\n')
          .filter((l) => l !== '')
      : [];
    const sentFile = path.join(this.dir, SENT);
    this.sent = fs.existsSync(sentFile) ? Math.min(Number(fs.readFileSync(sentFile, 'utf8')) || 0, this.lines.length) : 0;
    if (this.pending > 0) this.log.info('spooled events left by an earlier run; replaying them', { batches: this.pending, dir: this.dir });
    this.timer = setInterval(() => void this.drain(), this.retryMs);
    this.timer.unref();
  }

  /** Batches not yet acknowledged by Kafka. */
  get pending(): number {
    return this.lines.length - this.sent;
  }

  /** Appends one batch durably (fsync) behind everything already spooled. */
  append(events: AgentEvent[]): void {
    const line = JSON.stringify(events, (_k, v: unknown) => (typeof v === 'bigint' ? Number(v) : v));
    const fd = fs.openSync(path.join(this.dir, EVENTS), 'a');
    try {
      fs.writeSync(fd, `${line}\n`);
      fs.fsyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
    this.lines.push(line);
    this.totals.spooled++;
  }

  /** Sends what is spooled, in order, stopping at the first failure (retried on the next tick). */
  drain(): Promise<void> {
    this.draining ??= this.drainOnce().finally(() => (this.draining = undefined));
    return this.draining;
  }

  async close(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await this.draining;
  }

  private async drainOnce(): Promise<void> {
    while (this.pending > 0) {
      const events = JSON.parse(this.lines[this.sent]) as AgentEvent[];
      try {
        await this.send(events);
      } catch (e) {
        this.log.warn('spooled events still cannot be sent; retrying', { batches: this.pending, error: errorMessage(e) });
        return;
      }
      this.sent++;
      this.totals.replayed++;
      this.writeSent();
    }
    if (this.lines.length > 0) this.clear();
  }

  private writeSent(): void {
    const tmp = path.join(this.dir, `${SENT}.tmp`);
    const fd = fs.openSync(tmp, 'w');
    try {
      fs.writeSync(fd, String(this.sent));
      fs.fsyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
    fs.renameSync(tmp, path.join(this.dir, SENT));
  }

  /** Everything sent: start both files afresh (events first, so a crash in between resends nothing it should not). */
  private clear(): void {
    fs.writeFileSync(path.join(this.dir, EVENTS), '');
    this.lines = [];
    this.sent = 0;
    this.writeSent();
    this.log.info('spool drained: every spooled event is in Kafka', { replayed: this.totals.replayed });
  }
}
