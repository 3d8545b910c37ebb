import { spawn } from 'child_process';
import * as fs from 'fs';
import * as path from 'path';
import { Command, InvalidArgumentError } from 'commander';
import { repoRoot } from '@srpo/core';

function port(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0 || n > 65535) throw new InvalidArgumentError('must be a port number in [0, 65535]');
  return n;
}

/**
 * `srpo serve`: runs the serve app (apps/serve) in the foreground: the policies behind an
 * OpenAI-compatible API, following their newest versions. Flags override the app's
 * variables; everything else (Kafka, topics, checkpoints) comes from the environment, as
 * for every app. Ctrl-C stops it cleanly.
 */
export function serveCommand(env: Readonly<Record<string, string | undefined>> = process.env): Command {
  return new Command('serve')
    .description('serve policies over an OpenAI-compatible API (/v1/models, /v1/chat/completions, /v1/completions), following their newest versions')
    .option('--policies <ids>', 'comma-separated policy ids to serve (default SRPO_SERVE_POLICIES or actor)')
    .option('--port <n>', 'port (default SRPO_SERVE_PORT or 8000)', port)
    .option('--host <addr>', 'address to listen on (default SRPO_SERVE_HOST or 127.0.0.1)')
    .option('--checkpoints <dir>', "the learners' checkpoint root (default SRPO_CHECKPOINT_DIR or .srpo/checkpoints)")
    .action(async (opts: { policies?: string; port?: number; host?: string; checkpoints?: string }) => {
      const entry = path.join(repoRoot(), 'dist', 'apps', 'serve', 'src', 'main.js');
      if (!fs.existsSync(entry)) throw new Error(`${entry} is missing: run npm run build first`);
      const childEnv: Record<string, string> = {};
      for (const [k, v] of Object.entries(env)) if (v !== undefined) childEnv[k] = v;
      if (opts.policies !== undefined) childEnv.SRPO_SERVE_POLICIES = opts.policies;
      if (opts.port !== undefined) childEnv.SRPO_SERVE_PORT = String(opts.port);
      if (opts.host !== undefined) childEnv.SRPO_SERVE_HOST = opts.host;
      if (opts.checkpoints !== undefined) childEnv.SRPO_CHECKPOINT_DIR = path.resolve(opts.checkpoints);
      const child = spawn(process.execPath, [entry], { env: childEnv, stdio: 'inherit' });
      const forward = (signal: NodeJS.Signals) => () => child.kill(signal);
      const onInt = forward('SIGINT');
      const onTerm = forward('SIGTERM');
      process.on('SIGINT', onInt);
      process.on('SIGTERM', onTerm);
      const code = await new Promise<number>((resolve) => child.once('exit', (c, s) => resolve(c ?? (s ? 128 + 2 : 1))));
      process.removeListener('SIGINT', onInt);
      process.removeListener('SIGTERM', onTerm);
      process.exitCode = code;
    });
}
