import { errorMessage, Logger } from '@srpo/core';
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
  const materializer = new Materializer(config);
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
  await materializer.start();
}

void main().catch((e) => {
  process.stderr.write(`materializer: ${errorMessage(e)}\n`);
  process.exit(1);
});
