import { errorMessage, ValidationError } from '@srpo/core';
import {
  checkWordProblemPlay,
  compareIntervals,
  evaluateWordProblems,
  heldOutWordProblems,
  isDegenerate,
  playWordProblemGroup,
  TrainingWordProblems,
  WORD_PROBLEM_VARIANTS,
  type SuccessInterval,
  type TextAgentClient,
  type WordProblem,
  type WordProblemPlay,
  type WordProblemVariant,
} from '@srpo/workflows';
import type { GreedyAnswerer } from './text-agent-client';
import { VersionPacer, waitForVersion } from './version-pacer';

/**
 * The LLM demo's agents: a held-out evaluation before any training play, then word problems
 * played continuously through the gateway (G episodes each, recorded), held-out evaluations on a
 * timer concurrently with play, and the stop rule. Pure of the process: the HTTP side, the clock
 * and the output are injected, so the whole timeline runs in unit tests with a fake clock.
 */

export type UntilRule = 'gain' | 'time';
export type EndReason = 'gain' | 'time' | 'request' | 'failure';
export type EvaluationLabel = 'start' | 'periodic' | 'final';

export interface LlmDemoRunOptions {
  variant: WordProblemVariant;
  /** Held-out problems per evaluation. */
  heldOut: number;
  play: WordProblemPlay;
  /** Problems in flight at once (each plays its G episodes concurrently). */
  concurrency: number;
  /** Training time between the starts of two evaluations. */
  evalEveryMs: number;
  /** The most training time (from the first play; the start evaluation is not counted). */
  limitMs: number;
  /** `gain`: end at the first evaluation whose interval lies above the start's; `time`: train to the limit. */
  until: UntilRule;
  /** Held-out requests in flight at once. */
  evalConcurrency: number;
  /** Failed problems in a row before the run fails (a dead gateway, not one hiccup). */
  maxConsecutiveFailures: number;
  /** Flow control (VersionPacer): unset, problems start as fast as they are played. */
  pacing?: PacingOptions;
}

export interface PacingOptions {
  /** Problems one update trains on: sets per update / sets per problem. */
  tasksPerUpdate: number;
  /** Updates a problem may start ahead of the served version. */
  maxAhead: number;
  /** The longest wait for a version before the count is re-based on the one served. */
  timeoutMs: number;
  pollMs: number;
}

export interface Clock {
  now(): number;
  sleep(ms: number): Promise<void>;
}

export const SYSTEM_CLOCK: Clock = { now: () => Date.now(), sleep: (ms) => new Promise((resolve) => setTimeout(resolve, ms)) };

/** One held-out evaluation: greedy success on the same problems each time, with its 95 % Wilson interval. */
export interface EvaluationRecord extends SuccessInterval {
  label: EvaluationLabel;
  /** The clock's time when it started (wall time with the system clock). */
  startedAtMs: number;
  /** Training time when it started (0 for the start evaluation, which precedes training). */
  atMs: number;
  durationMs: number;
  /** The policy versions that answered (from each reply's system_fingerprint), ascending. */
  versions: number[];
}

/** One played problem: its G episodes' solver rewards (no prompt or reply text). */
export interface TaskRecord {
  task: number;
  seed: number;
  /** Training time when its group finished. */
  atMs: number;
  groupSize: number;
  solved: number;
  /** Mean solver reward of the group: the training reward. */
  reward: number;
  /** All G rewards equal: zero advantage, nothing learned from it. */
  degenerate: boolean;
  /** The versions that sampled it (from the gateway's replies), ascending. */
  versions: number[];
  verifierRight?: number;
}

export type LlmDemoEvent =
  | { kind: 'evaluation-started'; label: EvaluationLabel; atMs: number; trials: number }
  | { kind: 'evaluation-progress'; label: EvaluationLabel; done: number; trials: number }
  | { kind: 'evaluated'; evaluation: EvaluationRecord; start: EvaluationRecord }
  | { kind: 'training-started' }
  | { kind: 'task'; task: TaskRecord }
  | { kind: 'play-error'; message: string; consecutive: number }
  | { kind: 'pace-timeout'; task: number; required: number; served: number };

