import { Logger } from '@srpo/core';
import type { CrashPoint } from './learner-config';

/**
 * TEST-ONLY fault injection (SRPO_CRASH_AT, SRPO_SLOW_MICRO_BATCH_MS). `reached(point)` is called at
 * every step boundary of an update; when the configured point is reached the
 * process is killed with SIGKILL, so nothing after the boundary runs (no
 * cleanup, no flush): exactly what a crash or an OOM kill does. Used by the
 * kill-at-each-step recovery tests; never set in production.
 *
 * `slowPiece()` is called at each yield point of an update (after every micro-batch, pass
 * and epoch): with `slowMicroBatchMs` > 0 it blocks the event loop that long, as a slow
 * micro-batch of native TensorFlow does, so a small model's update can outlast the session
 * timeout (the heartbeat test).
 */
export class FaultInjector {
  private readonly log = new Logger('fault-injection');

  constructor(
    readonly crashAt: CrashPoint | undefined,
    private readonly kill: () => void = () => process.kill(process.pid, 'SIGKILL'),
    readonly slowMicroBatchMs = 0,
  ) {}

  /** Blocks the event loop for `slowMicroBatchMs` (a busy wait: no timer or I/O runs meanwhile). */
  slowPiece(): void {
    const end = Date.now() + this.slowMicroBatchMs;
    while (Date.now() < end);
  }

  reached(point: CrashPoint, fields: Record<string, unknown> = {}): void {
    if (this.crashAt !== point) return;
    this.log.warn('SRPO_CRASH_AT reached: killing the process', { point, ...fields });
    this.kill();
  }
}
