/**
 * The SRPO study's tables, from its runs: success and AUC per objective and learning
 * rate, each objective at its best learning rate against SRPO (sqrt) paired by seed, and
 * the optimisation diagnostics per set size K.
 */
import { ci95, excludesZero, mean, normalisedAuc, pairedDiff, pct, sampleVariance, type Interval } from '../stats';
import type { RunResult, StudyObjective } from './train';

export interface StudyMeta {
  command: string;
  date: string;
  minutes: number;
  cpu: string;
  cores: number;
  warm: { seed: number; steps: number; routerAccuracy: number; workSuccess: number; success: number }[];
}

export interface CellSummary {
  objective: StudyObjective;
  lr: number;
  seeds: number[];
  /** Work sets right with the final weights (the primary measure). */
  finalSuccess: Interval;
  /** Episodes right (routing and work) with the final weights. */
  finalEpisode: Interval;
  auc: Interval;
  clipFrac: number;
  routerClipFrac: number;
}

export interface ObjectiveSummary extends CellSummary {
  /** Paired (by seed) difference against the reference objective at its own best learning rate. */
  vsReference: { finalSuccess: Interval; auc: Interval } | null;
  perK: Record<string, { clipFrac: number; logRatioStd: number; gradNormVariance: number; gradNormMean: number; sets: number }>;
}

export const REFERENCE: StudyObjective = 'srpo-sqrt';

const bySeed = (rs: readonly RunResult[]) => [...rs].sort((a, b) => a.seed - b.seed);

export function cellOf(rs: readonly RunResult[]): CellSummary {
  const s = bySeed(rs);
  return {
    objective: s[0].objective,
    lr: s[0].lr,
    seeds: s.map((r) => r.seed),
    finalSuccess: ci95(s.map((r) => r.finalSuccess)),
    finalEpisode: ci95(s.map((r) => r.final.success)),
    auc: ci95(s.map((r) => normalisedAuc(r.curve))),
    clipFrac: mean(s.map((r) => r.clipFrac)),
    routerClipFrac: mean(s.map((r) => r.routerClipFrac)),
  };
}

/** Diagnostics per K, averaged over a cell's seeds (a seed without that K is left out). */
export function perKOf(rs: readonly RunResult[]): ObjectiveSummary['perK'] {
  const ks = [...new Set(rs.flatMap((r) => Object.keys(r.perK)))].sort((a, b) => Number(a) - Number(b));
  return Object.fromEntries(
    ks.map((k) => {
      const with_ = rs.filter((r) => r.perK[k]);
      const vars = with_.map((r) => sampleVariance(r.perK[k].gradNorms)).filter(Number.isFinite);
      return [
        k,
        {
          clipFrac: mean(with_.map((r) => r.perK[k].clipFrac)),
          logRatioStd: mean(with_.flatMap((r) => r.perK[k].logRatioStd)),
          gradNormVariance: vars.length > 0 ? mean(vars) : Number.NaN,
          gradNormMean: mean(with_.flatMap((r) => r.perK[k].gradNorms)),
          sets: with_.reduce((a, r) => a + r.perK[k].sets, 0),
        },
      ];
    }),
  );
}

const num = (x: number, d = 3) => (Number.isFinite(x) ? x.toFixed(d) : '–');
const verdict = (i: Interval) => (excludesZero(i) ? (i.mean > 0 ? 'higher' : 'lower') : 'no difference beyond noise');
const signed = (i: Interval) => `${i.mean >= 0 ? '+' : ''}${(100 * i.mean).toFixed(1)} ± ${(100 * i.half).toFixed(1)}`;

