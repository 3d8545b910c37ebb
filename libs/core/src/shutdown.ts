import { errorMessage } from './errors';
import { Logger } from './logger';

export interface GracefulShutdown {
  /** Stops once (later calls are ignored), then exits 0, or 1 when stopping failed. */
  shutdown(reason: string): void;
  readonly stopping: boolean;
}

/**
 * The apps' one shutdown path: SIGTERM and SIGINT run `stop` once and exit with
 * its outcome, so a process manager sees a clean stop as exit code 0.
 */
export function onShutdownSignals(stop: () => Promise<void>, log: Logger): GracefulShutdown {
  let stopping = false;
  const shutdown = (reason: string): void => {
    if (stopping) return;
    stopping = true;
    log.info('shutting down', { signal: reason });
    stop().then(
      () => process.exit(0),
      (e) => {
        log.error('shutdown failed', { error: errorMessage(e) });
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.on('SIGINT', () => shutdown('SIGINT'));
  return {
    shutdown,
    get stopping() {
      return stopping;
    },
  };
}
