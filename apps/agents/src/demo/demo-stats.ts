import type { AdvantageGroup, AgentOutput, EpisodeOutcome, PolicyUpdate } from '@srpo/events';

/** One episode's verified result, as the monitor saw it on the episode-outcomes topic. */
export interface OutcomePoint {
  eventTimeMs: number;
  success: boolean;
}

export interface PolicyProgress {
  updates: number;
  version: number;
  /** Clip fraction (low + high) of the latest update. */
  clipFrac: number;
  /** Mean clip fraction over every update so far. */
  clipFracMean: number;
  loss: number;
  gradNorm: number;
  /** Groups the updates trained on. */
  groups: number;
  /** Highest version stamped on an agent output. */
  stampedVersion: number;
}

/**
 * What the demo reports, folded from the topics (the monitor is one more Kafka
 * consumer; it never asks a process directly).
 */
export class DemoStats {
  readonly outcomes = new Map<string, OutcomePoint[]>();
  outputs = 0;
  /** Outputs sampled with weights a learner produced (policyVersion > 0): the agents picked up new versions. */
  outputsNewVersion = 0;
  transitions = 0;
  setsComplete = 0;
  setsInvalid = 0;
  groups = 0;
  groupSets = 0;
  groupsDegenerate = 0;
  groupsFromProgress = 0;
  readonly policies = new Map<string, PolicyProgress>();
  readonly deadLetters = new Map<string, number>();

  policy(id: string): PolicyProgress {
    let p = this.policies.get(id);
    if (!p) {
      p = { updates: 0, version: 0, clipFrac: Number.NaN, clipFracMean: Number.NaN, loss: Number.NaN, gradNorm: Number.NaN, groups: 0, stampedVersion: 0 };
      this.policies.set(id, p);
    }
    return p;
  }

  onOutcome(o: EpisodeOutcome): void {
    const wf = workflowOf(o);
    const list = this.outcomes.get(wf) ?? [];
    list.push({ eventTimeMs: o.eventTimeMs, success: o.success });
    this.outcomes.set(wf, list);
  }

  onOutput(o: AgentOutput): void {
    this.outputs++;
    if (o.policyVersion > 0) this.outputsNewVersion++;
    const p = this.policy(o.policyId);
    p.stampedVersion = Math.max(p.stampedVersion, o.policyVersion);
  }

  onGroup(g: AdvantageGroup): void {
    this.groups++;
    this.groupSets += g.sets.length;
    if (g.degenerate) this.groupsDegenerate++;
    if (g.sets.some((s) => s.advantageFromProgress)) this.groupsFromProgress++;
  }

  onUpdate(u: PolicyUpdate): void {
    const p = this.policy(u.policyId);
    const clip = (u.diagnostics['losses/clip_frac_low'] ?? 0) + (u.diagnostics['losses/clip_frac_high'] ?? 0);
    p.clipFracMean = p.updates === 0 ? clip : (p.clipFracMean * p.updates + clip) / (p.updates + 1);
    p.updates++;
    p.version = Math.max(p.version, u.versionAfter);
    p.clipFrac = clip;
    p.loss = u.loss;
    p.gradNorm = u.gradNorm;
    p.groups += u.groupIds.length;
  }

  onDeadLetter(reasonCode: string): void {
    this.deadLetters.set(reasonCode, (this.deadLetters.get(reasonCode) ?? 0) + 1);
  }

  episodes(): number {
    let n = 0;
    for (const l of this.outcomes.values()) n += l.length;
    return n;
  }

  deadLetterCount(): number {
    let n = 0;
    for (const c of this.deadLetters.values()) n += c;
    return n;
  }

  /** Success rate over the last `n` episodes of a workflow (by event time). */
  recentSuccess(workflow: string, n: number): Rate {
    const list = sortedByTime(this.outcomes.get(workflow) ?? []);
    return rateOf(list.slice(-n));
  }
}

export interface Rate {
  successes: number;
  episodes: number;
  /** successes / episodes; NaN for no episode. */
  rate: number;
}

