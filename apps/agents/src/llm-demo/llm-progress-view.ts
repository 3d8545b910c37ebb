import { compareIntervals } from '@srpo/workflows';
import { ansi, bar, clock, num, pct } from '../demo/progress-view';
import type { EvaluationLabel, EvaluationRecord, LlmDemoEvent, LlmDemoOutcome, TaskRecord, UntilRule } from './llm-demo-runner';

/**
 * The LLM demo's panel and log lines, pure functions of its state: a TTY redraws the panel in
 * place, anything else gets one line per event. No prompt or reply text ever appears here.
 */

export type LlmPhase = 'starting the topology' | 'start evaluation' | 'training' | 'final evaluation' | 'stopping';

export interface LlmPanelState {
  runId: string;
  policy: string;
  /** The demo's own topology trains a LoRA adapter; an attached one may not. */
  lora: boolean;
  variant: string;
  verifier: boolean;
  until: UntilRule;
  limitMs: number;
  evalEveryMs: number;
  trainingMs: number;
  phase: LlmPhase;
  /** Versions the learner published beyond 0 (its version list), when it answers. */
  updates?: number;
  tasks: readonly TaskRecord[];
  evaluations: readonly EvaluationRecord[];
  /** The evaluation in progress, if any. */
  evaluating?: { label: EvaluationLabel; done: number; trials: number };
  /** Problems in the training reward's window. */
  recentProblems: number;
  /** Pacing: the updates a problem may start ahead, and the version the next problem waits for. */
  maxAhead?: number;
  waitingFor?: number;
}

/** A line event: the runner's, or the learner's update count moving. */
export type LlmLineEvent = LlmDemoEvent | { kind: 'updates'; updates: number };

const plain = { bold: (s: string) => s, dim: (s: string) => s, green: (s: string) => s, red: (s: string) => s, cyan: (s: string) => s };

/** Mean training reward of the last `n` problems played, or undefined before the first. */
export function recentReward(tasks: readonly TaskRecord[], n: number): number | undefined {
  const last = tasks.slice(-n);
  if (last.length === 0) return undefined;
  return last.reduce((a, t) => a + t.reward, 0) / last.length;
}

/** The newest version any reply named (play through the gateway or evaluation), or undefined before any. */
export function servedVersion(tasks: readonly TaskRecord[], evaluations: readonly EvaluationRecord[]): number | undefined {
  const all = [...tasks.flatMap((t) => t.versions), ...evaluations.flatMap((e) => e.versions)];
  return all.length === 0 ? undefined : Math.max(...all);
}

/** `v0`, `v3–v5` (the range an evaluation saw), `—` when none was reported. */
export function versionsLabel(versions: readonly number[]): string {
  if (versions.length === 0) return '—';
  const lo = Math.min(...versions);
  const hi = Math.max(...versions);
  return lo === hi ? `v${lo}` : `v${lo}–v${hi}`;
}

/** `[████▒▒░░░░]`: solid up to the interval's low end, shaded across the interval, empty above. */
export function intervalBar(low: number, high: number, width = 20): string {
  const cells = (x: number) => Math.round(Math.min(1, Math.max(0, Number.isFinite(x) ? x : 0)) * width);
  const lo = cells(low);
  const hi = Math.max(lo, cells(high));
  return `[${'█'.repeat(lo)}${'▒'.repeat(hi - lo)}${'░'.repeat(width - hi)}]`;
}

/** `61.5% [54.6, 68.0]`. */
export function intervalText(e: { rate: number; low: number; high: number }): string {
  return `${pct(e.rate, 1)} [${(100 * e.low).toFixed(1)}, ${(100 * e.high).toFixed(1)}]`;
}

function untilText(until: UntilRule): string {
  return until === 'gain' ? "until the held-out interval lies above the start's" : 'until the time limit';
}

