import * as fs from 'fs';
import * as path from 'path';
import { errorMessage } from '@srpo/core';
import { ensureBroker } from '../demo/local-broker';
import { ansi, clock, fit } from '../demo/progress-view';
import type { DemoOutput } from '../demo/demo.service';
import type { LlmDemoConfig } from './llm-demo-config';
import { LlmDemoRunner, SYSTEM_CLOCK, type LlmDemoEvent, type LlmDemoOutcome } from './llm-demo-runner';
import { renderLlmEventLine, renderLlmPanel, renderLlmSummary, type LlmLineEvent, type LlmPanelState, type LlmPhase } from './llm-progress-view';
import { llmDemoResult } from './llm-demo-result';
import { tail } from '../log-tail';
import { Topology, type TopologyExit } from './llm-topology';
import { gatewayClient, greedyAnswerer, learnerVersionCount, RequestScope, servedVersionReader } from './text-agent-client';

/** Problems in the panel's training-reward window. */
const RECENT_PROBLEMS = 20;

/**
 * `srpo demo --llm`: starts `srpo up` (one child process) on SmolLM2-135M-Instruct with a LoRA
 * adapter, waits until it is ready, runs the word-problem agents against it (LlmDemoRunner) with
 * a live panel, stops the topology in order, prints the summary and writes `result.json`. With
 * --attach only the agents run, against a topology already up.
 */
export class LlmDemo {
  private topology?: Topology;
  private runner?: LlmDemoRunner;
  private readonly requests = new RequestScope();
  private stopRequested = false;
  private stoppingTopology = false;
  private phase: LlmPhase = 'starting the topology';
  private evaluating?: LlmPanelState['evaluating'];
  private updates?: number;
  private drawn = 0;
  private readonly startedMs = Date.now();

  constructor(
    private readonly config: LlmDemoConfig,
    private readonly out: DemoOutput,
    private readonly env: Readonly<Record<string, string | undefined>>,
  ) {}

  /** Ctrl-C: ends early and cleanly; requests in flight are aborted, the final evaluation skipped. */
  requestStop(): void {
    if (!this.stopRequested) this.say(`stopping early${this.out.isTTY ? ' (Ctrl-C again kills)' : ''}`);
    this.stopRequested = true;
    this.runner?.requestStop();
    this.requests.abort();
  }

  /** A second Ctrl-C: srpo up kills its children now. */
  forceKill(): void {
    this.topology?.kill();
  }

  /** Runs the whole demo; the exit code: 0 when the run completed or was stopped on request, 1 on failure. */
  async run(): Promise<number> {
    const c = this.config;
    fs.mkdirSync(c.runDir, { recursive: true });
    this.say(`run ${c.runId}: files in ${c.runDir}`);
    let outcome: LlmDemoOutcome | undefined;
    let failure: string | undefined;
    try {
      const ready = c.topology === undefined || (await this.startTopology());
      if (ready && !this.stopRequested) outcome = await this.train();
    } catch (e) {
      failure = errorMessage(e);
    }
    this.clearPanel();
    if (failure !== undefined) this.say(`failed: ${failure}`);
    if (this.config.learnerUrl !== undefined) await this.pollUpdates();
    const notes: string[] = [];
    let topologyExit: TopologyExit | undefined;
    if (this.topology) {
      this.phase = 'stopping';
      this.stoppingTopology = true;
      this.say('stopping srpo up: gateway, serve, learner, materializer in order');
      topologyExit = await this.topology.stop();
      if (topologyExit.forced) notes.push(`srpo up did not stop within ${c.topology!.stopTimeoutMs / 1000} s: its processes were killed`);
      else if (topologyExit.code !== 0) notes.push(`srpo up exited with ${topologyExit.signal ?? `code ${topologyExit.code}`} (see topology.log)`);
    }
    const final: LlmDemoOutcome = outcome ?? {
      evaluations: [],
      tasks: [],
      episodes: 0,
      trainingMs: 0,
      endedBy: failure !== undefined ? 'failure' : 'request',
      ...(failure !== undefined ? { failure } : {}),
      verdict: 'no clear gain yet',
    };
    const wallMs = Date.now() - this.startedMs;
    const files = ['result.json', ...(this.topology ? ['topology.log', 'checkpoints/', 'learner.sqlite'] : [])];
    this.out.write(
      renderLlmSummary(
        { runId: c.runId, runDir: c.runDir, policy: c.policy, outcome: final, updates: this.updates, wallMs, notes, files },
        this.out.isTTY,
      ).join('\n') + '\n',
    );
    const result = llmDemoResult({
      config: c,
      outcome: final,
      updates: this.updates,
      startedMs: this.startedMs,
      wallMs,
      topologyPid: this.topology?.pid,
      topologyExit,
    });
    fs.writeFileSync(path.join(c.runDir, 'result.json'), JSON.stringify(result, null, 2) + '\n');
    return final.endedBy === 'failure' ? 1 : 0;
  }

