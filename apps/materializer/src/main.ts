import { errorMessage, isRetriable, Logger, onShutdownSignals, retry } from '@srpo/core';
import { isKafkaUnreachable } from '@srpo/events';
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
  await retry(
    async (attempt) => {
      if (attempt > 1) materializer = new Materializer(config);
      try {
        await materializer.start();
      } catch (e) {
        await materializer.stop().catch(() => undefined);
        throw e;
      }
    },
    {
      initialDelayMs: 500,
      linearStepMs: 500,
      maxDelayMs: 10_000,
      // A broker that is down stays transient here even once kafkajs's own retries gave up.
      retryIf: (e) => isRetriable(e) || isKafkaUnreachable(e),
      stopped: () => signals.stopping,
      onRetry: (e, attempt) => log.warn('start failed; retrying', { attempt, error: errorMessage(e) }),
    },
  ).catch((e) => {
    // A shutdown while waiting to retry is a normal exit.
    if (!signals.stopping) throw e;
  });
}

void main().catch((e) => {
  process.stderr.write(`materializer: ${errorMessage(e)}\n`);
  process.exit(1);
});
