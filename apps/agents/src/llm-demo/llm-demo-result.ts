import type { LlmDemoConfig } from './llm-demo-config';
import type { EvaluationRecord, LlmDemoOutcome } from './llm-demo-runner';
import { servedVersion } from './llm-progress-view';
import type { TopologyExit } from './llm-topology';

/** One evaluation as `result.json` holds it. */
export interface ResultEvaluation {
  label: EvaluationRecord['label'];
  /** Wall time when it started. */
  at: string;
  /** Training time when it started (0: the start, before any training). */
  atSeconds: number;
  durationSeconds: number;
  versions: number[];
  successes: number;
  trials: number;
  rate: number;
  low: number;
  high: number;
}

/** `<run>/result.json`: everything the summary says, and every evaluation and played problem. */
export interface LlmDemoResult {
  runId: string;
  mode: 'run' | 'attach';
  policy: string;
  startedAt: string;
  wallSeconds: number;
  trainingSeconds: number;
  endedBy: LlmDemoOutcome['endedBy'];
  failure?: string;
  verdict: LlmDemoOutcome['verdict'];
  settings: Record<string, string | number | boolean>;
  evaluations: ResultEvaluation[];
  /** Versions the learner published beyond 0 (its version list at the end); null when it did not answer. */
  updates: number | null;
  newestVersionServed: number | null;
  tasks: number;
  episodes: number;
  /** Per played problem, in the order they finished: the group's mean solver reward. */
  trainingRewards: {
    task: number;
    seed: number;
    atSeconds: number;
    reward: number;
    solved: number;
    groupSize: number;
    degenerate: boolean;
    versions: number[];
  }[];
  topology: { pid: number | null; log: string; exitCode: number | null; signal: string | null; forced: boolean } | null;
}

const seconds = (ms: number) => Math.round(ms) / 1000;

/** The settings the run used, flat. */
function resultSettings(c: LlmDemoConfig): LlmDemoResult['settings'] {
  const t = c.topology;
  return {
    variant: c.run.variant,
    heldOut: c.run.heldOut,
    groupSize: c.run.play.groupSize,
    temperature: c.run.play.temperature,
    verifier: c.run.play.verifier,
    concurrency: c.run.concurrency,
    evalEverySeconds: c.run.evalEveryMs / 1000,
    limitSeconds: c.run.limitMs / 1000,
    until: c.run.until,
    gateway: c.gatewayUrl,
    serve: c.serveUrl,
    ...(t === undefined ? {} : { model: t.model, lr: t.lr, correction: t.correction, setsPerUpdate: t.setsPerUpdate, topicPrefix: t.topicPrefix }),
  };
}

export function llmDemoResult(r: {
  config: LlmDemoConfig;
  outcome: LlmDemoOutcome;
  updates: number | undefined;
  startedMs: number;
  wallMs: number;
  topologyPid: number | undefined;
  topologyExit: TopologyExit | undefined;
}): LlmDemoResult {
  const { config: c, outcome: o } = r;
  const t = c.topology;
  const served = servedVersion(o.tasks, o.evaluations);
  return {
    runId: c.runId,
    mode: c.mode,
    policy: c.policy,
    startedAt: new Date(r.startedMs).toISOString(),
    wallSeconds: seconds(r.wallMs),
    trainingSeconds: seconds(o.trainingMs),
    endedBy: o.endedBy,
    ...(o.failure === undefined ? {} : { failure: o.failure }),
    verdict: o.verdict,
    settings: resultSettings(c),
    evaluations: o.evaluations.map((e) => ({
      label: e.label,
      at: new Date(e.startedAtMs).toISOString(),
      atSeconds: seconds(e.atMs),
      durationSeconds: seconds(e.durationMs),
      versions: e.versions,
      successes: e.successes,
      trials: e.trials,
      rate: e.rate,
      low: e.low,
      high: e.high,
    })),
    updates: r.updates ?? null,
    newestVersionServed: served ?? null,
    tasks: o.tasks.length,
    episodes: o.episodes,
    trainingRewards: o.tasks.map((k) => ({
      task: k.task,
      seed: k.seed,
      atSeconds: seconds(k.atMs),
      reward: k.reward,
      solved: k.solved,
      groupSize: k.groupSize,
      degenerate: k.degenerate,
      versions: k.versions,
    })),
    topology:
      t === undefined
        ? null
        : {
            pid: r.topologyPid ?? null,
            log: t.logFile,
            exitCode: r.topologyExit?.code ?? null,
            signal: r.topologyExit?.signal ?? null,
            forced: r.topologyExit?.forced ?? false,
          },
  };
}