function evaluationRow(e: EvaluationRecord, start: EvaluationRecord | undefined, c: typeof plain): string {
  const mark = e.label === 'start' ? 'start' : e.label === 'final' ? 'final' : '';
  const gain = start !== undefined && e !== start && compareIntervals(start, e) === 'gain';
  const cell = `${intervalText(e).padEnd(20)} ${intervalBar(e.low, e.high)} ${num(e.successes)}/${num(e.trials)}`;
  return `   ${mark.padEnd(5)} ${clock(e.atMs).padStart(6)}  ${versionsLabel(e.versions).padEnd(8)} ${gain ? c.green(cell) : cell}${gain ? c.green(' ▲') : ''}`;
}

function paceText(s: LlmPanelState, served: number | undefined): string {
  if (s.maxAhead === undefined) return '';
  const waiting = s.waitingFor !== undefined && s.waitingFor > (served ?? 0);
  return `   paced: ${s.maxAhead} update${s.maxAhead === 1 ? '' : 's'} ahead at most${waiting ? `; waiting for v${s.waitingFor}` : ''}`;
}

/** The live panel. */
export function renderLlmPanel(s: LlmPanelState, color: boolean): string[] {
  const c = color ? ansi : plain;
  const episodes = s.tasks.reduce((n, t) => n + t.groupSize, 0);
  const reward = recentReward(s.tasks, s.recentProblems);
  const served = servedVersion(s.tasks, s.evaluations);
  const lines = [
    `${c.bold('SRPO LLM demo')} ${clock(s.trainingMs)} / ${clock(s.limitMs)} ${bar(s.trainingMs / s.limitMs)}  ${s.phase}  run ${s.runId}`,
    ` policy   ${s.policy}${s.lora ? ' (LoRA)' : ''}, ${s.variant} word problems, ${s.verifier ? 'solver + verifier' : 'solver only'}; ${untilText(s.until)}`,
    ` served   ${served === undefined ? '—' : `v${served}`}   learner updates ${s.updates === undefined ? '—' : num(s.updates)}${paceText(s, served)}`,
    ` played   ${num(episodes)} episodes, ${num(s.tasks.length)} problems; training reward (last ${Math.min(s.recentProblems, s.tasks.length)} problems) ${
      reward === undefined ? '—' : `${reward.toFixed(2)} ${bar(reward)}`
    }`,
    ` held-out greedy success on ${s.evaluations[0]?.trials ?? s.evaluating?.trials ?? '—'} problems (95 % interval)`,
  ];
  for (const e of s.evaluations) lines.push(evaluationRow(e, s.evaluations[0], c));
  if (s.evaluating) lines.push(c.dim(`   ${s.evaluating.label === 'start' ? 'start' : ''.padEnd(5)} evaluating… ${s.evaluating.done}/${s.evaluating.trials}`));
  else if (s.evaluations.length === 0) lines.push(c.dim('   (none yet)'));
  return lines;
}

/** One line per event when stdout is no TTY; undefined for events not worth a line (evaluation progress). */
export function renderLlmEventLine(e: LlmLineEvent, s: LlmPanelState): string | undefined {
  const head = `[llm-demo ${clock(s.trainingMs)}/${clock(s.limitMs)}]`;
  switch (e.kind) {
    case 'evaluation-progress':
      return undefined;
    case 'training-started':
      return `${head} training started: held-out evaluations every ${clock(s.evalEveryMs)} of training, ${untilText(s.until)}`;
    case 'evaluation-started':
      return `${head} held-out evaluation (${e.label}) of ${e.trials} problems started`;
    case 'evaluated': {
      const verdict = e.evaluation === e.start ? 'the start' : `start ${intervalText(e.start)}: ${compareIntervals(e.start, e.evaluation)}`;
      return `${head} held-out ${e.evaluation.label} at ${clock(e.evaluation.atMs)}, ${versionsLabel(e.evaluation.versions)}: ${intervalText(e.evaluation)} (${e.evaluation.successes}/${e.evaluation.trials}); ${verdict}`;
    }
    case 'task': {
      const reward = recentReward(s.tasks, s.recentProblems);
      return `${head} problem ${e.task.task}: ${e.task.solved}/${e.task.groupSize} solved by ${versionsLabel(e.task.versions)}; episodes ${num(s.tasks.reduce((n, t) => n + t.groupSize, 0))}; reward last ${Math.min(s.recentProblems, s.tasks.length)} ${reward === undefined ? '—' : reward.toFixed(2)}`;
    }
    case 'pace-timeout':
      return `${head} problem ${e.task} waited in vain for v${e.required} (v${e.served} serves; the learner skipped groups?): counting from v${e.served}`;
    case 'play-error':
      return `${head} a problem failed (${e.consecutive} in a row): ${e.message}`;
    case 'updates':
      return `${head} learner: ${num(e.updates)} update${e.updates === 1 ? '' : 's'} published`;
  }
}

