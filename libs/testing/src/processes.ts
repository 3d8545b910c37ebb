import { ChildProcess, execFile, spawn } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { repoRoot } from '@srpo/core';

let stateDir: string | undefined;

/**
 * Local state copies of the apps a test process starts (SRPO_STATE_DIR), unless a test names
 * its own: one directory per test process, removed when it exits, so runs leave nothing behind.
 */
function testStateDir(): string {
  if (!stateDir) {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-test-state-'));
    stateDir = dir;
    process.once('exit', () => fs.rmSync(dir, { recursive: true, force: true }));
  }
  return stateDir;
}

/**
 * The stream client the broker suites run on: `SRPO_KAFKA_CLIENT` passed through from the test
 * run (kafkajs when unset), for the apps tests start in-process or as child processes.
 */
export function streamClientEnv(): Record<string, string> {
  return process.env.SRPO_KAFKA_CLIENT ? { SRPO_KAFKA_CLIENT: process.env.SRPO_KAFKA_CLIENT } : {};
}

/**
 * Starts a compiled app (`dist/apps/<app>/src/main.js`, built by `npm run build`,
 * which `npm test` runs first) as a child process, so tests can SIGKILL it.
 */
export function spawnApp(app: string, env: Record<string, string>, logFile?: string): ChildProcess {
  const entry = path.join(repoRoot(), 'dist', 'apps', app, 'src', 'main.js');
  if (!fs.existsSync(entry)) throw new Error(`${entry} missing: run \`npm run build\` first`);
  const out = logFile ? fs.openSync(logFile, 'a') : 'ignore';
  return spawn(process.execPath, [entry], {
    // SRPO_KAFKA_CLIENT passes through, so the broker suites can run on either stream client.
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', SRPO_STATE_DIR: testStateDir(), ...streamClientEnv(), ...env },
    stdio: ['ignore', out, out],
  });
}

export function waitForExit(child: ChildProcess): Promise<number | null> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(child.exitCode);
  return new Promise((resolve) => child.once('exit', (code) => resolve(code)));
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/**
 * Runs a command to completion without blocking the event loop (unlike spawnSync): a blocked
 * loop misses a server closing idle keep-alive sockets, and an HTTP client's next request then
 * hits a closed one. Resolves with stdout; rejects with both streams on a non-zero exit.
 */
export function runCommand(command: string, args: readonly string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    const p = spawn(command, [...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    p.stdout.on('data', (d: Buffer) => (out += d.toString()));
    p.stderr.on('data', (d: Buffer) => (err += d.toString()));
    p.once('error', reject);
    p.once('exit', (code) => (code === 0 ? resolve(out) : reject(new Error(`${command} ${args[0] ?? ''} failed (${code}):\n${out}\n${err}`))));
  });
}

/** What one run of the CLI gave: its exit code and both streams. */
export interface CliRun {
  code: number;
  stdout: string;
  /** Without native TensorFlow's start-up notices (absl, oneDNN), which go to stderr too. */
  stderr: string;
}

/** Runs the built CLI (`bin/srpo.js`) with exactly `env`; resolves with its exit code and output, never rejects on a failing exit. */
export function runSrpo(args: readonly string[], env: NodeJS.ProcessEnv, timeoutMs = 120_000): Promise<CliRun> {
  return new Promise((resolve, reject) => {
    execFile('node', [path.join(repoRoot(), 'bin', 'srpo.js'), ...args], { env, timeout: timeoutMs, maxBuffer: 64 << 20 }, (error, stdout, stderr) => {
      // A kill (the timeout) or a failure to start has no exit code: that is an error of the test, not a result.
      if (error && typeof error.code !== 'number') reject(new Error(`srpo ${args.join(' ')}: ${error.message}`));
      else
        resolve({
          code: error ? (error.code as number) : 0,
          stdout,
          stderr: stderr
            .split('\n')
            .filter((l) => !/^(WARNING: All log messages before absl|I0000 |W0000 )/.test(l))
            .join('\n'),
        });
    });
  });
}

/** True while a process with this PID exists (signal 0 checks without signalling). */
export function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** The roles `srpo up` starts, in its log view's names. */
export const UP_ROLES = ['materializer', 'learner', 'serve', 'gateway'] as const;

/** Each role's PID from `srpo up`'s `<role> started (pid N)` lines; throws naming the missing role, with `where` (a log path or an excerpt). */
export function upChildPids(log: string, where: string): Record<(typeof UP_ROLES)[number], number> {
  const found: Partial<Record<(typeof UP_ROLES)[number], number>> = {};
  for (const role of UP_ROLES) {
    const m = new RegExp(`^${role}\\s+started \\(pid (\\d+)\\)$`, 'm').exec(log);
    if (!m) throw new Error(`no pid line for ${role} in ${where}`);
    found[role] = Number(m[1]);
  }
  return found as Record<(typeof UP_ROLES)[number], number>;
}
