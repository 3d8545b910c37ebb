import { spawn } from 'child_process';
import * as fs from 'fs';
import * as path from 'path';
import { Command } from 'commander';
import { repoRoot } from '@srpo/core';
import { addFlags, flagsToEnv, GATEWAY_FLAGS, LEARNER_FLAGS, MATERIALIZER_FLAGS, SERVE_FLAGS, type FlagSpec } from './app-flags';

/** The child's environment: the CLI's, with the flags' variables on top (a flag wins; an unset flag leaves the variable alone). */
export function childEnvironment(
  env: Readonly<Record<string, string | undefined>>,
  overrides: Readonly<Record<string, string | undefined>>,
): Record<string, string> {
  const childEnv: Record<string, string> = {};
  for (const [k, v] of Object.entries(env)) if (v !== undefined) childEnv[k] = v;
  for (const [k, v] of Object.entries(overrides)) if (v !== undefined) childEnv[k] = v;
  return childEnv;
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
  const childEnv = childEnvironment(env, overrides);
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

/** Which demo entry `srpo demo` runs: `--llm` (anywhere among the arguments) picks the LLM demo, and is not passed on. */
export function demoEntry(args: readonly string[]): { entry: string; args: string[] } {
  if (!args.includes('--llm')) return { entry: 'agents/src/demo/demo.main.js', args: [...args] };
  return { entry: 'agents/src/llm-demo/llm-demo.main.js', args: args.filter((a) => a !== '--llm') };
}

/**
 * `srpo demo`: the agents app's demo (apps/agents/src/demo/demo.main.ts), run as a process; its
 * options (`srpo demo --help`) are parsed there. `srpo demo --llm`: the LLM demo
 * (apps/agents/src/llm-demo/llm-demo.main.ts; `srpo demo --llm --help`).
 */
export function demoCommand(env: Readonly<Record<string, string | undefined>> = process.env): Command {
  return new Command('demo')
    .description(
      'train fixed, joint and routed multi-agent workflows end to end over Kafka, with live progress; --llm: a real LLM learns word problems through srpo up (srpo demo [--llm] --help for the options)',
    )
    .helpOption(false)
    .allowUnknownOption()
    .allowExcessArguments()
    .argument('[options...]', "the demo's options: --seconds, --target, --updates, --serve, --model; with --llm, the LLM demo's")
    .action((args: string[]) => {
      const run = demoEntry(args);
      return runApp(run.entry, env, {}, run.args);
    });
}

/** A command that runs `entry` with its flags (`specs`) put in the child's environment. */
function appCommand(name: string, description: string, entry: string, specs: readonly FlagSpec[], env: Readonly<Record<string, string | undefined>>): Command {
  const cmd = new Command(name).description(`${description}; every flag sets the variable named in its help, over the environment`);
  addFlags(cmd, specs);
  return cmd.action((opts: Record<string, unknown>) => runApp(entry, env, flagsToEnv(specs, opts)));
}

/**
 * `srpo learner`: runs the learner app (apps/learner) in the foreground: one policy's updates,
 * checkpoints, audit store and HTTP API. Flags override its variables.
 */
export function learnerCommand(env: Readonly<Record<string, string | undefined>> = process.env): Command {
  return appCommand(
    'learner',
    'train one policy on its ready groups (SRPO updates, checkpoints, audit store, HTTP API)',
    'learner/src/main.js',
    LEARNER_FLAGS,
    env,
  );
}

/** `srpo materializer`: runs the materializer app (apps/materializer): raw events into sets and groups. */
export function materializerCommand(env: Readonly<Record<string, string | undefined>> = process.env): Command {
  return appCommand('materializer', 'build sets and advantage groups from the raw events (exactly once)', 'materializer/src/main.js', MATERIALIZER_FLAGS, env);
}

/**
 * `srpo serve`: runs the serve app (apps/serve) in the foreground: the policies behind an
 * OpenAI-compatible API, following their newest versions. Ctrl-C stops it cleanly.
 */
export function serveCommand(env: Readonly<Record<string, string | undefined>> = process.env): Command {
  return appCommand(
    'serve',
    'serve policies over an OpenAI-compatible API (/v1/models, /v1/chat/completions, /v1/completions), following their newest versions',
    'serve/src/main.js',
    SERVE_FLAGS,
    env,
  );
}

/** `srpo gateway`: runs the gateway app (apps/gateway): an OpenAI-compatible proxy that records every completion as an AgentOutput. */
export function gatewayCommand(env: Readonly<Record<string, string | undefined>> = process.env): Command {
  return appCommand(
    'gateway',
    'an OpenAI-compatible proxy in front of srpo serve, vLLM or SGLang that records every completion choice as an AgentOutput event',
    'gateway/src/main.js',
    GATEWAY_FLAGS,
    env,
  );
}