export interface LlmSummaryView {
  runId: string;
  runDir: string;
  policy: string;
  outcome: LlmDemoOutcome;
  updates?: number;
  wallMs: number;
  /** How the topology stopped, when something is worth saying. */
  notes: string[];
  /** What the run directory holds. */
  files: string[];
}

const COMPARISON_TEXT = {
  gain: "the end's interval lies wholly above the start's",
  overlap: 'the intervals overlap',
  loss: "the end's interval lies wholly below the start's",
} as const;

function endText(o: LlmDemoOutcome): string {
  switch (o.endedBy) {
    case 'gain':
      return "ended on a clear gain: the held-out interval lies wholly above the start's";
    case 'time':
      return 'ended at the time limit';
    case 'request':
      return 'stopped on request (no final evaluation)';
    case 'failure':
      return `failed: ${o.failure ?? 'unknown error'}`;
  }
}

/** The end-of-run report. */
export function renderLlmSummary(v: LlmSummaryView, color: boolean): string[] {
  const c = color ? ansi : plain;
  const o = v.outcome;
  const start = o.evaluations[0];
  const end = o.evaluations.length > 1 ? o.evaluations[o.evaluations.length - 1] : undefined;
  const out = ['', c.bold(`SRPO LLM demo ${v.runId}: ${clock(o.trainingMs)} of training, ${endText(o)}`), ''];
  const rows: string[][] = [
    [
      'start',
      start ? clock(start.atMs) : '—',
      start ? versionsLabel(start.versions) : '—',
      start ? `${intervalText(start)} (${start.successes}/${start.trials})` : '—',
    ],
    ['end', end ? clock(end.atMs) : '—', end ? versionsLabel(end.versions) : '—', end ? `${intervalText(end)} (${end.successes}/${end.trials})` : '—'],
  ];
  const header = ['held-out', 'at', 'versions', 'greedy success [95 % interval]'];
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const line = (cells: string[]) => `| ${cells.map((cell, i) => cell.padEnd(widths[i])).join(' | ')} |`;
  out.push(line(header), `|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`, ...rows.map(line));
  const reward = recentReward(o.tasks, 20);
  const served = servedVersion(o.tasks, o.evaluations);
  out.push(
    '',
    `learner updates ${v.updates === undefined ? '—' : num(v.updates)}; newest version served ${served === undefined ? '—' : `v${served}`}; ` +
      `${num(o.episodes)} episodes over ${num(o.tasks.length)} problems; training reward of the last 20 problems ${reward === undefined ? '—' : reward.toFixed(2)}; wall time ${clock(v.wallMs)}`,
    `verdict: ${o.verdict === 'clear gain' ? c.green(o.verdict) : o.verdict} (${start && end ? COMPARISON_TEXT[compareIntervals(start, end)] : 'fewer than two evaluations'})`,
    ...v.notes,
    `files in ${v.runDir}: ${v.files.join(', ')}`,
  );
  return out;
}
