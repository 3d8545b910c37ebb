import { ChildProcess, spawn } from 'child_process';
import { formatLine, LineSplitter, type Role } from './log-view';
import type { ChildPlan } from './up-plan';

/** How a child ended. `expected`: it was asked to stop. */
export interface ChildExit {
  role: Role;
  code: number | null;
  signal: NodeJS.Signals | null;
  expected: boolean;
  /** It had to be SIGKILLed after the grace period. */
  killed: boolean;
}

export const describeExit = (e: ChildExit): string => (e.signal ? `signal ${e.signal}` : `exit code ${e.code}`);

/** A stop the child asked for ended well: exit code 0, or the signal it was sent, unhandled. */
export const cleanExit = (e: ChildExit): boolean => !e.killed && (e.code === 0 || e.signal === 'SIGTERM' || e.signal === 'SIGINT');

interface Running {
  plan: ChildPlan;
  child: ChildProcess;
  exited: Promise<ChildExit>;
  stopping: boolean;
  killed: boolean;
}

/**
 * Runs `srpo up`'s children: each in its own process group (a terminal's Ctrl-C reaches only
 * `srpo up`, which then stops them in order), its stdout and stderr merged into one log view.
 * Signals go to each child's own PID, never to a group or a name.
 */
export class Supervisor {
  private readonly running = new Map<Role, Running>();
  private readonly killAll = () => {
    for (const r of this.running.values()) if (r.child.exitCode === null && r.child.signalCode === null) r.child.kill('SIGKILL');
  };

  constructor(
    private readonly write: (text: string) => void,
    private readonly colour: boolean,
    /** Called once for a child that exits without being asked to. */
    private readonly onUnexpectedExit: (exit: ChildExit) => void,
  ) {
    // Should srpo up itself exit, no child may outlive it.
    process.on('exit', this.killAll);
  }

  start(plan: ChildPlan, file: string, baseEnv: Readonly<Record<string, string | undefined>>): void {
    const env: Record<string, string> = {};
    for (const [k, v] of Object.entries(baseEnv)) if (v !== undefined) env[k] = v;
    Object.assign(env, plan.env);
    const child = spawn(process.execPath, [file], { env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    const pipe = (stream: NodeJS.ReadableStream) => {
      const lines = new LineSplitter();
      stream.setEncoding('utf8');
      stream.on('data', (chunk: string) => {
        for (const line of lines.push(chunk)) this.write(formatLine(plan.role, line, this.colour) + '\n');
      });
      stream.on('end', () => {
        for (const line of lines.flush()) this.write(formatLine(plan.role, line, this.colour) + '\n');
      });
    };
    // The PID, so a user (or a test) can tell which process is which.
    if (child.pid !== undefined) this.write(formatLine(plan.role, `started (pid ${child.pid})`, this.colour) + '\n');
    pipe(child.stdout);
    pipe(child.stderr);
    const entry: Running = { plan, child, stopping: false, killed: false, exited: Promise.resolve(undefined as unknown as ChildExit) };
    entry.exited = new Promise<ChildExit>((resolve) => {
      const done = (code: number | null, signal: NodeJS.Signals | null) => {
        const exit = { role: plan.role, code, signal, expected: entry.stopping, killed: entry.killed };
        if (!entry.stopping) this.onUnexpectedExit(exit);
        resolve(exit);
      };
      child.once('exit', done);
      // A spawn that failed (no such file, no resources) never emits 'exit'.
      child.once('error', (e) => {
        this.write(formatLine(plan.role, `could not start: ${e.message}`, this.colour) + '\n');
        if (child.exitCode === null && child.signalCode === null && child.pid === undefined) done(127, null);
      });
    });
    this.running.set(plan.role, entry);
  }

  /** True while the role's process runs. */
  alive(role: Role): boolean {
    const r = this.running.get(role);
    return r !== undefined && r.child.exitCode === null && r.child.signalCode === null;
  }

  /**
   * Stops the children in `order`, one at a time: SIGTERM, then wait up to `graceMs` for it to
   * exit, then SIGKILL. Those already gone are reported as they ended.
   */
  async stop(order: readonly Role[], graceMs: number): Promise<ChildExit[]> {
    const exits: ChildExit[] = [];
    for (const role of order) {
      const r = this.running.get(role);
      if (!r) continue;
      if (this.alive(role)) {
        r.stopping = true;
        r.child.kill('SIGTERM');
        const timer = setTimeout(() => {
          if (!this.alive(role)) return;
          r.killed = true;
          this.write(formatLine(role, `did not stop within ${graceMs / 1000} s; killing it (SIGKILL)`, this.colour) + '\n');
          r.child.kill('SIGKILL');
        }, graceMs);
        const exit = await r.exited;
        clearTimeout(timer);
        exits.push({ ...exit, killed: r.killed });
      } else {
        exits.push(await r.exited);
      }
    }
    process.removeListener('exit', this.killAll);
    return exits;
  }

  /** A second Ctrl-C: every child still running is SIGKILLed now. */
  killNow(): void {
    for (const r of this.running.values()) {
      if (r.child.exitCode === null && r.child.signalCode === null) {
        r.stopping = true;
        r.killed = true;
        r.child.kill('SIGKILL');
      }
    }
  }
}