  /** Starts srpo up and waits for it; false when a stop came first. */
  private async startTopology(): Promise<boolean> {
    const plan = this.config.topology!;
    ensureBroker(plan.broker, this.env, (text) => this.say(text));
    this.topology = Topology.start(plan);
    this.say(
      `starting srpo up (pid ${this.topology.pid}): policy ${this.config.policy}, LoRA on ${plan.model}, lr ${plan.lr}, correction ${plan.correction}, ` +
        `${plan.setsPerUpdate} sets per update, topics ${plan.topicPrefix}*; its log: ${plan.logFile}`,
    );
    this.say(`waiting until every process answers (the first start loads the model; at most ${clock(plan.readyTimeoutMs)})`);
    const ready = await this.topology.waitReady(() => this.stopRequested);
    if (ready === 'stopped') return false;
    this.say(`ready: gateway ${this.config.gatewayUrl}, serve ${this.config.serveUrl}, learner ${this.config.learnerUrl}`);
    void this.topology.exited.then((exit) => {
      if (this.stoppingTopology) return;
      this.runner?.fail(`srpo up exited unexpectedly (${exit.signal ?? `code ${exit.code}`}); the end of its log:\n${tail(plan.logFile, 15)}`);
    });
    return true;
  }

  private async train(): Promise<LlmDemoOutcome> {
    const c = this.config;
    this.runner = new LlmDemoRunner(c.run, {
      client: gatewayClient(c.gatewayUrl, c.apiKey, c.policy, this.requests),
      greedy: greedyAnswerer(c.serveUrl, c.apiKey, c.policy, c.run.play.solverMaxTokens, this.requests),
      clock: SYSTEM_CLOCK,
      emit: (e) => this.onEvent(e),
      servedVersion: servedVersionReader(c.serveUrl, c.apiKey, c.policy),
    });
    if (this.stopRequested) this.runner.requestStop();
    this.say(
      `agents: ${c.run.variant} word problems, G ${c.run.play.groupSize} at temperature ${c.run.play.temperature}, ${c.run.play.verifier ? 'solver + verifier' : 'solver only'}, ` +
        `${c.run.concurrency} problems in flight${c.run.pacing ? ` at most ${c.run.pacing.maxAhead} update(s) ahead of the served version` : ''}; held-out ${c.run.heldOut} problems every ${clock(c.run.evalEveryMs)}${this.out.isTTY ? ' (Ctrl-C stops early, cleanly)' : ''}`,
    );
    const panel = this.out.isTTY ? setInterval(() => this.draw(), 500) : undefined;
    const poll = c.learnerUrl === undefined ? undefined : setInterval(() => void this.pollUpdates(), 5000);
    try {
      return await this.runner.run();
    } finally {
      if (panel) clearInterval(panel);
      if (poll) clearInterval(poll);
    }
  }

  private async pollUpdates(): Promise<void> {
    const count = await learnerVersionCount(this.config.learnerUrl!, this.config.policy);
    if (count === undefined) return;
    const updates = Math.max(0, count - 1);
    if (updates !== this.updates) {
      this.updates = updates;
      this.line({ kind: 'updates', updates });
    }
  }

  private onEvent(e: LlmDemoEvent): void {
    if (e.kind === 'evaluation-started') {
      this.evaluating = { label: e.label, done: 0, trials: e.trials };
      if (e.label === 'start') this.phase = 'start evaluation';
      if (e.label === 'final') this.phase = 'final evaluation';
    } else if (e.kind === 'evaluation-progress') this.evaluating = { label: e.label, done: e.done, trials: e.trials };
    else if (e.kind === 'evaluated') this.evaluating = undefined;
    else if (e.kind === 'training-started') this.phase = 'training';
    this.line(e);
  }

  /** Off a TTY, one line per event. */
  private line(e: LlmLineEvent): void {
    if (this.out.isTTY || this.runner === undefined) return;
    const text = renderLlmEventLine(e, this.state());
    if (text !== undefined) this.out.write(text + '\n');
  }

  private state(): LlmPanelState {
    const c = this.config;
    const outcome = this.runner?.snapshot();
    return {
      runId: c.runId,
      policy: c.policy,
      lora: c.mode === 'run',
      variant: c.run.variant,
      verifier: c.run.play.verifier,
      until: c.run.until,
      limitMs: c.run.limitMs,
      evalEveryMs: c.run.evalEveryMs,
      trainingMs: this.runner?.trainingElapsedMs() ?? 0,
      phase: this.phase,
      updates: this.updates,
      tasks: outcome?.tasks ?? [],
      evaluations: outcome?.evaluations ?? [],
      ...(outcome?.waitingFor === undefined ? {} : { waitingFor: outcome.waitingFor }),
      ...(c.run.pacing === undefined ? {} : { maxAhead: c.run.pacing.maxAhead }),
      evaluating: this.evaluating,
      recentProblems: RECENT_PROBLEMS,
    };
  }

  private draw(): void {
    if (!this.out.isTTY || this.runner === undefined) return;
    const lines = renderLlmPanel(this.state(), true).map((l) => fit(l, this.out.columns));
    this.out.write(ansi.rewind(this.drawn) + lines.join('\n') + '\n');
    this.drawn = lines.length;
  }

  private clearPanel(): void {
    if (this.out.isTTY && this.drawn > 0) this.draw();
    this.drawn = 0;
  }

  private say(text: string): void {
    if (this.out.isTTY && this.drawn > 0) {
      this.out.write(ansi.rewind(this.drawn));
      this.drawn = 0;
    }
    this.out.write(`${this.out.isTTY ? ansi.cyan('llm-demo') : 'llm-demo'}: ${text}\n`);
  }
}