export function summarise(results: readonly RunResult[], meta: StudyMeta): { json: { cells: CellSummary[]; best: ObjectiveSummary[] }; markdown: string } {
  const objectives = [...new Set(results.map((r) => r.objective))];
  const lrs = [...new Set(results.map((r) => r.lr))].sort((a, b) => a - b);
  const cells = objectives.flatMap((o) =>
    lrs
      .map((lr) => results.filter((r) => r.objective === o && r.lr === lr))
      .filter((rs) => rs.length > 0)
      .map(cellOf),
  );
  // Best learning rate per objective: highest mean AUC over seeds (the same budget for every cell).
  const bestCell = (o: StudyObjective) => cells.filter((c) => c.objective === o).reduce((a, b) => (b.auc.mean > a.auc.mean ? b : a));
  const runsOf = (c: CellSummary) => bySeed(results.filter((r) => r.objective === c.objective && r.lr === c.lr));
  const ref = objectives.includes(REFERENCE) ? runsOf(bestCell(REFERENCE)) : null;
  const best: ObjectiveSummary[] = objectives.map((o) => {
    const c = bestCell(o);
    const rs = runsOf(c);
    const paired = ref && o !== REFERENCE && ref.length === rs.length && ref.every((r, i) => r.seed === rs[i].seed);
    return {
      ...c,
      vsReference: paired
        ? {
            finalSuccess: pairedDiff(
              rs.map((r) => r.finalSuccess),
              ref.map((r) => r.finalSuccess),
            ),
            auc: pairedDiff(
              rs.map((r) => normalisedAuc(r.curve)),
              ref.map((r) => normalisedAuc(r.curve)),
            ),
          }
        : null,
      perK: perKOf(rs),
    };
  });

  const n = results.length === 0 ? 0 : Math.max(...cells.map((c) => c.seeds.length));
  const lines: string[] = [];
  lines.push(`Every objective at every learning rate (${n} seeds each; mean ± 95 % interval over seeds):`, '');
  lines.push(
    '| objective | lr | final work-set success | AUC of training work-set success | final episode success | clip fraction (workers) |',
    '|---|---|---|---|---|---|',
  );
  for (const c of cells)
    lines.push(`| ${c.objective} | ${c.lr} | ${pct(c.finalSuccess)} % | ${pct(c.auc)} % | ${pct(c.finalEpisode)} % | ${(100 * c.clipFrac).toFixed(1)} % |`);
  lines.push('', `Each objective at its best learning rate (highest mean AUC), against ${REFERENCE} at its own, paired by seed:`, '');
  lines.push(`| objective | lr | final success | AUC | final success − ${REFERENCE} | AUC − ${REFERENCE} | reading |`, '|---|---|---|---|---|---|---|');
  for (const b of best) {
    const v = b.vsReference;
    lines.push(
      `| ${b.objective} | ${b.lr} | ${pct(b.finalSuccess)} % | ${pct(b.auc)} % | ${v ? signed(v.finalSuccess) : '(reference)'} | ${v ? signed(v.auc) : ''} | ${v ? `success ${verdict(v.finalSuccess)}; AUC ${verdict(v.auc)}` : ''} |`,
    );
  }
  const ks = [...new Set(best.flatMap((b) => Object.keys(b.perK)))].sort((a, b) => Number(a) - Number(b));
  lines.push(
    '',
    "Optimisation diagnostics of the worker policy per set size K, at each objective's best learning rate (means over seeds). " +
      'The losses are normalised differently (per set, member or token), so gradient norms compare across objectives through their coefficient of variation CV = √variance / mean:',
    '',
  );
  lines.push(
    '| objective | ' +
      ks.map((k) => `K=${k} clip`).join(' | ') +
      ' | ' +
      ks.map((k) => `K=${k} std Σℓ`).join(' | ') +
      ' | ' +
      ks.map((k) => `K=${k} grad-norm var (mean; CV)`).join(' | ') +
      ' |',
  );
  lines.push('|---|' + ks.map(() => '---').join('|') + '|' + ks.map(() => '---').join('|') + '|' + ks.map(() => '---').join('|') + '|');
  for (const b of best) {
    const g = (k: string) => b.perK[k];
    lines.push(
      `| ${b.objective} | ` +
        ks.map((k) => (g(k) ? `${(100 * g(k).clipFrac).toFixed(1)} %` : '–')).join(' | ') +
        ' | ' +
        ks.map((k) => (g(k) ? num(g(k).logRatioStd) : '–')).join(' | ') +
        ' | ' +
        ks
          .map((k) =>
            g(k) ? `${num(g(k).gradNormVariance, 1)} (${num(g(k).gradNormMean, 2)}; ${num(Math.sqrt(g(k).gradNormVariance) / g(k).gradNormMean, 2)})` : '–',
          )
          .join(' | ') +
        ' |',
    );
  }
  const sets = best[0]
    ? Object.entries(best[0].perK)
        .map(([k, v]) => `K=${k}: ${v.sets}`)
        .join(', ')
    : '';
  lines.push('', `Work sets seen per K (${best[0]?.objective ?? ''}, all seeds): ${sets}.`);
  const warm = (f: (w: StudyMeta['warm'][number]) => number) => meta.warm.map((w) => (100 * f(w)).toFixed(0)).join(', ');
  lines.push(
    '',
    `Warm start per seed (sampled, before RL), in %: routing right ${warm((w) => w.routerAccuracy)}; work set right ${warm((w) => w.workSuccess)}; episodes ${warm((w) => w.success)}.`,
  );
  lines.push('', `_${meta.command}: ${results.length} runs in ${meta.minutes.toFixed(1)} min on ${meta.cpu} (${meta.cores} cores), ${meta.date}._`);
  return { json: { cells, best }, markdown: lines.join('\n') + '\n' };
}
