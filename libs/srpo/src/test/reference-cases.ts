import * as tf from '@tensorflow/tfjs';
import { disposeObjectiveOutput, objectiveLoss } from '../objective';
import { DEFAULT_OBJECTIVE_CONFIG, type ObjectiveConfig } from '../config';
import type { PaddedSetBatch } from '../padded-batch';

/**
 * The SRPO objective's reference cases for the implementations outside TypeScript: inputs and the
 * values libs/srpo's `objectiveLoss` (the one reference) gives for them, loss, per-set log-ratio,
 * flags and the per-token gradient ∂loss/∂logpNew. Checked in as
 * `examples/python-trainer/fixtures/srpo-reference-cases.json` (written by
 * `examples/python-trainer/make-reference-cases.ts`), read by the Python tests
 * (examples/python-trainer/test_srpo_reference.py); `reference-cases.spec.ts` recomputes them
 * here and fails when the checked-in file no longer equals the reference's output.
 *
 * Computed on tfjs's `cpu` backend (plain JavaScript float32): the same bits on every machine.
 * Inputs are float32 values (rounded here before use), so the Python side loads the same numbers.
 */

/** A float32 value in JSON: a number, or the name of a non-finite one (Python's `float()` reads them). */
export type JsonFloat = number | 'NaN' | 'Infinity' | '-Infinity';

/** The clip and reduction settings a case uses, with the names of `ObjectiveConfig`. */
export type ReferenceConfig = Pick<ObjectiveConfig, 'objective' | 'eventReduction' | 'clipLow' | 'clipHigh' | 'dualClip' | 'clipRatioC'>;

export interface ReferenceCase {
  name: string;
  /** What the case exercises, for a reader of the JSON. */
  why: string;
  config: ReferenceConfig;
  /** [M] set index of each member row. */
  memberSet: number[];
  /** [S] one advantage per set. */
  advantage: number[];
  /** [M][T] padded rows; 0 where padded. */
  logpOld: JsonFloat[][];
  logpNew: JsonFloat[][];
  mask: number[][];
  /** The reference's outputs. */
  expected: {
    loss: JsonFloat;
    /** [S] L_e, the clipped quantity's log. */
    logRatio: JsonFloat[];
    /** [S] K_e. */
    setSize: number[];
    clippedLow: number[];
    clippedHigh: number[];
    clippedDual: number[];
    outOfRange: number[];
    /** [M][T] ∂loss/∂logpNew. */
    grad: JsonFloat[][];
  };
}

export interface ReferenceCaseFile {
  about: string;
  regenerate: string;
  cases: ReferenceCase[];
}

export const REFERENCE_CASES_PATH = 'examples/python-trainer/fixtures/srpo-reference-cases.json';
export const REGENERATE_REFERENCE_CASES = 'npm run build:bench && node dist-bench/examples/python-trainer/make-reference-cases.js';

interface CaseInput {
  name: string;
  why: string;
  config: Partial<ReferenceConfig>;
  /** One entry per set: its advantage and its members' (logpOld, logpNew, mask) rows, unpadded. */
  sets: { advantage: number; members: { logpOld: number[]; logpNew: number[]; mask: number[] }[] }[];
  /** Padding value of logpNew (e.g. −∞ from a masked vocabulary); 0 by default. */
  padNew?: number;
}

/** Seeded values in [−a, a) from a small LCG, so the cases do not depend on Math.random. */
function seeded(n: number, seed: number, a: number): number[] {
  let s = seed >>> 0;
  return Array.from({ length: n }, () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return (s / 2 ** 32) * 2 * a - a;
  });
}

