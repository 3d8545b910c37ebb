import * as tf from '@tensorflow/tfjs';
import { type AdamStepScalars, adamUpdateFused } from './fused-ops';
import { sumToLastAxis } from './native-ops';
import { configureSrpoKernels, loadSrpoKernels } from './srpo-kernels';
import { describeNative } from './test/describe-native';
import { bits, cascadeColumnSums, composite, firstMismatch, nativeBackend, seededValues } from './test/fixtures';

/**
 * SrpoAdam (the whole Adam step on the lists of gradients and weights) and SrpoColumnSum
 * (libs/kernels/native/optimizer-kernels.h) against float64 evaluations of their formulas written
 * here, against their documented summation orders reproduced here bit for bit (orders fixed by
 * the data's shape, not by the thread count), and against the composite path of sumToLastAxis
 * (the fused kernels switched off). AdamOptimizer.apply against its composite path is libs/policy's
 * native-kernels.spec.ts.
 *
 * Skips where the addon is not built, unless SRPO_REQUIRE_NATIVE_KERNELS=1 (CI).
 */
const FLOAT32_OVERFLOW = 2 ** 128 - 2 ** 103; // the least value Math.fround rounds to +inf

interface Adam64 {
  m: Float64Array;
  v: Float64Array;
  w: Float64Array;
  norm: number;
  /** Per element, the tolerated error: float32 rounding of each output, from its terms' magnitudes. */
  tolM: Float64Array;
  tolV: Float64Array;
  tolW: Float64Array;
}

/**
 * Adam's whole step in float64 on the concatenations g, w: norm = √Σg², coef = min(1, max/(norm +
 * 1e-6)) with clipping, m' = β1·m + g·coef·(1−β1), v' = β2·v + g²·coef²·(1−β2), delta =
 * m'·step/(√v' + ε̂), w' = w − delta − w·decay. A square or a sum of squares beyond float32's
 * range counts as +inf, as in float32 arithmetic (the kernel's contract is the float32
 * composite's, overflow included). float32 has 6e-8 relative precision: coef carries ~3
 * roundings, each output a few more.
 */
function adam64(g: Float32Array, m: Float32Array, v: Float32Array, w: Float32Array, s: AdamStepScalars): Adam64 {
  const n = g.length;
  const sq = (x: number): number => (Math.abs(x * x) >= FLOAT32_OVERFLOW ? Infinity : x * x);
  let sum = 0;
  for (let i = 0; i < n; i++) sum += sq(g[i]);
  const norm = sum >= FLOAT32_OVERFLOW ? Infinity : Math.sqrt(sum);
  const clip = s.maxGradNorm > 0 && Number.isFinite(s.maxGradNorm);
  const coef = clip ? (Number.isNaN(norm) ? NaN : Math.min(1, s.maxGradNorm / (norm + 1e-6))) : 1;
  const k1 = coef * (1 - s.beta1);
  const k2 = coef * coef * (1 - s.beta2);
  const decay = Math.fround(s.decay); // the kernel's float32 p, as the composite's scalar operand
  const out: Adam64 = {
    m: new Float64Array(n),
    v: new Float64Array(n),
    w: new Float64Array(n),
    norm,
    tolM: new Float64Array(n),
    tolV: new Float64Array(n),
    tolW: new Float64Array(n),
  };
  for (let i = 0; i < n; i++) {
    const mi = s.beta1 * m[i] + g[i] * k1;
    const vi = s.beta2 * v[i] + sq(g[i]) * k2;
    const den = Math.sqrt(vi) + s.epsHat;
    const delta = (mi * s.stepSize) / den;
    out.m[i] = mi;
    out.v[i] = vi;
    out.w[i] = decay !== 0 ? w[i] - delta - w[i] * decay : w[i] - delta;
    const scaleM = Math.abs(s.beta1 * m[i]) + Math.abs(g[i] * k1);
    out.tolM[i] = 1e-6 * scaleM;
    out.tolV[i] = 1.5e-6 * vi;
    out.tolW[i] = (3e-6 * scaleM * s.stepSize) / den + 2e-7 * (Math.abs(w[i]) + Math.abs(delta) + Math.abs(w[i] * decay));
  }
  return out;
}

