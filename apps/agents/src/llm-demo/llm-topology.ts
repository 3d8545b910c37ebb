import { ChildProcess, spawn } from 'child_process';
import * as fs from 'fs';
import { ErrorCode, SrpoError } from '@srpo/core';
import { tail } from '../log-tail';
import type { TopologyPlan } from './llm-demo-config';

/** How `srpo up` ended. */
export interface TopologyExit {
  code: number | null;
  signal: NodeJS.Signals | null;
  /** It did not stop within the stop timeout and was told to kill its children. */
  forced: boolean;
}

const READY_LINE = /^srpo up: ready$/m;

/**
 * `srpo up` as ONE child process (bin/srpo.js: the demo launches the CLI, it imports no other
 * app), in its own process group so that the terminal's Ctrl-C reaches only the demo, its output
 * in the run's topology.log. Stopping it is `srpo up`'s own orderly stop: SIGINT, then (past the
 * timeout) a second signal, on which `srpo up` SIGKILLs its children itself. Killing `srpo up`
 * alone would orphan them: they run in process groups of their own.
 */
export class Topology {
  readonly exited: Promise<TopologyExit>;
  private signalled = 0;
  private forced = false;
  private readonly onProcessExit = () => this.kill();

  private constructor(
    private readonly plan: TopologyPlan,
    private readonly proc: ChildProcess,
  ) {
    this.exited = new Promise((resolve) => {
      proc.once('exit', (code, signal) => {
        process.removeListener('exit', this.onProcessExit);
        resolve({ code, signal, forced: this.forced });
      });
      proc.once('error', () => {
        if (proc.pid === undefined) resolve({ code: 127, signal: null, forced: false });
      });
    });
    // Should the demo itself exit (a crash), srpo up must not outlive it.
    process.on('exit', this.onProcessExit);
  }

  static start(plan: TopologyPlan): Topology {
    const fd = fs.openSync(plan.logFile, 'a');
    try {
      const proc = spawn(process.execPath, plan.args, { env: plan.env, stdio: ['ignore', fd, fd], detached: true });
      return new Topology(plan, proc);
    } finally {
      fs.closeSync(fd);
    }
  }

  get pid(): number | undefined {
    return this.proc.pid;
  }

  alive(): boolean {
    return this.proc.exitCode === null && this.proc.signalCode === null && this.proc.pid !== undefined;
  }

  /**
   * Waits for "srpo up: ready" in the log: 'ready', or 'stopped' when `stopped()` turns true
   * first. Throws, with the log's tail, when srpo up exits or the ready timeout passes.
   */
  async waitReady(stopped: () => boolean, pollMs = 500): Promise<'ready' | 'stopped'> {
    const deadline = Date.now() + this.plan.readyTimeoutMs;
    for (;;) {
      if (stopped()) return 'stopped';
      let log = '';
      try {
        log = fs.readFileSync(this.plan.logFile, 'utf8');
      } catch {
        // Not written yet.
      }
      if (READY_LINE.test(log)) return 'ready';
      if (!this.alive())
        throw new SrpoError(ErrorCode.ENVIRONMENT, `srpo up exited before it was ready (log: ${this.plan.logFile}):\n${tail(this.plan.logFile, 15)}`);
      if (Date.now() > deadline)
        throw new SrpoError(
          ErrorCode.UNAVAILABLE,
          `srpo up was not ready after ${this.plan.readyTimeoutMs / 1000} s (log: ${this.plan.logFile}):\n${tail(this.plan.logFile, 15)}`,
        );
      await new Promise((resolve) => setTimeout(resolve, pollMs));
    }
  }

  /**
   * The orderly stop: SIGINT (srpo up stops gateway, serve, learner, materializer in order);
   * past `stopTimeoutMs` a second signal (srpo up SIGKILLs its children), and past 15 s more
   * srpo up itself is SIGKILLed.
   */
  async stop(): Promise<TopologyExit> {
    if (this.alive()) this.signal('SIGINT');
    const waitFor = async (ms: number) => {
      let timer: NodeJS.Timeout | undefined;
      const done = await Promise.race([this.exited.then(() => true), new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), ms)))]);
      clearTimeout(timer);
      return done;
    };
    if (!(await waitFor(this.plan.stopTimeoutMs))) {
      this.forced = true;
      this.signal('SIGTERM');
      if (!(await waitFor(15_000)) && this.alive()) this.proc.kill('SIGKILL');
    }
    return this.exited;
  }

  /** A second Ctrl-C (or the demo's own exit): srpo up is told twice, so it kills its children now. */
  kill(): void {
    if (!this.alive()) return;
    this.forced = true;
    // Two different signals: two of the same sent at once may arrive as one.
    if (this.signalled === 0) this.signal('SIGINT');
    this.signal('SIGTERM');
  }

  private signal(sig: NodeJS.Signals): void {
    this.signalled++;
    try {
      this.proc.kill(sig);
    } catch {
      // Already gone.
    }
  }
}
