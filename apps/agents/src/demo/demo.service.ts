import { ChildProcess, spawn } from 'child_process';
import * as fs from 'fs';
import * as net from 'net';
import * as path from 'path';
import type { Kafka } from 'kafkajs';
import { ErrorCode, errorMessage, Logger, repoRoot, SrpoError } from '@srpo/core';
import { createKafka, ensureTopics, topicCatalog, type TopicCatalog } from '@srpo/events';
import type { DemoConfig, LearnerPlan } from './demo-config';
import { DemoMonitor } from './demo-monitor.service';
import { awaitGroupCoordinator, ensureBroker } from './local-broker';
import { tail } from '../log-tail';
import { rateOf, sortedByTime, startVersusEnd, targetHeld, type StartEnd } from './demo-stats';
import { ansi, clock, fit, pct, renderLive, renderLogLine, renderSummary, type LiveView } from './progress-view';

/** Where the demo writes: a TTY gets a redrawn panel, anything else periodic lines. */
export interface DemoOutput {
  write(text: string): void;
  isTTY: boolean;
  /** Terminal width, when known: panel lines are cut to it. */
  columns?: number;
}

export interface DemoResult {
  runId: string;
  runDir: string;
  prefix: string;
  rows: StartEnd[];
  updates: Record<string, number>;
  versions: Record<string, number>;
  outputsNewVersion: number;
  deadLetters: number;
  auditUrls: string[];
  /** Why the run ended early, when it did. */
  failure?: string;
  /** What ended training: the target held, the update count reached, the time limit, or a request. */
  endedBy?: EndReason;
}

export type EndReason = 'target' | 'updates' | 'time' | 'request';

interface Child {
  name: string;
  proc: ChildProcess;
  logFile: string;
  /** Set when we asked it to stop: an exit after that is expected. */
  stopping: boolean;
  exited: Promise<void>;
}

/**
 * Runs the whole system as separate processes: (the local broker,) one learner
 * per policy, the materializer and the agents; shows progress until the
 * training time is up or it is asked to stop; then stops the children in
 * order, agents first, then the materializer, then the learners, letting each
 * stage drain what the previous one produced; and reports start-versus-end
 * success per workflow.
 */
export class DemoRunner {
  private readonly log = new Logger('demo');
  private readonly children: Child[] = [];
  private readonly kafka: Kafka;
  readonly catalog: TopicCatalog;
  private monitor?: DemoMonitor;
  private stopRequested = false;
  private wake?: () => void;
  private startedAtMs = 0;
  private trainedMs = 0;
  private drawn = 0;
  private endedBy?: EndReason;

  constructor(
    private readonly config: DemoConfig,
    private readonly out: DemoOutput,
  ) {
    this.kafka = createKafka(config.kafka);
    this.catalog = topicCatalog(config.topics);
  }

  /** Ends training early (Ctrl-C); the orderly shutdown follows. */
  requestStop(): void {
    this.stopRequested = true;
    this.wake?.();
  }

  /** The child processes started so far (for the soak bench's RSS sampling). */
  processes(): { name: string; pid: number | undefined; alive: boolean }[] {
    return this.children.map((c) => ({ name: c.name, pid: c.proc.pid, alive: c.proc.exitCode === null && c.proc.signalCode === null }));
  }

  /** Second Ctrl-C: no more waiting. */
  forceKill(): void {
    for (const c of this.children) if (c.proc.exitCode === null && c.proc.signalCode === null) c.proc.kill('SIGKILL');
  }

  async run(): Promise<DemoResult> {
    const c = this.config;
    fs.mkdirSync(c.runDir, { recursive: true });
    const onExit = () => this.forceKill();
    process.once('exit', onExit);
    let failure: string | undefined;
    try {
      this.say(`run ${c.runId}: topics ${c.topics.prefix}*, files in ${c.runDir}`);
      await this.ensureBroker();
      const admin = this.kafka.admin();
      await admin.connect();
      try {
        await ensureTopics(admin, this.catalog.all());
        await awaitGroupCoordinator(admin);
      } finally {
        await admin.disconnect();
      }
      this.monitor = new DemoMonitor(this.kafka, this.catalog);
      await this.monitor.start();
      for (const l of c.learners) {
        l.httpPort = await freePort(
          l.httpPort,
          c.learners.filter((o) => o !== l).map((o) => o.httpPort),
        );
        this.spawn(`learner ${l.policyId}`, 'learner', c.learnerEnv(l), l.logFile);
      }
      this.spawn('materializer', 'materializer', c.childEnv, path.join(c.runDir, 'materializer.log'));
      this.say(`starting ${c.learners.length} learner(s) (${c.learners.map((l) => `${l.policyId}: ${l.roles.join(', ')}`).join('; ')}) and the materializer`);
      await Promise.all(c.learners.map((l) => this.waitHealthy(l)));
      this.spawn('agents', 'agents', c.childEnv, path.join(c.runDir, 'agents.log'));
      this.say(
        `agents playing ${c.agents.workflows.join(', ')} (G=${c.agents.groupSize}); training ${this.plan()}${this.out.isTTY ? ' (Ctrl-C stops early, cleanly)' : ''}`,
      );
      failure = await this.train();
    } catch (e) {
      failure = errorMessage(e);
    }
    this.clearPanel();
    if (failure) this.say(`stopping: ${failure}`);
    else this.say(this.endMessage());
    await this.shutdown(this.config.serve && !failure);
    const result = this.report(failure);
    process.removeListener('exit', onExit);
    return result;
  }