/**
 * The norm in the kernel's documented order, bit for bit, on the concatenation g of the
 * gradients (blocks may span tensors): blocks of 4096, in each 8 double lanes (element i into
 * lane (i − block start) mod 8, in order; a float's square is exact in double), the lanes added
 * as ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)); the block partials into 4 lanes (block b
 * into lane b mod 4), added as (l0 + l2) + (l1 + l3); then float32 √ of the sum rounded to
 * float32 (Math.fround rounds exactly as a float32 conversion and square root do). The double
 * partials carry ~1e-13 relative error, far below float32's half ulp, so this checks the final
 * roundings to the bit; the fixed blocks are what keep the order itself fixed.
 */
function normInKernelOrder(g: Float32Array): number {
  const q = [0, 0, 0, 0];
  for (let lo = 0, b = 0; lo < g.length; lo += 4096, b++) {
    const hi = Math.min(g.length, lo + 4096);
    const lane = [0, 0, 0, 0, 0, 0, 0, 0];
    let i = lo;
    for (; i + 8 <= hi; i += 8) for (let l = 0; l < 8; l++) lane[l] += g[i + l] * g[i + l];
    for (let l = 0; i < hi; i++, l++) lane[l] += g[i] * g[i];
    q[b & 3] += lane[0] + lane[4] + (lane[2] + lane[6]) + (lane[1] + lane[5] + (lane[3] + lane[7]));
  }
  return Math.fround(Math.sqrt(Math.fround(q[0] + q[2] + (q[1] + q[3]))));
}

type Kind = 'nan' | '+inf' | '-inf' | 'finite';
const kind = (x: number): Kind => (Number.isNaN(x) ? 'nan' : x === Infinity ? '+inf' : x === -Infinity ? '-inf' : 'finite');

/**
 * Index of the first element of `got` that is not within `rel`·scale of `want` (non-finite
 * values must match in kind), or -1. jest's matchers are slow on 10^5 elements.
 */
function firstOff(got: Float32Array, want: Float64Array, scale: Float64Array, rel: number): number {
  if (got.length !== want.length) return Math.min(got.length, want.length);
  for (let i = 0; i < got.length; i++) {
    const kg = kind(got[i]);
    if (kg !== kind(want[i])) return i;
    if (kg === 'finite' && !(Math.abs(got[i] - want[i]) <= rel * scale[i] + 1e-37)) return i;
  }
  return -1;
}

const sizeOf = (shape: number[]): number => shape.reduce((p, d) => p * d, 1);

function concatenate(parts: Float32Array[]): Float32Array {
  const out = new Float32Array(parts.reduce((p, x) => p + x.length, 0));
  let off = 0;
  for (const x of parts) {
    out.set(x, off);
    off += x.length;
  }
  return out;
}

/** One step's inputs: gradients and weights per tensor of `shapes`, and the flat moments. */
interface AdamCase {
  shapes: number[][];
  g: Float32Array[];
  w: Float32Array[];
  /** m in [−0.1, 0.1), v in [0, 0.01) (a second moment is never negative). */
  m: Float32Array;
  v: Float32Array;
}

function adamCase(shapes: number[][], seed: number, gScale = 0.05): AdamCase {
  const total = shapes.reduce((p, s) => p + sizeOf(s), 0);
  return {
    shapes,
    g: shapes.map((s, i) => seededValues(sizeOf(s), seed + 10 * i, gScale)),
    w: shapes.map((s, i) => seededValues(sizeOf(s), seed + 10 * i + 1, 0.5)),
    m: seededValues(total, seed + 7, 0.1),
    v: seededValues(total, seed + 8, 0.005).map((x) => x + 0.005),
  };
}

const BASE: Omit<AdamStepScalars, 'maxGradNorm' | 'decay'> = { beta1: 0.9, beta2: 0.999, stepSize: 3e-3, epsHat: 5e-8 };

interface FusedAdam {
  m: Float32Array;
  v: Float32Array;
  /** The new weights, concatenated. */
  w: Float32Array;
  norm: number;
  /** m', v', norm, then each new weight. */
  bits: Uint32Array[];
}

/** Runs the kernel on a case; checks the output shapes and that nothing leaks. */
async function runFused(c: AdamCase, s: AdamStepScalars): Promise<FusedAdam> {
  const before = tf.memory().numTensors;
  const g = c.g.map((x, i) => tf.tensor(x, c.shapes[i]));
  const w = c.w.map((x, i) => tf.tensor(x, c.shapes[i]));
  const m = tf.tensor1d(c.m);
  const v = tf.tensor1d(c.v);
  const out = adamUpdateFused(g, w, m, v, s);
  expect(out).toBeDefined();
  const { m: mt, v: vt, norm, weights } = out!;
  expect([mt.shape, vt.shape, norm.shape, ...weights.map((x) => x.shape)]).toEqual([[c.m.length], [c.m.length], [], ...c.shapes]);
  const data = async (t: tf.Tensor): Promise<Float32Array> => Float32Array.from(await t.data<'float32'>());
  const result: FusedAdam = {
    m: await data(mt),
    v: await data(vt),
    w: concatenate(await Promise.all(weights.map(data))),
    norm: (await norm.data<'float32'>())[0],
    bits: await Promise.all([mt, vt, norm, ...weights].map(bits)),
  };
  tf.dispose([mt, vt, norm, ...weights, ...g, ...w, m, v]);
  expect(tf.memory().numTensors).toBe(before);
  return result;
}

