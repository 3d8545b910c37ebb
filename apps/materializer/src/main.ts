import { errorMessage, isRetriable, Logger } from '@srpo/core';
import { loadMaterializerConfig } from './materializer-config';
import { Materializer } from './materializer.service';

async function main(): Promise<void> {
  const log = new Logger('materializer');
  let config;
  try {
    config = loadMaterializerConfig();
  } catch (e) {
    process.stderr.write(`materializer: ${errorMessage(e)}\n`);
    process.exit(2);
  }
  let materializer = new Materializer(config);
  let stopping = false;
  const shutdown = (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info('shutting down', { signal });
    materializer.stop().then(
      () => process.exit(0),
      (e) => {
        log.error('shutdown failed', { error: errorMessage(e) });
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.on('SIGINT', () => shutdown('SIGINT'));
  // A cluster that is restarting, or topics another instance is creating right now, are
  // transient: keep trying instead of exiting.
  for (let attempt = 1; !stopping; attempt++) {
    try {
      await materializer.start();
      return;
    } catch (e) {
      if (!isRetriable(e)) throw e;
      log.warn('start failed; retrying', { attempt, error: errorMessage(e) });
      await materializer.stop().catch(() => undefined);
      materializer = new Materializer(config);
      await new Promise((r) => setTimeout(r, Math.min(10_000, 500 * attempt)));
    }
  }
}

void main().catch((e) => {
  process.stderr.write(`materializer: ${errorMessage(e)}\n`);
  process.exit(1);
});