  private spawn(name: string, app: string, env: Record<string, string>, logFile: string): Child {
    const entry = path.join(repoRoot(), 'dist', 'apps', app, 'src', 'main.js');
    if (!fs.existsSync(entry)) throw new SrpoError(ErrorCode.ENVIRONMENT, `${entry} missing: run \`npm run build\` first`);
    const fd = fs.openSync(logFile, 'a');
    // Own process group: the terminal's Ctrl-C reaches only the demo, which then stops the children in order.
    const proc = spawn(process.execPath, [entry], { env, stdio: ['ignore', fd, fd], detached: true });
    fs.closeSync(fd);
    const child: Child = { name, proc, logFile, stopping: false, exited: new Promise((resolve) => proc.once('exit', () => resolve())) };
    proc.once('exit', (code, signal) => {
      if (!child.stopping) {
        this.log.error('a demo process exited unexpectedly', { name, code, signal, log: logFile });
        this.wake?.();
      }
    });
    this.children.push(child);
    return child;
  }

  private async ensureBroker(): Promise<void> {
    const c = this.config;
    ensureBroker({ external: c.externalKafka, brokers: c.kafka.brokers, local: c.localKafka }, process.env, (text) => this.say(text));
  }

  private async waitHealthy(l: LearnerPlan): Promise<void> {
    const child = this.children.find((c) => c.name === `learner ${l.policyId}`) as Child;
    const deadline = Date.now() + 180_000;
    while (Date.now() < deadline) {
      if (child.proc.exitCode !== null || child.proc.signalCode !== null) {
        throw new SrpoError(ErrorCode.ENVIRONMENT, `learner ${l.policyId} exited during start (log: ${l.logFile})\n${tail(l.logFile, 8)}`);
      }
      const ok = await fetch(`http://127.0.0.1:${l.httpPort}/health`)
        .then((r) => r.ok)
        .catch(() => false);
      if (ok && fs.existsSync(path.join(this.config.checkpointDir, l.policyId, 'v0', 'model.json'))) return;
      await sleep(250);
    }
    throw new SrpoError(ErrorCode.UNAVAILABLE, `learner ${l.policyId} not healthy after 180 s (log: ${l.logFile})`);
  }

  /** What the run will do, in words: the stop conditions in force. */
  private plan(): string {
    const c = this.config;
    const limits: string[] = [];
    if (c.target > 0) limits.push(`until every workflow holds ≥ ${pct(c.target)} success over ${clock(c.endWindowMs)} (95 % interval)`);
    if (c.updates > 0) limits.push(`until every policy has applied ${c.updates} updates`);
    limits.push(`${limits.length > 0 ? 'at most ' : 'for '}${clock(c.seconds * 1000)}`);
    return limits.join(', ');
  }

  private endMessage(): string {
    const c = this.config;
    const at = clock(this.trainedMs);
    switch (this.endedBy) {
      case 'target':
        return `every workflow held ≥ ${pct(c.target)} success over the last ${clock(c.endWindowMs)} at ${at}: ending early; stopping`;
      case 'updates':
        return `every policy applied ${c.updates} updates at ${at}; stopping`;
      case 'request':
        return 'stopping on request';
      default:
        return c.target > 0 ? `training time is up (${at}) before every workflow held ${pct(c.target)}; stopping` : 'training time is up; stopping';
    }
  }