/** A seeded batch: set sizes `sizes`, tokens 1..t per member, a masked token now and then, log-ratios of scale `spread`. */
function seededSets(sizes: number[], t: number, seed: number, spread: number, shift: (set: number) => number): CaseInput['sets'] {
  let k = 0;
  return sizes.map((size, s) => ({
    advantage: seeded(1, seed + 97 * s, 1.5)[0],
    members: Array.from({ length: size }, () => {
      k++;
      const len = 1 + ((k * 7 + seed) % t);
      const old = seeded(len, seed * 31 + k, 1).map((v) => -0.3 - 2 * Math.abs(v));
      const delta = seeded(len, seed * 37 + k, spread);
      return {
        logpOld: old,
        logpNew: old.map((v, i) => v + delta[i] + shift(s) / len),
        mask: old.map((_, i) => (len > 1 && (i + k) % 5 === 3 ? 0 : 1)),
      };
    }),
  }));
}

const member = (logpOld: number[], logpNew: number[], mask?: number[]) => ({ logpOld, logpNew, mask: mask ?? logpOld.map(() => 1) });

/** The cases: each edge case the objective documents, for the configs the trainers take. */
function caseInputs(): CaseInput[] {
  return [
    {
      name: 'mixed-sizes-sqrt',
      why: 'K = 1, 2, 3 with padding and masked tokens, 1/√K, ratios inside the clips, one zero advantage',
      config: { eventReduction: 'sqrt', dualClip: false },
      sets: [
        { advantage: 0.9, members: [member([-1.2, -0.7, -2.3], [-1.15, -0.72, -2.25]), member([-0.4, -1.9], [-0.42, -1.85])] },
        { advantage: -0.6, members: [member([-0.9, -1.4], [-0.93, -1.38])] },
        {
          advantage: 0,
          members: [member([-1.5, -0.3, -0.8, -2.2], [-1.45, -0.35, -0.7, -2.1], [1, 1, 0, 1]), member([-0.5], [-0.52]), member([-1, -1.1], [-0.98, -1.12])],
        },
      ],
    },
    {
      name: 'both-clips-sum',
      why: 'the high clip (ρ > 1 + ε, A > 0) and the low clip (ρ < 1 − ε, A < 0) active, sum reduction, asymmetric ε',
      config: { eventReduction: 'sum', clipLow: 0.1, clipHigh: 0.3, dualClip: false },
      sets: [
        { advantage: 1.2, members: [member([-1, -2], [-0.7, -1.8]), member([-0.5], [-0.3])] },
        { advantage: -0.7, members: [member([-1.3, -0.4, -0.9], [-1.5, -0.6, -1])] },
        { advantage: 0.4, members: [member([-0.8], [-0.78])] },
        { advantage: -1.1, members: [member([-0.6, -0.6], [-0.58, -0.61])] },
      ],
    },
    {
      name: 'dual-clip-mean',
      why: 'the dual clip active (ρ > c with A < 0), mean reduction, c = 2',
      config: { eventReduction: 'mean', dualClip: true, clipRatioC: 2 },
      sets: [
        { advantage: -0.5, members: [member([-3, -2.5], [-1.5, -1]), member([-2], [-0.9])] },
        { advantage: -0.8, members: [member([-1, -1], [-0.95, -1.02])] },
        { advantage: 0.6, members: [member([-2.2], [-1.2])] },
      ],
    },
    {
      name: 'single-member-sets',
      why: 'K = 1 everywhere (c(1) = 1 for every reduction), default config',
      config: {},
      sets: seededSets([1, 1, 1, 1, 1, 1], 6, 7, 0.15, () => 0),
    },
    {
      name: 'floor-log-prob-dual',
      why: 'a behaviour log-prob floored at −9999: log ρ far past MAX_LOG_RATIO, evaluated through the bound, dual clip on',
      config: { eventReduction: 'sqrt', dualClip: true, clipRatioC: 3 },
      sets: [
        { advantage: 1, members: [member([-1.2, -0.7, -2.3], [-1.1, -0.75, -2.2]), member([-0.4, -1.9], [-0.45, -1.8])] },
        { advantage: -0.8, members: [member([-0.9, -9999, -1.4], [-1, -3.2, -1.3]), member([-2, -0.6], [-2.1, -0.5])] },
        { advantage: 0.3, members: [member([-0.5], [-0.6])] },
      ],
    },
    {
      name: 'floor-log-prob-no-dual',
      why: 'the same floor without the dual clip: A < 0 saturates at e^44.36·A with gradient 0 (finite loss, out of range)',
      config: { eventReduction: 'sqrt', dualClip: false },
      sets: [
        { advantage: 1, members: [member([-1.2, -0.7, -2.3], [-1.1, -0.75, -2.2])] },
        { advantage: -0.8, members: [member([-0.9, -9999, -1.4], [-1, -3.2, -1.3]), member([-2, -0.6], [-2.1, -0.5])] },
        { advantage: 0.5, members: [member([-9999, -1], [-2, -1.1])] },
      ],
    },
    {
      name: 'inf-padding-and-behaviour',
      why: 'logpNew −∞ at every padded position (a masked vocabulary), a counted behaviour log-prob of −∞ (bounded at 1e6 nats, gradient 0)',
      config: { dualClip: true, clipRatioC: 3 },
      padNew: -Infinity,
      sets: [
        { advantage: 0.8, members: [member([-1, -2, -0.5], [-0.9, -2.1, -0.45]), member([-0.3], [-0.35])] },
        { advantage: -0.4, members: [member([-Infinity, -1], [-2, -1.1]), member([-0.7, -0.8], [-0.6, -Infinity], [1, 0])] },
      ],
    },
    {
      name: 'nan-counted',
      why: 'a NaN logpNew at a counted token: loss NaN, the NaN set’s gradient NaN, the other sets’ finite',
      config: { dualClip: true, clipRatioC: 3 },
      sets: [
        { advantage: 1, members: [member([-1, -2], [-0.9, Number.NaN]), member([-0.4], [-0.5])] },
        { advantage: -0.5, members: [member([-1.5, -0.5], [-1.4, -0.6])] },
      ],
    },
    {
      name: 'seeded-defaults',
      why: 'twelve seeded sets of 1–4 members and up to 9 tokens, default config (1/√K, ε = 0.2, dual clip c = 3), some sets pushed past the clips',
      config: {},
      sets: seededSets([2, 1, 3, 4, 1, 2, 3, 1, 2, 4, 1, 2], 9, 11, 0.2, (s) => (s % 4 === 0 ? 0.6 : s % 4 === 1 ? -0.6 : s % 4 === 2 ? 1.4 : 0)),
    },
    {
      name: 'seeded-sum-asymmetric',
      why: 'eight seeded sets, sum reduction, ε_low = 0.15, ε_high = 0.28, no dual clip',
      config: { eventReduction: 'sum', clipLow: 0.15, clipHigh: 0.28, dualClip: false },
      sets: seededSets([3, 1, 2, 2, 4, 1, 1, 3], 7, 23, 0.15, (s) => (s % 3 === 0 ? 0.4 : s % 3 === 1 ? -0.4 : 0)),
    },
  ];
}

