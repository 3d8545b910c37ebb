import { errorMessage, initTfBackend, Logger, SrpoError } from '@srpo/core';
import { applyAgentsConfig, loadAgentsConfig, type AgentsConfig } from './agents-config';
import { AgentsService } from './agents.service';

/** Boots the agents: config (fails fast), backend, policies, then the play loop until SIGTERM/SIGINT. */
async function main(): Promise<void> {
  const log = new Logger('agents');
  let config: AgentsConfig;
  try {
    config = loadAgentsConfig();
  } catch (e) {
    process.stderr.write(`agents: ${errorMessage(e)}\n`);
    process.exit(2);
  }
  applyAgentsConfig(config);
  await initTfBackend(config.backend);
  const agents = new AgentsService(config);
  let stopping = false;
  const shutdown = (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info('shutting down', { signal });
    agents.stop().then(
      () => process.exit(0),
      (e) => {
        log.error('shutdown failed', { error: errorMessage(e) });
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.on('SIGINT', () => shutdown('SIGINT'));
  await agents.start();
  await agents.done();
  if (!stopping) shutdown('done');
}

void main().catch((e: unknown) => {
  new Logger('agents').error('agents failed', { error: errorMessage(e), code: e instanceof SrpoError ? e.code : undefined });
  process.exit(1);
});