  /** Why training should end now, if it should (the target held, or enough updates). */
  private progressEnd(elapsedMs: number): EndReason | undefined {
    const c = this.config;
    const stats = this.stats();
    if (c.updates > 0 && c.learners.every((l) => stats.policy(l.policyId).updates >= c.updates)) return 'updates';
    // The window must lie wholly inside training: episodes of a previous run never count.
    if (c.target > 0 && elapsedMs >= c.endWindowMs) {
      const check = targetHeld(stats, c.agents.workflows, { target: c.target, windowMs: c.endWindowMs, nowMs: Date.now(), minEpisodes: c.targetMinEpisodes });
      if (check.held) return 'target';
    }
    return undefined;
  }

  /** Shows progress until the time is up, the progress goal is met, a stop is requested or a child dies; returns the failure, if any. */
  private async train(): Promise<string | undefined> {
    const c = this.config;
    this.startedAtMs = Date.now();
    const totalMs = c.seconds * 1000;
    let lastLog = 0;
    for (;;) {
      const elapsed = Date.now() - this.startedAtMs;
      const dead = this.children.find((ch) => !ch.stopping && (ch.proc.exitCode !== null || ch.proc.signalCode !== null));
      if (dead) {
        this.trainedMs = elapsed;
        return `${dead.name} exited unexpectedly (log: ${dead.logFile})\n${tail(dead.logFile, 8)}`;
      }
      const reached = this.stopRequested ? 'request' : elapsed >= totalMs ? 'time' : this.progressEnd(elapsed);
      if (reached) {
        this.endedBy = reached;
        this.trainedMs = Math.min(elapsed, totalMs);
        return undefined;
      }
      if (this.out.isTTY) this.drawPanel(elapsed);
      else if (elapsed - lastLog >= c.logIntervalMs) {
        lastLog = elapsed;
        this.out.write(renderLogLine(this.stats(), this.liveView(elapsed)) + '\n');
      }
      await new Promise<void>((resolve) => {
        this.wake = resolve;
        setTimeout(resolve, this.out.isTTY ? 500 : 1000);
      });
      this.wake = undefined;
    }
  }

  private stats() {
    return (this.monitor as DemoMonitor).stats;
  }

  private liveView(elapsedMs: number): LiveView {
    const c = this.config;
    const stats = this.stats();
    return {
      runId: c.runId,
      prefix: c.topics.prefix,
      elapsedMs,
      totalMs: c.seconds * 1000,
      workflows: c.agents.workflows,
      policies: c.learners.map((l) => l.policyId),
      recentEpisodes: c.recentEpisodes,
      startRates: Object.fromEntries(c.agents.workflows.map((w) => [w, rateOf(sortedByTime(stats.outcomes.get(w) ?? []).slice(0, c.startEpisodes))])),
      auditUrls: this.auditUrls(),
    };
  }

  private auditUrls(): string[] {
    return this.config.learners.map((l) => `http://127.0.0.1:${l.httpPort}/updates?policy=${l.policyId}`);
  }

  private drawPanel(elapsed: number): void {
    const lines = renderLive(this.stats(), this.liveView(elapsed), true).map((l) => fit(l, this.out.columns));
    this.out.write(ansi.rewind(this.drawn) + lines.join('\n') + '\n');
    this.drawn = lines.length;
  }

  private clearPanel(): void {
    if (this.out.isTTY && this.drawn > 0 && this.monitor) this.drawPanel(this.trainedMs);
    this.drawn = 0;
  }

  private say(text: string): void {
    this.out.write(`${this.out.isTTY ? ansi.cyan('demo') : 'demo'}: ${text}\n`);
  }

  /**
   * Agents first (they finish their task and release held outcomes), then the
   * materializer once it has consumed what the agents wrote, then the learners
   * once they have consumed the ready groups. Every wait is bounded; whatever
   * is left stays in Kafka (committed offsets say where to resume), so nothing is lost.
   */
  private async shutdown(keepLearners: boolean): Promise<void> {
    const c = this.config;
    // Nothing started (e.g. the broker did not come up): nothing to drain, and no broker to ask.
    if (this.children.length === 0) return;
    await this.stopChild('agents', 120_000);
    await this.waitForConsumers(
      `${c.materializerAppId}.sets`,
      [this.catalog.agentOutputs.name, this.catalog.transitions.name, this.catalog.episodeOutcomes.name],
      20_000,
    );
    await this.waitForConsumers(`${c.materializerAppId}.groups`, [this.catalog.activeSets.name], 20_000, 1);
    await this.stopChild('materializer', 60_000);
    if (keepLearners) return;
    await this.stopLearners();
  }

  private async stopLearners(): Promise<void> {
    await Promise.all(this.config.learners.map((l) => this.stopChild(`learner ${l.policyId}`, 60_000)));
  }