function toJsonFloat(v: number): JsonFloat {
  if (Number.isNaN(v)) return 'NaN';
  if (v === Infinity) return 'Infinity';
  if (v === -Infinity) return '-Infinity';
  return v;
}

function rows(values: ArrayLike<number>, m: number, t: number): JsonFloat[][] {
  return Array.from({ length: m }, (_, j) => Array.from({ length: t }, (_, x) => toJsonFloat(values[j * t + x])));
}

async function computeCase(input: CaseInput): Promise<ReferenceCase> {
  const config: ObjectiveConfig = { ...DEFAULT_OBJECTIVE_CONFIG, objective: 'srpo', ...input.config };
  const members = input.sets.flatMap((s, i) => s.members.map((m) => ({ ...m, set: i })));
  const m = members.length;
  const t = Math.max(...members.map((x) => x.logpOld.length));
  const pad = (row: number[], value: number) => Array.from({ length: t }, (_, x) => Math.fround(x < row.length ? row[x] : value));
  const logpOld = members.map((x) => pad(x.logpOld, 0));
  const logpNew = members.map((x) => pad(x.logpNew, input.padNew ?? 0));
  const mask = members.map((x) => pad(x.mask, 0));
  const memberSet = members.map((x) => x.set);
  const advantage = input.sets.map((s) => Math.fround(s.advantage));
  const batch: PaddedSetBatch = {
    logpOld: tf.tensor2d(logpOld),
    mask: tf.tensor2d(mask),
    memberSet: tf.tensor1d(memberSet, 'int32'),
    advantage: tf.tensor1d(advantage),
    numSets: advantage.length,
  };
  const x = tf.tensor2d(logpNew);
  const out = objectiveLoss(x, batch, config);
  // The gradient's scope frees the output's other tensors.
  const grad = tf.grad((v: tf.Tensor) => objectiveLoss(v as tf.Tensor2D, batch, config).loss)(x);
  const flags = async (f: tf.Tensor) => Array.from(await f.data());
  const result: ReferenceCase = {
    name: input.name,
    why: input.why,
    config: {
      objective: config.objective,
      eventReduction: config.eventReduction,
      clipLow: config.clipLow,
      clipHigh: config.clipHigh,
      dualClip: config.dualClip,
      clipRatioC: config.clipRatioC,
    },
    memberSet,
    advantage,
    logpOld: logpOld.map((r) => r.map(toJsonFloat)),
    logpNew: logpNew.map((r) => r.map(toJsonFloat)),
    mask,
    expected: {
      loss: toJsonFloat((await out.loss.data())[0]),
      logRatio: Array.from(await out.logRatio.data(), toJsonFloat),
      setSize: await flags(out.unitSetSize),
      clippedLow: await flags(out.clippedLow),
      clippedHigh: await flags(out.clippedHigh),
      clippedDual: await flags(out.clippedDual),
      outOfRange: await flags(out.outOfRange),
      grad: rows(await grad.data(), m, t),
    },
  };
  disposeObjectiveOutput(out);
  tf.dispose([x, grad, batch.logpOld, batch.mask, batch.memberSet, batch.advantage]);
  return result;
}