export interface LlmDemoOutcome {
  evaluations: EvaluationRecord[];
  tasks: TaskRecord[];
  episodes: number;
  trainingMs: number;
  endedBy: EndReason;
  failure?: string;
  verdict: Verdict;
}

export type Verdict = 'clear gain' | 'no clear gain yet';

/**
 * The stop rule, checked after each evaluation during training: the latest interval wholly above
 * the start's ends a `gain` run; the time limit ends any run; otherwise play on.
 */
export function stopDecision(s: {
  until: UntilRule;
  start: SuccessInterval;
  latest: SuccessInterval | undefined;
  elapsedMs: number;
  limitMs: number;
}): 'gain' | 'time' | undefined {
  if (s.until === 'gain' && s.latest !== undefined && compareIntervals(s.start, s.latest) === 'gain') return 'gain';
  if (s.elapsedMs >= s.limitMs) return 'time';
  return undefined;
}

/** The verdict of a run: the last evaluation's interval lies wholly above the first's. */
export function verdictOf(evaluations: readonly SuccessInterval[]): Verdict {
  if (evaluations.length < 2) return 'no clear gain yet';
  return compareIntervals(evaluations[0], evaluations[evaluations.length - 1]) === 'gain' ? 'clear gain' : 'no clear gain yet';
}

/** When the next evaluation is due: the first multiple of `every` after `elapsed` (a slow evaluation skips slots instead of queueing them). */
export function nextEvaluationAt(elapsedMs: number, everyMs: number): number {
  return (Math.floor(elapsedMs / everyMs) + 1) * everyMs;
}

export interface LlmDemoDeps {
  /** Recorded play (the gateway). */
  client: TextAgentClient;
  /** Greedy, unrecorded replies (the server). */
  greedy: GreedyAnswerer;
  clock: Clock;
  emit: (event: LlmDemoEvent) => void;
  /** The version the server serves now (needed with pacing; on an error, the last one known). */
  servedVersion?: () => Promise<number>;
}

/** The longest single wait: a stop is noticed at least this often even when nothing wakes the runner. */
const MAX_PAUSE_MS = 1000;

export class LlmDemoRunner {
  private readonly heldOut: WordProblem[];
  private readonly training: TrainingWordProblems;
  private readonly evaluations: EvaluationRecord[] = [];
  private readonly tasks: TaskRecord[] = [];
  private stopping = false;
  /** Ctrl-C: requests in flight are aborted, so their errors are expected. */
  private interrupted = false;
  private finalRunning = false;
  private endedBy?: EndReason;
  private failure?: string;
  private trainingStartMs?: number;
  private trainingEndMs?: number;
  private nextTask = 0;
  private consecutiveFailures = 0;
  private readonly pacer?: VersionPacer;
  /** The served version when training started: pacing counts updates from there. */
  private baseVersion = 0;
  /** Problems waiting for a version, by the version each waits for. */
  private readonly waiting = new Map<number, number>();
  /** Whoever pauses now: a stop wakes them all. */
  private readonly sleepers = new Set<() => void>();

  constructor(
    private readonly o: LlmDemoRunOptions,
    private readonly deps: LlmDemoDeps,
  ) {
    checkWordProblemPlay(o.play);
    const settings = WORD_PROBLEM_VARIANTS[o.variant];
    this.heldOut = heldOutWordProblems(settings, o.heldOut);
    this.training = new TrainingWordProblems(settings, new Set(this.heldOut.map((p) => p.text)));
    if (o.pacing !== undefined) {
      if (deps.servedVersion === undefined) throw new ValidationError('servedVersion', 'pacing needs the served version');
      this.pacer = new VersionPacer(o.pacing.tasksPerUpdate, o.pacing.maxAhead);
    }
  }

  /** Ends early (Ctrl-C): no new problems, requests in flight are left to the caller to abort, no final evaluation. */
  requestStop(): void {
    this.interrupted = true;
    this.end('request', undefined, this.finalRunning);
  }

