import type { CommandOutcome, DoctorHost, DoctorLevel, DoctorResult } from './doctor-host';

/** What every check shares: time limits, result builders, failure wording and fix lines. */

export const SHORT_MS = 15_000;
/** Loading libtensorflow and probing Dawn takes seconds on a busy machine; a hang must still end. */
export const TF_CHILD_MS = 90_000;
export const KAFKA_PROBE_MS = 10_000;

export type Check = (host: DoctorHost) => DoctorResult[] | Promise<DoctorResult[]>;

export function firstLine(text: string): string {
  return (
    text
      .split('\n')
      .map((l) => l.trim())
      .find((l) => l.length > 0) ?? ''
  );
}

/** Why a command gave no usable answer, in words. */
export function failure(command: string, out: CommandOutcome, timeoutMs: number): string {
  if (out.error === 'ENOENT') return `${command} not found on PATH`;
  if (out.error === 'ETIMEDOUT') return `${command} did not answer within ${Math.round(timeoutMs / 1000)}s`;
  if (out.error) return `${command} could not run (${out.error})`;
  if (out.signal) return `${command} died of ${out.signal}`;
  const said = firstLine(out.stderr) || firstLine(out.stdout);
  return `${command} exited ${out.status}${said ? `: ${said}` : ''}`;
}

/** {@link failure} for a check named after its command: the line already names it. */
export function toolFailure(command: string, out: CommandOutcome, timeoutMs: number): string {
  return out.error === 'ENOENT' ? 'not found on PATH' : failure(command, out, timeoutMs);
}

export function ok(name: string, level: DoctorLevel, detail: string): DoctorResult {
  return { name, level, ok: true, detail };
}

export function bad(name: string, level: DoctorLevel, detail: string, fix: string, found = true): DoctorResult {
  return { name, level, ok: false, detail, fix, found };
}

/**
 * A system fix line for this user: as is for root, through sudo when there
 * is one, otherwise marked `as root:` (the user cannot run it as they are).
 */
export function asRoot(host: Pick<DoctorHost, 'uid' | 'which'>, line: string): string {
  if (host.uid === 0) return line;
  if (host.which('sudo')) return /[|&;]/.test(line) ? `sudo bash -c '${line}'` : `sudo ${line}`;
  return `as root: ${line}`;
}

/** The repo's install scripts call sudo themselves; only without root and sudo do they need a root shell. */
export function rootScript(host: DoctorHost, line: string): string {
  if (host.uid === 0 || host.which('sudo')) return line;
  return `as root: ${line}`;
}

export function apt(host: DoctorHost, packages: string): string {
  return asRoot(host, `apt-get install -y ${packages}`);
}

export const NODE_FIX = 'curl -fsSL https://deb.nodesource.com/setup_22.x | bash - && apt-get install -y nodejs';
