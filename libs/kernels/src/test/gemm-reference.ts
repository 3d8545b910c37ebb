import * as tf from '@tensorflow/tfjs';

// Helpers of the SrpoMatMul family's specs (gemm-kernel.spec.ts, gemm-epilogue.spec.ts): the ops
// called directly, and the float32 FMA chains written out in JavaScript that the kernels' bits are
// checked against (the column-sum cascade is in fixtures.ts, shared with optimizer-kernels.spec.ts).

export interface Executor {
  binding: { TF_ATTR_BOOL: number };
  executeSingleOutput(name: string, attrs: unknown[], inputs: tf.Tensor[]): tf.Tensor;
}
export const executor = (): Executor => tf.backend() as unknown as Executor;

/** The family's transpose attributes. */
function transposeAttrs(transposeA: boolean, transposeB: boolean): unknown[] {
  const bool = executor().binding.TF_ATTR_BOOL;
  return [
    { name: 'transpose_a', type: bool, value: transposeA },
    { name: 'transpose_b', type: bool, value: transposeB },
  ];
}

/** SrpoMatMul(a, b) called directly, as TensorFlow's MatMul would be. */
export function srpoMatMul(a: tf.Tensor, b: tf.Tensor, transposeA = false, transposeB = false): tf.Tensor {
  return executor().executeSingleOutput('SrpoMatMul', transposeAttrs(transposeA, transposeB), [a, b]);
}

/** Row-major `[rows, cols]` values stored transposed (`[cols, rows]`). */
export function transposed(x: Float32Array, rows: number, cols: number): Float32Array {
  const t = new Float32Array(x.length);
  for (let i = 0; i < rows; i++) for (let j = 0; j < cols; j++) t[j * rows + i] = x[i * cols + j];
  return t;
}

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);
/** The float32 next to `x` (a float32 value) towards +∞ (up) or −∞; finite, nonzero x only. */
export function nextFloat32(x: number, up: boolean): number {
  f32[0] = x;
  u32[0] += x > 0 === up ? 1 : -1;
  return f32[0];
}

/**
 * fma(a, b, c) in float32, rounded once (a, b, c float32 values), written out here from IEEE 754:
 * a·b is exact in float64 (48 significant bits); s = a·b + c rounds, and TwoSum gives its error
 * e exactly. fround(s) is then the correctly rounded result, except where s lies exactly halfway
 * between two float32 values and e ≠ 0, when e decides the side.
 */
export function fma32(a: number, b: number, c: number): number {
  const p = a * b;
  const s = p + c;
  const bb = s - p;
  const e = p - (s - bb) + (c - bb);
  const r = Math.fround(s);
  if (e === 0 || r === s || r === 0 || !Number.isFinite(r)) return r;
  const other = nextFloat32(r, s > r);
  if (s !== (r + other) / 2) return r;
  return e > 0 === other > r ? other : r;
}

/** One of the SrpoMatMul family called directly, with its outputs. */
export function srpoMatMulOp(
  op: 'SrpoMatMulBias' | 'SrpoMatMulBiasResidual' | 'SrpoMatMulColumnSum',
  inputs: tf.Tensor[],
  transposeA = false,
  transposeB = false,
): tf.Tensor[] {
  const be = tf.backend() as unknown as { executeMultipleOutputs(name: string, attrs: unknown[], inputs: tf.Tensor[], n: number): tf.Tensor[] };
  return be.executeMultipleOutputs(op, transposeAttrs(transposeA, transposeB), inputs, op === 'SrpoMatMulColumnSum' ? 2 : 1);
}

/** Each element of a·b ([m, k]·[k, n]) as one float32 FMA chain in k order. */
export function fmaChains(a: Float32Array, b: Float32Array, m: number, n: number, k: number): Float32Array {
  const c = new Float32Array(m * n);
  for (let i = 0; i < m; i++) {
    for (let j = 0; j < n; j++) {
      let acc = 0;
      for (let p = 0; p < k; p++) acc = fma32(a[i * k + p], b[p * n + j], acc);
      c[i * n + j] = acc;
    }
  }
  return c;
}

/**
 * SrpoMatMul's K segments (kernel set 11), as its contract states them (gemm-ops.h): a product
 * with k >= 2 · 1024 and m · n <= 2^18 is computed over K segments of 1024 (the last one what
 * remains), each element one FMA chain per segment, and the segments' results added in order.
 */
export const K_SEGMENT = 1024;
export const segmented = (m: number, n: number, k: number): boolean => k >= 2 * K_SEGMENT && m * n <= 2 ** 18;

/**
 * Element (i, j) of a·b ([m, k]·[k, n], row-major) as FMA chains over K segments of `segment`,
 * added in order: ((c₀ + c₁) + c₂)…, each sum rounded to float32. `segment` = k is one chain.
 */
export function segmentedElement(a: Float32Array, b: Float32Array, n: number, k: number, i: number, j: number, segment = K_SEGMENT): number {
  let sum = 0;
  for (let p0 = 0; p0 < k; p0 += segment) {
    let acc = 0;
    for (let p = p0; p < Math.min(k, p0 + segment); p++) acc = fma32(a[i * k + p], b[p * n + j], acc);
    sum = p0 === 0 ? acc : Math.fround(sum + acc);
  }
  return sum;
}

/** Every element of a·b ([m, k]·[k, n]) as {@link segmentedElement}. */
export function segmentedChains(a: Float32Array, b: Float32Array, m: number, n: number, k: number): Float32Array {
  const c = new Float32Array(m * n);
  for (let i = 0; i < m; i++) for (let j = 0; j < n; j++) c[i * n + j] = segmentedElement(a, b, n, k, i, j);
  return c;
}

export const asBits = (x: Float32Array): Uint32Array => new Uint32Array(x.buffer, x.byteOffset, x.length);
