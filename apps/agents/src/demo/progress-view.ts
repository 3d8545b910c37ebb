import { wilson, type DemoStats, type Rate, type StartEnd } from './demo-stats';

/** Plain ANSI: no dependency. */
const ESC = '\x1b[';
export const ansi = {
  bold: (s: string) => `${ESC}1m${s}${ESC}0m`,
  dim: (s: string) => `${ESC}2m${s}${ESC}0m`,
  green: (s: string) => `${ESC}32m${s}${ESC}0m`,
  red: (s: string) => `${ESC}31m${s}${ESC}0m`,
  cyan: (s: string) => `${ESC}36m${s}${ESC}0m`,
  /** Moves the cursor up `n` lines to column 0 and clears to the end of the screen. */
  rewind: (n: number) => (n > 0 ? `${ESC}${n}F${ESC}J` : ''),
};

const plain = { bold: (s: string) => s, dim: (s: string) => s, green: (s: string) => s, red: (s: string) => s, cyan: (s: string) => s };

/**
 * Fits a line to the terminal width: a wrapped line would take two rows and
 * break the panel's redraw (which moves the cursor up by lines). Long lines
 * lose their colours and end with an ellipsis.
 */
export function fit(line: string, columns: number | undefined): string {
  if (!columns || columns < 10) return line;
  // eslint-disable-next-line no-control-regex -- matches ANSI escape sequences, which start with the ESC control character
  const visible = line.replace(/\x1b\[[0-9;]*[A-Za-z]/g, '');
  return visible.length < columns ? line : `${visible.slice(0, columns - 2)}…`;
}

/** `[██████░░░░]`; fractions outside [0, 1] (or NaN) are clamped. */
export function bar(fraction: number, width = 20): string {
  const f = Number.isFinite(fraction) ? Math.min(1, Math.max(0, fraction)) : 0;
  const full = Math.round(f * width);
  return `[${'█'.repeat(full)}${'░'.repeat(width - full)}]`;
}

export function clock(ms: number): string {
  const s = Math.max(0, Math.floor(ms / 1000));
  return `${Math.floor(s / 60)}:${String(s % 60).padStart(2, '0')}`;
}

export function pct(x: number, digits = 0): string {
  return Number.isFinite(x) ? `${(100 * x).toFixed(digits)}%` : '—';
}

export function num(n: number): string {
  return n.toLocaleString('en-US');
}

export interface LiveView {
  runId: string;
  prefix: string;
  elapsedMs: number;
  totalMs: number;
  workflows: string[];
  policies: string[];
  /** Rolling window for the live success rates. */
  recentEpisodes: number;
  /** Start rate per workflow (first episodes), shown next to the live one. */
  startRates: Record<string, Rate>;
  auditUrls: string[];
}

/**
 * The live panel: progress bars for the pipeline stages and a line of success
 * rate per workflow, clip fraction and policy version.
 */
export function renderLive(stats: DemoStats, v: LiveView, color: boolean): string[] {
  const c = color ? ansi : plain;
  const secs = Math.max(1, v.elapsedMs / 1000);
  const episodes = stats.episodes();
  const trained = [...stats.policies.values()].reduce((a, p) => a + p.groups, 0);
  const lines = [
    `${c.bold('SRPO demo')} ${clock(v.elapsedMs)} / ${clock(v.totalMs)} ${bar(v.elapsedMs / v.totalMs)}  run ${v.runId}`,
    ` episodes ${num(episodes).padStart(9)} ${bar(v.elapsedMs / v.totalMs)} ${(episodes / secs).toFixed(0)}/s`,
    ` sets     ${num(stats.setsComplete).padStart(9)} ${bar(stats.setsComplete / Math.max(1, stats.transitions))} ${pct(stats.setsComplete / Math.max(1, stats.transitions))} of ${num(stats.transitions)} transitions materialized${stats.setsInvalid > 0 ? c.red(`, ${stats.setsInvalid} invalid`) : ''}`,
    ` groups   ${num(stats.groups).padStart(9)} ${bar(stats.groupSets / Math.max(1, stats.setsComplete))} ${pct(stats.groupSets / Math.max(1, stats.setsComplete))} of sets grouped, ${stats.groupsDegenerate} degenerate${stats.groupsFromProgress > 0 ? `, ${stats.groupsFromProgress} from progress` : ''}`,
    ` updates  ${num([...stats.policies.values()].reduce((a, p) => a + p.updates, 0)).padStart(9)} ${bar(trained / Math.max(1, stats.groups))} ${pct(trained / Math.max(1, stats.groups))} of groups trained on`,
    ` success  ${v.workflows
      .map((w) => {
        const r = stats.recentSuccess(w, v.recentEpisodes);
        const s = v.startRates[w];
        const up = s && Number.isFinite(r.rate) && Number.isFinite(s.rate) && r.rate > s.rate;
        return `${w} ${(up ? c.green : (x: string) => x)(pct(r.rate).padStart(4))}`;
      })
      .join('  ')}  ${c.dim(`(last ${v.recentEpisodes} episodes each; first ${v.workflows.map((w) => pct(v.startRates[w]?.rate ?? Number.NaN)).join('/')})`)}`,
    ` policies ${v.policies
      .map((id) => {
        const p = stats.policy(id);
        return `${id} v${p.version} clip ${pct(p.clipFrac, 1)}`;
      })
      .join('  ')}`,
  ];
  if (stats.deadLetterCount() > 0)
    lines.push(c.red(` dead letters ${stats.deadLetterCount()}: ${[...stats.deadLetters].map(([r, n]) => `${r}=${n}`).join(', ')}`));
  lines.push(c.dim(` audit API ${v.auditUrls.join('  ')}`));
  return lines;
}

/** One log line for terminals that are not TTYs (CI, pipes). */
export function renderLogLine(stats: DemoStats, v: LiveView): string {
  const success = v.workflows.map((w) => `${w}=${pct(stats.recentSuccess(w, v.recentEpisodes).rate)}`).join(' ');
  const policies = v.policies.map((id) => `${id}:v${stats.policy(id).version}/clip=${pct(stats.policy(id).clipFrac, 1)}`).join(' ');
  return `[demo ${clock(v.elapsedMs)}/${clock(v.totalMs)}] episodes=${stats.episodes()} sets=${stats.setsComplete} groups=${stats.groups} updates=${[...stats.policies.values()].reduce((a, p) => a + p.updates, 0)} success(last ${v.recentEpisodes}) ${success} policies ${policies}${stats.deadLetterCount() > 0 ? ` deadLetters=${stats.deadLetterCount()}` : ''}`;
}

export interface SummaryView {
  runId: string;
  runDir: string;
  trainedMs: number;
  startEpisodes: number;
  endWindowMs: number;
  rows: StartEnd[];
  policies: string[];
  auditUrls: string[];
  serving: boolean;
}

function rateCell(r: Rate): string {
  if (r.episodes === 0) return '—';
  const [lo, hi] = wilson(r);
  return `${pct(r.rate, 1)} (${num(r.successes)}/${num(r.episodes)}; ${pct(lo, 1)}–${pct(hi, 1)})`;
}

function table(header: string[], rows: string[][]): string[] {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const line = (cells: string[]) => `| ${cells.map((cell, i) => cell.padEnd(widths[i])).join(' | ')} |`;
  return [line(header), `|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`, ...rows.map(line)];
}

/** The end-of-run report: pipeline totals, start-versus-end success per workflow, policies, audit API. */
export function renderSummary(stats: DemoStats, v: SummaryView, color: boolean): string[] {
  const c = color ? ansi : plain;
  const out: string[] = ['', c.bold(`SRPO demo ${v.runId}: ${clock(v.trainedMs)} of training`), ''];
  out.push(
    ...table(
      ['pipeline', 'count'],
      [
        ['episodes', num(stats.episodes())],
        ['agent outputs (stamped with a learned version > 0)', `${num(stats.outputs)} (${num(stats.outputsNewVersion)})`],
        ['transitions', num(stats.transitions)],
        ['active sets complete / invalid', `${num(stats.setsComplete)} / ${num(stats.setsInvalid)}`],
        ['advantage groups (degenerate, from progress)', `${num(stats.groups)} (${num(stats.groupsDegenerate)}, ${num(stats.groupsFromProgress)})`],
        ['dead letters', num(stats.deadLetterCount())],
      ],
    ),
  );
  out.push('');
  out.push(
    ...table(
      ['workflow', `start: first ${v.startEpisodes} episodes`, `end: last ${clock(v.endWindowMs)}`, 'change'],
      v.rows.map((r) => [
        r.workflow,
        rateCell(r.start),
        rateCell(r.end),
        `${r.end.rate - r.start.rate >= 0 ? '+' : ''}${((r.end.rate - r.start.rate) * 100).toFixed(1)} pts${r.clearlyUp ? ' ▲' : ''}`,
      ]),
    ),
  );
  out.push(c.dim('success rate (successes/episodes, 95% Wilson interval); ▲: the end interval lies wholly above the start interval'));
  out.push('');
  out.push(
    ...table(
      ['policy', 'updates', 'version', 'newest version stamped on an output', 'clip fraction (last / mean)', 'grad norm (last)'],
      v.policies.map((id) => {
        const p = stats.policy(id);
        return [
          id,
          num(p.updates),
          `v${p.version}`,
          `v${p.stampedVersion}`,
          `${pct(p.clipFrac, 1)} / ${pct(p.clipFracMean, 1)}`,
          Number.isFinite(p.gradNorm) ? p.gradNorm.toFixed(3) : '—',
        ];
      }),
    ),
  );
  out.push('');
  out.push(`audit API (GET /updates, /updates/:id, /policies): ${v.auditUrls.join('  ')}`);
  out.push(
    v.serving
      ? 'the learners keep serving it until Ctrl-C'
      : `served while the demo ran; rerun with --serve to keep it up after training. Audit databases and checkpoints: ${v.runDir}`,
  );
  return out;
}
