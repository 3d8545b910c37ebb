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
 * Runs an entry of an app (`dist/apps/<entry>`, e.g. `serve/src/main.js`) in the foreground
 * with `overrides` on top of the environment and `args` as its arguments, and exits with its
 * code. The CLI never imports another app's code: it launches it.
 *
 * The child gets its own process group, so a terminal's Ctrl-C reaches only the CLI, which
 * forwards each SIGINT and SIGTERM exactly once (the demo counts them: the second one kills).
 */
export async function runApp(
  entry: string,
  env: Readonly<Record<string, string | undefined>>,
  overrides: Record<string, string | undefined>,
  args: readonly string[] = [],
): Promise<void> {
  const file = path.join(repoRoot(), 'dist', 'apps', entry);
  if (!fs.existsSync(file)) throw new Error(`${file} is missing: run npm run build first`);
  const childEnv: Record<string, string> = {};
  for (const [k, v] of Object.entries(env)) if (v !== undefined) childEnv[k] = v;
  // An unset flag leaves the environment's value alone.
  for (const [k, v] of Object.entries(overrides)) if (v !== undefined) childEnv[k] = v;
  const child = spawn(process.execPath, [file, ...args], { env: childEnv, stdio: 'inherit', detached: true });
  const onInt = () => child.kill('SIGINT');
  const onTerm = () => child.kill('SIGTERM');
  // Should the CLI itself go away, the child must not outlive it.
  const onExit = () => child.kill('SIGKILL');
  process.on('SIGINT', onInt);
  process.on('SIGTERM', onTerm);
  process.on('exit', onExit);
  const code = await new Promise<number>((resolve) => child.once('exit', (c, s) => resolve(c ?? (s ? 130 : 1))));
  process.removeListener('SIGINT', onInt);
  process.removeListener('SIGTERM', onTerm);
  process.removeListener('exit', onExit);
  process.exitCode = code;
}

/**
 * `srpo demo`: the agents app's demo (apps/agents/src/demo/demo.main.ts), run as a process; its
 * options (`srpo demo --help`) are parsed there.
 */
export function demoCommand(env: Readonly<Record<string, string | undefined>> = process.env): Command {
  return new Command('demo')
    .description('train fixed, joint and routed multi-agent workflows end to end over Kafka, with live progress (srpo demo --help for its options)')
    .helpOption(false)
    .allowUnknownOption()
    .allowExcessArguments()
    .argument('[options...]', "the demo's options: --seconds, --target, --updates, --serve, --model")
    .action((args: string[]) => runApp('agents/src/demo/demo.main.js', env, {}, args));
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
    .action((opts: { policies?: string; port?: number; host?: string; checkpoints?: string }) =>
      runApp('serve/src/main.js', env, {
        SRPO_SERVE_POLICIES: opts.policies,
        SRPO_SERVE_PORT: opts.port === undefined ? undefined : String(opts.port),
        SRPO_SERVE_HOST: opts.host,
        SRPO_CHECKPOINT_DIR: opts.checkpoints === undefined ? undefined : path.resolve(opts.checkpoints),
      }),
    );
}

/**
 * `srpo gateway`: runs the gateway app (apps/gateway) in the foreground: an OpenAI-compatible
 * proxy that records every completion as an AgentOutput. Flags override its variables.
 */
export function gatewayCommand(env: Readonly<Record<string, string | undefined>> = process.env): Command {
  return new Command('gateway')
    .description('an OpenAI-compatible proxy in front of srpo serve, vLLM or SGLang that records every completion choice as an AgentOutput event')
    .option('--upstream <url>', "the upstream's OpenAI base URL (default SRPO_GATEWAY_UPSTREAM or http://127.0.0.1:8000/v1)")
    .option('--port <n>', 'port (default SRPO_GATEWAY_PORT or 8100)', port)
    .option('--host <addr>', 'address to listen on (default SRPO_GATEWAY_HOST or 127.0.0.1)')
    .action((opts: { upstream?: string; port?: number; host?: string }) =>
      runApp('gateway/src/main.js', env, {
        SRPO_GATEWAY_UPSTREAM: opts.upstream,
        SRPO_GATEWAY_PORT: opts.port === undefined ? undefined : String(opts.port),
        SRPO_GATEWAY_HOST: opts.host,
      }),
    );
}
