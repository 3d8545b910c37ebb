import { errorMessage, isRetriable, Logger, onShutdownSignals } from '@srpo/core';
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
  const signals = onShutdownSignals(() => materializer.stop(), log);
  // A cluster that is restarting, or topics another instance is creating right now, are
  // transient: keep trying instead of exiting.
  for (let attempt = 1; !signals.stopping; attempt++) {
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