/** Checks one fused step against adam64 within float32 rounding, and its norm against the kernel's order to the bit. */
async function expectAdam(c: AdamCase, s: AdamStepScalars, label: string): Promise<FusedAdam> {
  const got = await runFused(c, s);
  const g = concatenate(c.g);
  const want = adam64(g, c.m, c.v, concatenate(c.w), s);
  expect({ label, norm: kind(got.norm) }).toEqual({ label, norm: kind(want.norm) });
  if (Number.isFinite(want.norm)) expect(Math.abs(got.norm - want.norm)).toBeLessThanOrEqual(2e-7 * want.norm);
  expect({ label, norm: Object.is(got.norm, normInKernelOrder(g)) || (Number.isNaN(got.norm) && Number.isNaN(normInKernelOrder(g))) }).toEqual({
    label,
    norm: true,
  });
  expect({ label, m: firstOff(got.m, want.m, want.tolM, 1) }).toEqual({ label, m: -1 });
  expect({ label, v: firstOff(got.v, want.v, want.tolV, 1) }).toEqual({ label, v: -1 });
  expect({ label, w: firstOff(got.w, want.w, want.tolW, 1) }).toEqual({ label, w: -1 });
  return got;
}

/** y[j] = Σ_r x[r, j] in float64, and Σ_r |x[r, j]| (the scale of the float32 error). */
function columnSums64(x: Float32Array, cols: number): { y: Float64Array; scale: Float64Array } {
  const y = new Float64Array(cols);
  const scale = new Float64Array(cols);
  for (let i = 0; i < x.length; i++) {
    y[i % cols] += x[i];
    scale[i % cols] += Math.abs(x[i]);
  }
  return { y, scale };
}

interface Executor {
  binding: { TF_ATTR_INT: number };
  executeMultipleOutputs(op: string, attrs: Array<{ name: string; type: number; value: number }>, inputs: tf.Tensor[], n: number): tf.Tensor[];
  executeSingleOutput(op: string, attrs: never[], inputs: tf.Tensor[]): tf.Tensor;
}
const executor = (): Executor => tf.backend() as unknown as Executor;

