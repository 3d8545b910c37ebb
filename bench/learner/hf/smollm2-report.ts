import { best, median } from '../bench-common';

/** The comparison and the printed table of bench/learner/hf/smollm2.ts. */

export type Mode = 'lora' | 'full';

/** One side's result in a round, as smollm2.ts's tfjs worker and torch_hf_learner.py print it. */
export interface SideResult {
  side: string;
  steps: number;
  msPerStep: number;
  firstStepMs: number;
  tokensPerStep: number;
  tokensPerSecond: number;
  firstLoss: number;
  firstGradNorm: number;
  lastLoss: number;
  lastGradNorm: number;
  rssAfterLoadBytes: number;
  peakRssBytes: number;
  parameters: number;
  device?: string;
  kernels?: string;
  [key: string]: unknown;
}

/** One mode on one side, every round. */
export interface Row {
  mode: Mode;
  side: string;
  results: SideResult[];
}

/** tfjs against one PyTorch side in one mode: speed and memory ratios, and how far the two computations are apart. */
export interface Comparison {
  medianTokensPerSecond: number;
  bestTokensPerSecond: number;
  peakRss: number;
  firstLossDiff: number;
  lastLossDiff: number;
  firstGradNormRelDiff: number;
  lastGradNormRelDiff: number;
}

export const TFJS_SIDE = 'tfjs-tensorflow';

const rel = (a: number, b: number): number => Math.abs(a - b) / Math.max(Math.abs(b), 1e-30);

function tfjsRow(rows: readonly Row[], mode: Mode): Row {
  const row = rows.find((r) => r.mode === mode && r.side === TFJS_SIDE);
  if (!row) throw new Error(`no ${TFJS_SIDE} results for ${mode}`);
  return row;
}

/** Per mode, tfjs (median of its rounds) against each PyTorch side, keyed `mode: tfjs / side`. */
export function compareSides(rows: readonly Row[], modes: readonly Mode[]): Record<string, Comparison> {
  const out: Record<string, Comparison> = {};
  for (const mode of modes) {
    const mine = tfjsRow(rows, mode);
    const m = median(mine.results);
    for (const other of rows.filter((r) => r.mode === mode && r !== mine)) {
      const o = median(other.results);
      out[`${mode}: tfjs / ${other.side}`] = {
        medianTokensPerSecond: m.tokensPerSecond / o.tokensPerSecond,
        bestTokensPerSecond: best(mine.results).tokensPerSecond / best(other.results).tokensPerSecond,
        peakRss: m.peakRssBytes / o.peakRssBytes,
        firstLossDiff: Math.abs(m.firstLoss - o.firstLoss),
        lastLossDiff: Math.abs(m.lastLoss - o.lastLoss),
        firstGradNormRelDiff: rel(m.firstGradNorm, o.firstGradNorm),
        lastGradNormRelDiff: rel(m.lastGradNorm, o.lastGradNorm),
      };
    }
  }
  return out;
}

const mb = (b: number): string => (b / 2 ** 20).toFixed(0);

/** The printed report: header, one row per mode and side (medians), the comparisons, what computed, notes. */
export function formatReport(
  header: string,
  machine: string,
  run: { rounds: number; steps: number; warmup: number; modes: readonly Mode[] },
  rows: readonly Row[],
  comparisons: Record<string, Comparison>,
): string[] {
  const lines = [header, machine, `rounds: ${run.rounds} x ${run.steps} timed steps after ${run.warmup} warm-up (the first included), sides alternating`];
  lines.push(
    `${'mode'.padEnd(6)}${'side'.padEnd(22)}${'trained'.padStart(12)}${'ms/step'.padStart(10)}${'tokens/s'.padStart(10)}${'1st step ms'.padStart(12)}` +
      `${'first loss'.padStart(15)}${'last loss'.padStart(15)}${'last |g|'.padStart(11)}${'RSS load MB'.padStart(12)}${'peak RSS MB'.padStart(12)}`,
  );
  for (const r of rows) {
    const x = median(r.results);
    lines.push(
      `${r.mode.padEnd(6)}${r.side.padEnd(22)}${String(x.parameters).padStart(12)}${x.msPerStep.toFixed(1).padStart(10)}${Math.round(x.tokensPerSecond).toString().padStart(10)}${x.firstStepMs.toFixed(0).padStart(12)}` +
        `${x.firstLoss.toFixed(9).padStart(15)}${x.lastLoss.toFixed(9).padStart(15)}${x.lastGradNorm.toPrecision(3).padStart(11)}${mb(x.rssAfterLoadBytes).padStart(12)}${mb(x.peakRssBytes).padStart(12)}`,
    );
  }
  for (const [label, q] of Object.entries(comparisons)) {
    lines.push(
      `${label} tokens/s: median ${q.medianTokensPerSecond.toFixed(2)}x, best ${q.bestTokensPerSecond.toFixed(2)}x (goal >= 0.9x); peak RSS ${q.peakRss.toFixed(2)}x; ` +
        `|Δ| first-step loss ${q.firstLossDiff.toExponential(2)}, gradient norm ${q.firstGradNormRelDiff.toExponential(2)} rel; last step loss ${q.lastLossDiff.toExponential(2)}, gradient norm ${q.lastGradNormRelDiff.toExponential(2)} rel`,
    );
  }
  for (const r of rows) lines.push(`${r.mode} ${r.side}: ${r.results[0].device ?? ''}; ${r.results[0].kernels ?? ''}`);
  // Warm-up and timed steps repeat one batch: at too high an lr every set ends clipped (flat loss, zero
  // gradient), and the last-step agreement then compares nothing. The work per step is the same.
  for (const mode of run.modes) {
    if (median(tfjsRow(rows, mode).results).lastGradNorm === 0)
      lines.push(`note: ${mode}: every set is clipped at the last step (gradient norm 0); a lower --lr-${mode} keeps the last-step comparison meaningful`);
  }
  return lines;
}
