import type { ProbeResult } from './backend-probe';

/** One agreement check between two backends' probe results. */
export interface ProbeCheck {
  name: string;
  /** The measured difference (max |a − b|, or ‖a − b‖/‖a‖ for `rel` checks, or 0/1 for exact ones). */
  value: number;
  /** Passes when value < limit (exact checks: value must be 0). */
  limit: number;
  ok: boolean;
}

/** ‖a − b‖ / ‖a‖ (a is the reference); Infinity on a length mismatch. */
export function relL2(a: readonly number[], b: readonly number[]): number {
  if (a.length !== b.length) return Infinity;
  let num = 0;
  let den = 0;
  for (let i = 0; i < a.length; i++) {
    num += (a[i] - b[i]) ** 2;
    den += a[i] ** 2;
  }
  return Math.sqrt(num) / Math.max(Math.sqrt(den), 1e-30);
}

export function maxAbs(a: readonly number[], b: readonly number[]): number {
  if (a.length !== b.length) return Infinity;
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
  return m;
}

/**
 * Float32 agreement of `other` with the reference `ref` (native TensorFlow on
 * the CPU): forward, per-weight gradients, scoring, sampling and an SRPO
 * trajectory on the same batch. Shared by webgpu.spec.ts and the GPU-machine
 * run (bench/learner/gpu), so both hold the same bar.
 */
export function compareProbes(ref: ProbeResult, other: ProbeResult): ProbeCheck[] {
  const checks: ProbeCheck[] = [];
  const add = (name: string, value: number, limit: number): void => {
    checks.push({ name, value, limit, ok: limit === 0 ? value === 0 : value < limit });
  };
  add('logits max |diff|', maxAbs(ref.logits, other.logits), 1e-5);
  add('logits (gather embedding) max |diff|', maxAbs(ref.wideLogits, other.wideLogits), 1e-5);
  for (const [label, a, b] of [
    ['grad', ref.grads, other.grads],
    ['grad (gather embedding)', ref.wideGrads, other.wideGrads],
  ] as const) {
    for (const name of Object.keys(a)) add(`${label} ${name} rel`, b[name] ? relL2(a[name], b[name]) : Infinity, 1e-4);
  }
  add('token log-probs max |diff|', maxAbs(ref.tokenLogProbs, other.tokenLogProbs), 1e-5);
  add('sampled tokens differ', JSON.stringify(ref.samples.map((s) => s.tokens)) === JSON.stringify(other.samples.map((s) => s.tokens)) ? 0 : 1, 0);
  add(
    'sample log-probs max |diff|',
    maxAbs(
      ref.samples.flatMap((s) => s.logProbs),
      other.samples.flatMap((s) => s.logProbs),
    ),
    1e-5,
  );
  add('SRPO losses max |diff|', maxAbs(ref.losses, other.losses), 1e-5);
  add('SRPO grad norms rel', relL2(ref.gradNorms, other.gradNorms), 1e-5);
  const names = Object.keys(ref.finalWeights);
  const flat = (w: Record<string, number[]>): number[] => names.flatMap((n) => w[n] ?? []);
  add('initial weights max |diff|', maxAbs(flat(ref.initialWeights), flat(other.initialWeights)), 0);
  // Adam divides by √v: compare the weight changes, not only the (near-identical) weights.
  const delta = (r: ProbeResult): number[] => names.flatMap((n) => (r.finalWeights[n] ?? []).map((w, i) => w - r.initialWeights[n][i]));
  add('SRPO weight change rel', relL2(delta(ref), delta(other)), 1e-3);
  add('tensors leaked', Math.abs(other.tensorsLeaked), 0);
  add('not deterministic', other.deterministic ? 0 : 1, 0);
  return checks;
}
