/** What the checks judge and report: results, and the host they read the machine through. */

/**
 * `required`: the demo or `npm run setup` cannot work without it (exit code 1).
 * `optional`: one feature or test needs it. `info`: state worth knowing, not a
 * problem (the local broker is started on demand).
 */
export type DoctorLevel = 'required' | 'optional' | 'info';

export interface DoctorResult {
  name: string;
  level: DoctorLevel;
  ok: boolean;
  detail: string;
  /** The shell line that fixes a failed check; absent when ok. */
  fix?: string;
  /** False when the thing is absent (printed as MISSING); a wrong version or value prints as FAIL. */
  found?: boolean;
}

export interface CommandOutcome {
  /** Exit status; null when the command did not start, timed out or died of a signal. */
  status: number | null;
  signal: string | null;
  stdout: string;
  stderr: string;
  /** `ENOENT` (not on PATH), `ETIMEDOUT`, ... when spawning failed or timed out. */
  error?: string;
}

export interface RunOptions {
  timeoutMs: number;
  cwd?: string;
  /** Replaces the host's environment for this command (PATH lookup included). */
  env?: Readonly<Record<string, string | undefined>>;
}

export interface ProbeOutcome {
  ok: boolean;
  detail: string;
}

/** Everything the checks read from the machine. */
export interface DoctorHost {
  /** The environment the checks judge (and the commands run with). */
  env: Readonly<Record<string, string | undefined>>;
  /** The repository root. */
  root: string;
  /** The running Node.js: its version is what `engines` is checked against. */
  nodeVersion: string;
  nodePath: string;
  /** Effective uid; undefined where the platform has none. Decides `sudo` / `as root:` in fix lines. */
  uid: number | undefined;
  /** Compiled tf-backend module for the child process; undefined when the project is not built. */
  backendModule: string | undefined;
  run(command: string, args: readonly string[], options: RunOptions): CommandOutcome;
  /** The command's path on the host's PATH, or undefined. */
  which(command: string): string | undefined;
  exists(file: string): boolean;
  isExecutable(file: string): boolean;
  readText(file: string): string | undefined;
  listDir(dir: string): string[];
  /** Asks the cluster in KAFKA_BROKERS (with the same TLS/SASL variables as the apps) to describe itself. */
  kafkaCluster(timeoutMs: number): Promise<ProbeOutcome>;
}
