import { Logger } from '@srpo/core';
import type { CrashPoint } from './learner-config';

/**
 * TEST-ONLY fault injection (SRPO_CRASH_AT). `reached(point)` is called at
 * every step boundary of an update; when the configured point is reached the
 * process is killed with SIGKILL, so nothing after the boundary runs (no
 * cleanup, no flush): exactly what a crash or an OOM kill does. Used by the
 * kill-at-each-step recovery tests; never set in production.
 */
export class FaultInjector {
  private readonly log = new Logger('fault-injection');

  constructor(
    readonly crashAt: CrashPoint | undefined,
    private readonly kill: () => void = () => process.kill(process.pid, 'SIGKILL'),
  ) {}

  reached(point: CrashPoint, fields: Record<string, unknown> = {}): void {
    if (this.crashAt !== point) return;
    this.log.warn('SRPO_CRASH_AT reached: killing the process', { point, ...fields });
    this.kill();
  }
}