describeNative(['SrpoAdam'], 'SrpoAdam (the whole Adam step in one op)', () => {
  beforeAll(nativeBackend);

  /** Tensors of odd sizes: 1 element, a block ± 1, blocks spanning tensors, several ranks. */
  const MIXED = [[1], [7, 3], [4097], [13, 331], [2, 2, 5], [4095], [1]];
  /** More than 9 blocks and 32,768 elements (the inline limit, kernel-support.h): the pool splits both passes. */
  const THREADED = [[1000, 1041], [1], [128], [4096], [9000]];
  const LAYOUTS = [[[1]], [[7]], [[4096]], [[3], [0], [4]], MIXED, THREADED];

  it('is registered once the addon is loaded (required in CI), and off with the switch or without weights', () => {
    expect(loadSrpoKernels().ops).toEqual(expect.arrayContaining(['SrpoAdam', 'SrpoColumnSum']));
    const z = tf.zeros<tf.Rank.R1>([3]);
    const s = { ...BASE, maxGradNorm: 1, decay: 0 };
    expect(adamUpdateFused([], [], z, z, s)).toBeUndefined();
    configureSrpoKernels({ enabled: false });
    try {
      expect(adamUpdateFused([z], [z], z, z, s)).toBeUndefined();
    } finally {
      configureSrpoKernels({ enabled: true });
    }
    z.dispose();
  });

  it('matches float64 for tensors of odd sizes, with clipping binding, not binding and off, with and without decay', async () => {
    for (const [k, shapes] of LAYOUTS.entries()) {
      const c = adamCase(shapes, 100 + 37 * k);
      // √total·0.05/√3 ≈ the norm: 0.005 clips every layout; 1e6 never clips; 0 and ∞ switch it off.
      for (const maxGradNorm of [0.005, 1e6, 0, Infinity]) {
        for (const decay of [0, 1e-3]) await expectAdam(c, { ...BASE, maxGradNorm, decay }, `${JSON.stringify(shapes)} max=${maxGradNorm} decay=${decay}`);
      }
    }
  });

  it('gives total = 0 empty outputs and norm 0', async () => {
    for (const shapes of [[[0]], [[0], [2, 0]]]) {
      const got = await runFused(adamCase(shapes, 5), { ...BASE, maxGradNorm: 1, decay: 1e-3 });
      expect([got.m.length, got.v.length, got.w.length, got.norm]).toEqual([0, 0, 0, 0]);
    }
  });

  it('gives the same bits when run twice, on the reference model size', async () => {
    const shapes = [[512, 256], [256], [256, 768], [768], [384, 256], [1, 256], [3, 1023], [4097]];
    const c = adamCase(shapes, 7, 0.01);
    for (const maxGradNorm of [0.5, 0]) {
      const s = { ...BASE, maxGradNorm, decay: 1e-3 };
      const a = await expectAdam(c, s, `reference max=${maxGradNorm}`);
      const b = await runFused(c, s);
      a.bits.forEach((x, i) => expect({ output: i, at: firstMismatch(x, b.bits[i]) }).toEqual({ output: i, at: -1 }));
    }
  });

  it('keeps the composite behaviour for non-finite gradients and overflowing squares', async () => {
    // Flat indices into MIXED: 0 is the 1-element tensor, 22 starts [4097], 4120 is in [13, 331].
    const cases: Array<[string, (g: Float32Array) => void]> = [
      ['NaN', (g) => (g[3] = NaN)],
      ['NaN in a 1-element tensor', (g) => (g[0] = NaN)],
      ['+inf', (g) => (g[22] = Infinity)],
      ['-inf', (g) => (g[4120] = -Infinity)],
      ['g² beyond float32', (g) => (g[3] = -1e20)],
      ['Σg² beyond float32', (g) => [10, 20, 30, 40, 50, 4500].forEach((i) => (g[i] = 1e19))],
    ];
    for (const [label, poison] of cases) {
      const c = adamCase(MIXED, 30);
      // Poison the concatenation, then cut it back into the tensors.
      const flat = concatenate(c.g);
      poison(flat);
      let off = 0;
      c.g = c.g.map((x) => flat.slice(off, (off += x.length)));
      for (const maxGradNorm of [1, 0]) {
        const s = { ...BASE, maxGradNorm, decay: 1e-3 };
        const got = await expectAdam(c, s, `${label} max=${maxGradNorm}`);
        // Spelled out: with clipping a NaN norm poisons everything; an infinite one zeroes the
        // gradient terms (coef = 0), leaving NaN only where g or g² is infinite (inf·0).
        if (maxGradNorm > 0 && label.startsWith('NaN')) expect([got.m, got.v, got.w].every((a) => a.every(Number.isNaN))).toBe(true);
        if (maxGradNorm > 0 && label.startsWith('Σg²')) {
          expect(got.norm).toBe(Infinity);
          expect(got.m.every((x, i) => x === Math.fround(Math.fround(BASE.beta1) * c.m[i]))).toBe(true);
        }
      }
    }
  });

  it('refuses a wrong N, mismatched shapes and sizes, a wrong p and non-float32 inputs, naming the op', () => {
    tf.tidy(() => {
      const run = (n: number, inputs: tf.Tensor[]): tf.Tensor[] =>
        executor().executeMultipleOutputs('SrpoAdam', [{ name: 'N', type: executor().binding.TF_ATTR_INT, value: n }], inputs, n + 3);
      const a = tf.zeros([2, 3]);
      const b = tf.zeros([4]);
      const flat = tf.zeros([10]);
      const p = tf.zeros([8]);
      expect(() => run(2, [a, b, a, b, flat, flat, p])).not.toThrow();
      // A list length other than N is refused by TensorFlow itself, before the kernel (whose own
      // check of 2·N + 3 inputs is a guard), in words that depend on whether it has a kernel for
      // that N cached ("expected 7 inputs, got 6") or not ("... do not match 6 inputs specified;
      // Op<name=SrpoAdam ...").
      expect(() => run(2, [a, b, a, flat, flat, p])).toThrow(/expected 7 inputs, got 6|do not match 6 inputs specified/);
      expect(() => run(1, [a, b, a, b, flat, flat, p])).toThrow(/expected 5 inputs, got 7|do not match 7 inputs specified/);
      expect(() => run(0, [flat, flat, p])).toThrow(/attr 'N' of 0 must be at least minimum 1.*SrpoAdam/s);
      expect(() => run(2, [a, b, tf.zeros([3, 2]), b, flat, flat, p])).toThrow(/SrpoAdam: grads\[0\] \[2, 3\] must have the shape of weights\[0\] \[3, 2\]/);
      expect(() => run(2, [a, b, a, b, tf.zeros([9]), flat, p])).toThrow(/SrpoAdam: m and v must be \[total\], total = 10/);
      expect(() => run(2, [a, b, a, b, flat, tf.zeros([2, 5]), p])).toThrow(/SrpoAdam: m and v must be \[total\]/);
      expect(() => run(2, [a, b, a, b, flat, flat, tf.zeros([7])])).toThrow(/SrpoAdam: p must be \[8\]/);
      expect(() => run(2, [a, tf.zeros([4], 'int32'), a, b, flat, flat, p])).toThrow(/SrpoAdam.*float/);
    });
  });
});