export function rateOf(points: readonly OutcomePoint[]): Rate {
  const successes = points.filter((p) => p.success).length;
  return { successes, episodes: points.length, rate: points.length === 0 ? Number.NaN : successes / points.length };
}

export function sortedByTime(points: readonly OutcomePoint[]): OutcomePoint[] {
  return [...points].sort((a, b) => a.eventTimeMs - b.eventTimeMs);
}

/** The workflow an outcome belongs to: the verifier detail the agents record, else the task id's prefix. */
export function workflowOf(o: Pick<EpisodeOutcome, 'verifierDetails' | 'taskId'>): string {
  return o.verifierDetails.workflow ?? o.taskId.split(':')[0] ?? 'unknown';
}

/** Wilson score interval (95 %) of a success rate: honest error bars for small windows. */
export function wilson(r: Rate, z = 1.96): [number, number] {
  if (r.episodes === 0) return [Number.NaN, Number.NaN];
  const n = r.episodes;
  const p = r.successes / n;
  const d = 1 + (z * z) / n;
  const centre = (p + (z * z) / (2 * n)) / d;
  const half = (z * Math.sqrt((p * (1 - p)) / n + (z * z) / (4 * n * n))) / d;
  return [Math.max(0, centre - half), Math.min(1, centre + half)];
}

export interface StartEnd {
  workflow: string;
  start: Rate;
  end: Rate;
  /** True when the end rate's 95 % interval lies wholly above the start rate's. */
  clearlyUp: boolean;
}

/**
 * Start versus end success per workflow: the first `startEpisodes` episodes
 * (sampled at or near version 0) against every episode whose outcome falls in
 * the last `endWindowMs` of the run.
 */
export function startVersusEnd(stats: DemoStats, options: { startEpisodes: number; endWindowMs: number; endAtMs: number }): StartEnd[] {
  return [...stats.outcomes.keys()].sort().map((workflow) => {
    const list = sortedByTime(stats.outcomes.get(workflow) ?? []);
    const start = rateOf(list.slice(0, options.startEpisodes));
    const from = options.endAtMs - options.endWindowMs;
    const end = rateOf(list.filter((p) => p.eventTimeMs >= from && p.eventTimeMs <= options.endAtMs));
    const clearlyUp = start.episodes > 0 && end.episodes > 0 && wilson(end)[0] > wilson(start)[1];
    return { workflow, start, end, clearlyUp };
  });
}

export interface TargetCheck {
  /** True when every workflow met the target over the window. */
  held: boolean;
  /** Per workflow: the window's rate and whether its 95 % interval lies at or above the target. */
  workflows: { workflow: string; rate: Rate; met: boolean }[];
}

/**
 * Whether every workflow has held `target` over the last `windowMs` before `nowMs`: the
 * window's success has a 95 % Wilson interval wholly at or above `target`, over at least
 * `minEpisodes` episodes. This is the test the demo's summary reports at the end ("end:
 * last 1:00"), so a run that ends early on it ends with the figure a user was promised.
 * A workflow with no episode yet never meets it.
 */
export function targetHeld(
  stats: DemoStats,
  workflows: readonly string[],
  options: { target: number; windowMs: number; nowMs: number; minEpisodes: number },
): TargetCheck {
  const from = options.nowMs - options.windowMs;
  const rows = workflows.map((workflow) => {
    const list = stats.outcomes.get(workflow) ?? [];
    // Outcomes arrive close to time order: walk back from the newest and stop well past the window.
    let successes = 0;
    let episodes = 0;
    for (let i = list.length - 1; i >= 0; i--) {
      const p = list[i];
      if (p.eventTimeMs < from - 60_000) break;
      if (p.eventTimeMs < from || p.eventTimeMs > options.nowMs) continue;
      episodes++;
      if (p.success) successes++;
    }
    const rate: Rate = { successes, episodes, rate: episodes === 0 ? Number.NaN : successes / episodes };
    const met = episodes >= options.minEpisodes && wilson(rate)[0] >= options.target;
    return { workflow, rate, met };
  });
  return { held: rows.length > 0 && rows.every((r) => r.met), workflows: rows };
}