/**
 * Every reference case, computed now by `objectiveLoss` on the `cpu` backend (switched to for the
 * call, the previous backend restored after).
 */
export async function referenceCases(): Promise<ReferenceCaseFile> {
  const previous = tf.getBackend();
  await tf.setBackend('cpu');
  try {
    const cases: ReferenceCase[] = [];
    for (const input of caseInputs()) cases.push(await computeCase(input));
    return {
      about:
        "SRPO objective reference cases: inputs and libs/srpo's objectiveLoss outputs (tfjs cpu backend, float32). " +
        'Non-finite floats are the strings "NaN", "Infinity", "-Infinity". Do not edit: regenerate. ' +
        'Checked against libs/srpo by libs/srpo/src/reference-cases.spec.ts; read by examples/python-trainer/test_srpo_reference.py.',
      regenerate: REGENERATE_REFERENCE_CASES,
      cases,
    };
  } finally {
    if (previous && previous !== 'cpu') await tf.setBackend(previous);
  }
}

/** The file's text as written: two-space JSON, each array of numbers or strings on one line, a final newline. */
export function referenceCasesText(file: ReferenceCaseFile): string {
  return `${printJson(file, '')}\n`;
}

function printJson(value: unknown, indent: string): string {
  if (Array.isArray(value)) {
    if (value.every((v) => v === null || typeof v !== 'object')) return `[${value.map((v) => JSON.stringify(v)).join(', ')}]`;
    const inner = `${indent}  `;
    return `[\n${value.map((v) => `${inner}${printJson(v, inner)}`).join(',\n')}\n${indent}]`;
  }
  if (value !== null && typeof value === 'object') {
    const inner = `${indent}  `;
    const entries = Object.entries(value).map(([k, v]) => `${inner}${JSON.stringify(k)}: ${printJson(v, inner)}`);
    return `{\n${entries.join(',\n')}\n${indent}}`;
  }
  return JSON.stringify(value);
}