describeNative(['SrpoColumnSum'], 'SrpoColumnSum (sumToLastAxis on the native backend)', () => {
  beforeAll(nativeBackend);

  const shapes: number[][] = [[1, 1], [3, 5], [7, 1], [1000, 17], [130, 33], [65, 16], [2048, 128], [32, 8192], [5, 3, 7], [4096, 300], [9], [0, 6], [6, 0]];

  it('matches float64 and the documented order to the bit, for ragged and multi-threaded shapes', async () => {
    for (const shape of shapes) {
      const size = shape.reduce((p, d) => p * d, 1);
      const cols = shape[shape.length - 1];
      const xv = seededValues(size, 50 + size, 2);
      const y = sumToLastAxis(tf.tensor(xv, shape));
      expect(y.shape).toEqual([cols]);
      const got = await y.data<'float32'>();
      const want = columnSums64(xv, cols);
      // Two-level sums: about (64 + rows/64) roundings at most, each 6e-8 of the magnitudes.
      expect({ shape, off: firstOff(got, want.y, want.scale, 1e-5) }).toEqual({ shape, off: -1 });
      expect({ shape, at: firstMismatch(await bits(y), new Uint32Array(cascadeColumnSums(xv, cols === 0 ? 0 : xv.length / cols, cols).buffer)) }).toEqual({
        shape,
        at: -1,
      });
      // Twice, the same bits.
      expect({ shape, at: firstMismatch(await bits(y), await bits(sumToLastAxis(tf.tensor(xv, shape)))) }).toEqual({ shape, at: -1 });
    }
  });

  it('matches the composite column sum and BiasAddGrad (the kernels off)', async () => {
    for (const shape of [
      [2048, 512],
      [2048, 384],
      [4, 8, 96],
    ]) {
      const x = tf.tensor(
        seededValues(
          shape.reduce((p, d) => p * d, 1),
          9,
          1,
        ),
        shape,
      );
      const fusedSum = await sumToLastAxis(x).data<'float32'>();
      const scale = columnSums64(await x.data<'float32'>(), shape[shape.length - 1]).scale;
      const compositeSum = await sumToLastAxis(x, true).data<'float32'>();
      const biasAddGrad = await composite(() => sumToLastAxis(x).data<'float32'>());
      for (const other of [compositeSum, biasAddGrad]) {
        expect(firstOff(fusedSum, Float64Array.from(other), scale, 1e-5)).toBe(-1);
      }
    }
  });

  it('propagates NaN and infinities as a float32 sum does', async () => {
    const [rows, cols] = [200, 40];
    const xv = seededValues(rows * cols, 3, 1);
    xv[5 * cols + 0] = NaN;
    xv[7 * cols + 1] = Infinity;
    xv[150 * cols + 1] = -Infinity;
    xv[199 * cols + 2] = Infinity;
    xv[0 * cols + 3] = -Infinity;
    xv[1 * cols + 4] = 3e38;
    xv[100 * cols + 4] = 3e38;
    const got = await sumToLastAxis(tf.tensor2d(xv, [rows, cols])).data<'float32'>();
    expect(Array.from(got.slice(0, 5))).toEqual([NaN, NaN, Infinity, -Infinity, Infinity]);
    expect(got.slice(5).every(Number.isFinite)).toBe(true);
  });

  it('refuses a scalar, naming the op', () => {
    expect(() => executor().executeSingleOutput('SrpoColumnSum', [], [tf.scalar(1)])).toThrow(/SrpoColumnSum.*rank/);
  });
});