  /** Ends with a failure from outside (the topology died). */
  fail(message: string): void {
    this.end('failure', message);
  }

  /** What was played and measured so far (live arrays: read, do not keep). */
  snapshot(): { tasks: readonly TaskRecord[]; evaluations: readonly EvaluationRecord[]; waitingFor?: number } {
    const waits = [...this.waiting.values()];
    return { tasks: this.tasks, evaluations: this.evaluations, ...(waits.length > 0 ? { waitingFor: this.baseVersion + Math.min(...waits) } : {}) };
  }

  /** Training time so far (0 before the first play). */
  trainingElapsedMs(): number {
    if (this.trainingStartMs === undefined) return 0;
    return (this.trainingEndMs ?? this.deps.clock.now()) - this.trainingStartMs;
  }

  async run(): Promise<LlmDemoOutcome> {
    let workers: Promise<void>[] = [];
    try {
      const start = await this.evaluate('start');
      if (start !== undefined && !this.stopping) {
        if (this.pacer) this.baseVersion = await this.deps.servedVersion!();
        this.trainingStartMs = this.deps.clock.now();
        this.deps.emit({ kind: 'training-started' });
        workers = Array.from({ length: Math.max(1, this.o.concurrency) }, () => this.worker());
        await this.evaluateOnSchedule(start);
      }
    } catch (e) {
      this.end('failure', errorMessage(e));
    }
    this.stopping = true;
    await Promise.all(workers);
    if (this.trainingStartMs !== undefined) this.trainingEndMs = Math.min(this.deps.clock.now(), this.trainingStartMs + this.o.limitMs);
    if (this.endedBy === 'time' && !this.interrupted) {
      this.finalRunning = true;
      try {
        await this.evaluate('final');
      } catch (e) {
        this.end('failure', `the final evaluation failed: ${errorMessage(e)}`, true);
      } finally {
        this.finalRunning = false;
      }
    }
    return this.outcome();
  }

  private end(reason: EndReason, failure?: string, override = false): void {
    if (this.endedBy === undefined || override) {
      this.endedBy = reason;
      if (failure !== undefined) this.failure = failure;
    }
    this.stopping = true;
    for (const wake of this.sleepers) wake();
  }

  private outcome(): LlmDemoOutcome {
    return {
      evaluations: [...this.evaluations],
      tasks: [...this.tasks],
      episodes: this.tasks.reduce((n, t) => n + t.groupSize, 0),
      trainingMs: this.trainingElapsedMs(),
      endedBy: this.endedBy ?? 'request',
      ...(this.failure === undefined ? {} : { failure: this.failure }),
      verdict: verdictOf(this.evaluations),
    };
  }

  /** Evaluates every `evalEveryMs` of training until the stop rule or a stop ends the run. */
  private async evaluateOnSchedule(start: EvaluationRecord): Promise<void> {
    let due = this.o.evalEveryMs;
    for (;;) {
      if (this.stopping) return;
      const elapsed = this.trainingElapsedMs();
      const latest = this.evaluations.length > 1 ? this.evaluations[this.evaluations.length - 1] : undefined;
      const decision = stopDecision({ until: this.o.until, start, latest, elapsedMs: elapsed, limitMs: this.o.limitMs });
      if (decision !== undefined) {
        this.end(decision);
        return;
      }
      if (elapsed < due) {
        await this.pause(Math.min(due, this.o.limitMs) - elapsed);
        continue;
      }
      await this.evaluate('periodic');
      due = nextEvaluationAt(this.trainingElapsedMs(), this.o.evalEveryMs);
    }
  }

  /** Waits up to `ms` (a stop wakes it sooner). */
  private async pause(ms: number): Promise<void> {
    if (this.stopping || ms <= 0) return;
    let wake: () => void = () => undefined;
    const woken = new Promise<void>((resolve) => (wake = resolve));
    this.sleepers.add(wake);
    try {
      await Promise.race([this.deps.clock.sleep(Math.min(ms, MAX_PAUSE_MS)), woken]);
    } finally {
      this.sleepers.delete(wake);
    }
  }

