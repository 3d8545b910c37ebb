import { errorMessage, initTfBackend, Logger, onShutdownSignals, SrpoError } from '@srpo/core';
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
  await initTfBackend(config.backend, config.backendSettings);
  const agents = new AgentsService(config);
  const signals = onShutdownSignals(() => agents.stop(), log);
  await agents.start();
  await agents.done();
  signals.shutdown('done');
}

void main().catch((e: unknown) => {
  new Logger('agents').error('agents failed', { error: errorMessage(e), code: e instanceof SrpoError ? e.code : undefined });
  process.exit(1);
});