  /** After the summary with `--serve`: the learners keep serving the audit API until Ctrl-C. */
  async serveUntilStopped(): Promise<void> {
    await new Promise<void>((resolve) => {
      this.wake = resolve;
      if (this.stopRequested) resolve();
    });
    await this.stopLearners();
  }

  resetStop(): void {
    this.stopRequested = false;
  }

  private async stopChild(name: string, timeoutMs: number): Promise<void> {
    const child = this.children.find((c) => c.name === name);
    if (!child) return;
    child.stopping = true;
    if (child.proc.exitCode !== null || child.proc.signalCode !== null) return;
    child.proc.kill('SIGTERM');
    let timer: NodeJS.Timeout | undefined;
    const timedOut = await Promise.race([
      child.exited.then(() => false),
      new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(true), timeoutMs);
      }),
    ]);
    // A pending timer would keep the process alive long after the child is gone.
    clearTimeout(timer);
    if (timedOut) {
      this.log.warn('a demo process did not stop in time; killing it', { name, timeoutMs, log: child.logFile });
      child.proc.kill('SIGKILL');
      await child.exited;
    }
  }

  /**
   * Waits until a consumer group has committed up to the current end of
   * `topics` (bounded). `markers`: the topics are written in transactions, whose
   * final commit marker takes an offset no consumer ever commits past.
   */
  private async waitForConsumers(groupId: string, topics: string[], timeoutMs: number, markers = 0): Promise<void> {
    const admin = this.kafka.admin();
    try {
      await admin.connect();
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        let behind = 0;
        for (const topic of topics) {
          const ends = await admin.fetchTopicOffsets(topic);
          const committed = (await admin.fetchOffsets({ groupId, topics: [topic] }))[0]?.partitions ?? [];
          for (const p of ends) {
            const done = Number(committed.find((x) => x.partition === p.partition)?.offset ?? -1);
            if (Number(p.high) > 0 && done < Number(p.high) - markers) behind++;
          }
        }
        if (behind === 0 || Date.now() > deadline) return;
        await sleep(250);
      }
    } catch (e) {
      this.log.warn('could not check consumer progress', { groupId, error: errorMessage(e) });
    } finally {
      await admin.disconnect().catch(() => undefined);
    }
  }

  private report(failure: string | undefined): DemoResult {
    const c = this.config;
    const stats = this.monitor?.stats;
    const rows = stats ? startVersusEnd(stats, { startEpisodes: c.startEpisodes, endWindowMs: c.endWindowMs, endAtMs: this.startedAtMs + this.trainedMs }) : [];
    return {
      runId: c.runId,
      runDir: c.runDir,
      prefix: c.topics.prefix,
      rows,
      updates: Object.fromEntries(c.learners.map((l) => [l.policyId, stats?.policy(l.policyId).updates ?? 0])),
      versions: Object.fromEntries(c.learners.map((l) => [l.policyId, stats?.policy(l.policyId).version ?? 0])),
      outputsNewVersion: stats?.outputsNewVersion ?? 0,
      deadLetters: stats?.deadLetterCount() ?? 0,
      auditUrls: this.auditUrls(),
      failure,
      endedBy: this.endedBy,
    };
  }

  /** Reads the monitor to the end of every topic, then prints the summary. */
  async summarize(result: DemoResult): Promise<void> {
    if (!this.monitor) return;
    await this.monitor.catchUp(15_000);
    const fresh = this.report(result.failure);
    Object.assign(result, fresh);
    const lines = renderSummary(
      this.monitor.stats,
      {
        runId: this.config.runId,
        runDir: this.config.runDir,
        trainedMs: this.trainedMs,
        startEpisodes: this.config.startEpisodes,
        endWindowMs: this.config.endWindowMs,
        rows: fresh.rows,
        policies: this.config.learners.map((l) => l.policyId),
        auditUrls: fresh.auditUrls,
        serving: this.config.serve && !result.failure,
      },
      this.out.isTTY,
    );
    this.out.write(lines.join('\n') + '\n');
    await this.monitor.stop();
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** The last lines of a log file, for error messages. */

/** The first port from `start` that nothing listens on (and no other planned learner takes). */
export async function freePort(start: number, taken: readonly number[] = []): Promise<number> {
  for (let port = start; port < start + 200; port++) {
    if (taken.includes(port)) continue;
    const free = await new Promise<boolean>((resolve) => {
      const srv = net.createServer();
      srv.once('error', () => resolve(false));
      srv.listen(port, '0.0.0.0', () => srv.close(() => resolve(true)));
    });
    if (free) return port;
  }
  throw new SrpoError(ErrorCode.ENVIRONMENT, `no free port in ${start}..${start + 199}`);
}