  /** One held-out evaluation; undefined when a stop interrupted it. */
  private async evaluate(label: EvaluationLabel): Promise<EvaluationRecord | undefined> {
    const { clock, emit, greedy } = this.deps;
    const atMs = label === 'start' ? 0 : this.trainingElapsedMs();
    const startedMs = clock.now();
    const versions = new Set<number>();
    const trials = this.heldOut.length;
    let done = 0;
    emit({ kind: 'evaluation-started', label, atMs, trials });
    let result: SuccessInterval;
    try {
      result = await evaluateWordProblems(
        this.heldOut,
        async (messages) => {
          const reply = await greedy(messages);
          if (reply.version !== undefined) versions.add(reply.version);
          emit({ kind: 'evaluation-progress', label, done: ++done, trials });
          return reply.text;
        },
        this.o.evalConcurrency,
        this.o.play.promptStyle,
      );
    } catch (e) {
      // A stop aborts the requests in flight: that is no failure.
      if (this.interrupted || (this.stopping && label !== 'final')) return undefined;
      throw e;
    }
    const record: EvaluationRecord = {
      label,
      startedAtMs: startedMs,
      atMs,
      durationMs: clock.now() - startedMs,
      versions: [...versions].sort((a, b) => a - b),
      successes: result.successes,
      trials: result.trials,
      rate: result.rate,
      low: result.low,
      high: result.high,
    };
    this.evaluations.push(record);
    emit({ kind: 'evaluated', evaluation: record, start: this.evaluations[0] });
    return record;
  }

  /** Waits until problem `task` may start (VersionPacer), counting versions from the start of training. */
  private async pace(task: number): Promise<void> {
    const pacer = this.pacer!;
    const pacing = this.o.pacing!;
    const served = async () => (await this.deps.servedVersion!()) - this.baseVersion;
    this.waiting.set(task, pacer.required(task));
    try {
      const required = pacer.required(task);
      const w = await waitForVersion(pacer, task, served, {
        pollMs: pacing.pollMs,
        timeoutMs: pacing.timeoutMs,
        now: () => this.deps.clock.now(),
        sleep: (ms) => this.pause(ms),
        stopped: () => this.stopping,
      });
      if (w.timedOut && !this.stopping)
        this.deps.emit({ kind: 'pace-timeout', task, required: this.baseVersion + required, served: this.baseVersion + w.version });
    } finally {
      this.waiting.delete(task);
    }
  }

  private async worker(): Promise<void> {
    const { client, emit } = this.deps;
    const play = this.o.play;
    while (!this.stopping) {
      const task = this.nextTask++;
      if (this.pacer) await this.pace(task);
      if (this.stopping) return;
      const p = this.training.at(task);
      try {
        const episodes = await playWordProblemGroup(client, p, play);
        this.consecutiveFailures = 0;
        const rewards = episodes.map((e) => e.solverReward);
        const record: TaskRecord = {
          task,
          seed: p.seed,
          atMs: this.trainingElapsedMs(),
          groupSize: episodes.length,
          solved: episodes.filter((e) => e.correct).length,
          reward: rewards.reduce((a, b) => a + b, 0) / Math.max(1, rewards.length),
          degenerate: isDegenerate(rewards),
          versions: [...new Set(episodes.map((e) => e.policyVersion))].sort((a, b) => a - b),
          ...(play.verifier ? { verifierRight: episodes.filter((e) => e.verifierReward === 1).length } : {}),
        };
        this.tasks.push(record);
        emit({ kind: 'task', task: record });
      } catch (e) {
        if (this.stopping) return;
        this.consecutiveFailures++;
        emit({ kind: 'play-error', message: errorMessage(e), consecutive: this.consecutiveFailures });
        if (this.consecutiveFailures >= this.o.maxConsecutiveFailures) {
          this.end('failure', `playing failed ${this.consecutiveFailures} times in a row; the last error: ${errorMessage(e)}`);
          return;
        }
        await this.pause(MAX_PAUSE_MS);
      }
    }
  }
}
