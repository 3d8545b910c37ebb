import { ValidationError } from '@srpo/core';

/** Learning-rate schedules, indexed by optimizer step (0 = the first update). */
export type LrSchedule =
  | { kind: 'constant'; lr: number }
  | {
      kind: 'warmup-cosine';
      /** Rate reached at the end of warmup. */
      peakLr: number;
      /** Linear ramp from peakLr/warmupSteps to peakLr over this many steps (0 = none). */
      warmupSteps: number;
      /** Step at which the cosine reaches `minLr`; later steps stay at `minLr`. */
      totalSteps: number;
      /** Floor; default 0. */
      minLr?: number;
    };

export function validateLrSchedule(s: LrSchedule, field = 'schedule'): LrSchedule {
  const nonNeg = (name: string, v: unknown): void => {
    if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) throw new ValidationError(`${field}.${name}`, `must be a finite number >= 0, got ${String(v)}`);
  };
  switch (s.kind) {
    case 'constant':
      nonNeg('lr', s.lr);
      return s;
    case 'warmup-cosine':
      nonNeg('peakLr', s.peakLr);
      nonNeg('minLr', s.minLr ?? 0);
      if (!Number.isInteger(s.warmupSteps) || s.warmupSteps < 0)
        throw new ValidationError(`${field}.warmupSteps`, `must be a non-negative integer, got ${s.warmupSteps}`);
      if (!Number.isInteger(s.totalSteps) || s.totalSteps < s.warmupSteps) {
        throw new ValidationError(`${field}.totalSteps`, `must be an integer >= warmupSteps (${s.warmupSteps}), got ${s.totalSteps}`);
      }
      if ((s.minLr ?? 0) > s.peakLr) throw new ValidationError(`${field}.minLr`, `must not exceed peakLr (${s.peakLr}), got ${s.minLr}`);
      return s;
    default:
      throw new ValidationError(`${field}.kind`, `unknown schedule ${String((s as { kind: unknown }).kind)}; expected constant or warmup-cosine`);
  }
}

/** The learning rate for optimizer step `step` (0-based). Pure, so replays recompute it exactly. */
export function learningRateAt(schedule: LrSchedule, step: number): number {
  if (schedule.kind === 'constant') return schedule.lr;
  const { peakLr, warmupSteps, totalSteps } = schedule;
  const minLr = schedule.minLr ?? 0;
  if (step < warmupSteps) return (peakLr * (step + 1)) / warmupSteps;
  const decaySteps = totalSteps - warmupSteps;
  if (decaySteps <= 0 || step >= totalSteps) return step >= totalSteps ? minLr : peakLr;
  const progress = (step - warmupSteps) / decaySteps;
  return minLr + 0.5 * (peakLr - minLr) * (1 + Math.cos(Math.PI * progress));
}
