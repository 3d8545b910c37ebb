import * as tf from '@tensorflow/tfjs';
import { fusedKernelSet, srpoKernelAvailable, srpoMatMulRouted } from './srpo-kernels';

/**
 * Single native TensorFlow kernels for steps that tfjs would otherwise run as
 * several ops, used when the active backend is tfjs-node (`tensorflow`).
 *
 * tfjs dispatches every op separately and, on the native backend, each op on
 * a [2048, 128] activation costs ~50–100 µs whatever it computes; a training
 * step of this model is several hundred such ops. Fusing the hot spots
 * (column sums, sigmoid gradient, softmax cross-entropy, reshape-free matrix
 * products) into kernels TensorFlow already has removes much of that overhead.
 *
 * Every function has a composite fallback built from public tfjs ops, taken
 * on other backends (pure-JS `cpu`, WebGL, WebGPU) or when `composite` is true.
 * Both paths compute the same mathematical function; specs compare them.
 *
 * On `webgpu` the composite paths are shaped for tfjs-backend-webgpu's kernels
 * (see {@link webgpuActive}): its matmul shader has a vec4 path only when B is
 * not transposed, so `A·Bᵀ` transposes B first (a pass over B, which is a weight
 * or one attention operand, far smaller than the product), and row means use
 * the reduction kernel, since an `[N, D]·[D, 1]` product runs the scalar matmul
 * path with 1 of every 32 output columns used.
 *
 * Only the documented surface of tfjs-node's backend is used
 * (`executeSingleOutput` / `executeMultipleOutputs` and the binding's attribute
 * constants) and only ops whose attributes that binding can set.
 */

/** An attribute of a TensorFlow op as tfjs-node's binding takes it (fused-ops.ts builds them too). */
export interface TfeAttr {
  name: string;
  type: number;
  value: number | boolean | string;
}

export interface NativeBinding {
  TF_ATTR_TYPE: number;
  TF_ATTR_INT: number;
  TF_ATTR_FLOAT: number;
  TF_ATTR_STRING: number;
  TF_ATTR_BOOL: number;
  TF_FLOAT: number;
  TF_INT32: number;
}

export interface NativeBackend {
  binding: NativeBinding;
  executeSingleOutput(name: string, attrs: TfeAttr[], inputs: tf.Tensor[]): tf.Tensor;
  executeMultipleOutputs(name: string, attrs: TfeAttr[], inputs: tf.Tensor[], numOutputs: number): tf.Tensor[];
}

export interface NativeKernelOptions {
  /** false: always take the composite tfjs paths (same math, slower). Default true. */
  enabled?: boolean;
  /**
   * TensorFlow op for 2-D products. `MatMul` is faster here; `BatchMatMulV2` is what
   * tfjs itself uses (see the heap-corruption note in bench/learner/RESULTS.md). Default `MatMul`.
   */
  matMulOp?: 'MatMul' | 'BatchMatMulV2';
}

const options: Required<NativeKernelOptions> = { enabled: true, matMulOp: 'MatMul' };

export interface WebGpuKernelOptions {
  /** false: on `webgpu`, take the same composite forms as other backends (for A/B runs). Default true. */
  enabled?: boolean;
}

const webgpuOptions: Required<WebGpuKernelOptions> = { enabled: true };

/** Process-wide switch for the WebGPU-shaped composite paths; returns the settings now in force. */
export function configureWebGpuKernels(next: WebGpuKernelOptions): Readonly<Required<WebGpuKernelOptions>> {
  if (next.enabled !== undefined) webgpuOptions.enabled = next.enabled;
  return { ...webgpuOptions };
}

/** Process-wide switches for the native fast paths; returns the settings now in force. */
export function configureNativeKernels(next: NativeKernelOptions): Readonly<Required<NativeKernelOptions>> {
  if (next.enabled !== undefined) options.enabled = next.enabled;
  if (next.matMulOp !== undefined) options.matMulOp = next.matMulOp;
  return { ...options };
}

/**
 * The tfjs-node backend when it is the active one (and native kernels are enabled), else
 * undefined. For this library's kernel wrappers (here and fused-ops.ts); not exported from the package.
 */
export function native(): NativeBackend | undefined {
  if (!options.enabled || tf.getBackend() !== 'tensorflow') return undefined;
  const be = tf.backend() as unknown as Partial<NativeBackend>;
  if (typeof be.executeSingleOutput !== 'function' || typeof be.executeMultipleOutputs !== 'function' || !be.binding) return undefined;
  return be as NativeBackend;
}

/** True when the fused native kernels are in use. */
export function nativeKernelsActive(): boolean {
  return native() !== undefined;
}

/** True when the WebGPU-shaped composite paths are in use (active backend `webgpu`). */
export function webgpuActive(): boolean {
  return webgpuOptions.enabled && tf.getBackend() === 'webgpu';
}

/** `x` with its last two axes swapped. */
function transposeInner<T extends tf.Tensor>(x: T): T {
  const r = x.rank;
  const perm = Array.from({ length: r }, (_, i) => i);
  perm[r - 2] = r - 1;
  perm[r - 1] = r - 2;
  return tf.transpose(x, perm);
}

function floatT(b: NativeBinding, name = 'T'): TfeAttr {
  return { name, type: b.TF_ATTR_TYPE, value: b.TF_FLOAT };
}

/**
 * Sum over every axis but the last: `[..., C] → [C]` (bias gradients), `y_j = Σ_r x[r, j]`.
 * Native: the project's `SrpoColumnSum` (optimizer-kernels.h: columns split over the cores,
 * each summed in row order, so the result does not depend on the core count) where the addon
 * is loaded, else `BiasAddGrad`, several times faster than TensorFlow's generic column
 * reduction that `tf.sum(x, 0)` maps to (but ~3.5x PyTorch's time on these shapes, #21).
 */
export function sumToLastAxis(x: tf.Tensor, composite = false): tf.Tensor1D {
  const c = x.shape[x.rank - 1];
  const be = composite ? undefined : native();
  if (be && srpoKernelAvailable('SrpoColumnSum')) return be.executeSingleOutput('SrpoColumnSum', [], [x]) as tf.Tensor1D;
  const x2 = x.rank === 2 ? x : x.reshape([-1, c]);
  if (!be) return tf.sum<tf.Tensor1D>(x2, 0);
  const out = be.executeSingleOutput('BiasAddGrad', [floatT(be.binding), { name: 'data_format', type: be.binding.TF_ATTR_STRING, value: 'NHWC' }], [x2]);
  if (x2 !== x) x2.dispose();
  return out as tf.Tensor1D;
}

/**
 * `xᵀ` of a matrix, `[R, C] → [C, R]`, differentiable (its gradient is the transpose of dy).
 * Native: the project's `SrpoTranspose` (elementwise-kernels.h; a blocked copy), where
 * TensorFlow's `Transpose` took 130–140 µs for the tied output head's [64, 128] (#21). The bits
 * are tf.transpose's either way.
 */
export function transpose2d(x: tf.Tensor2D, composite = false): tf.Tensor2D {
  const raw = (t: tf.Tensor): tf.Tensor2D => {
    const be = composite ? undefined : native();
    if (be && srpoKernelAvailable('SrpoTranspose')) return be.executeSingleOutput('SrpoTranspose', [], [t]) as tf.Tensor2D;
    return tf.transpose(t) as tf.Tensor2D;
  };
  const fn = tf.customGrad((...args: (tf.Tensor | tf.GradSaveFunc)[]) => {
    const xi = args[0] as tf.Tensor2D;
    return { value: raw(xi), gradFunc: (dy: tf.Tensor) => raw(dy) };
  });
  return fn(x) as tf.Tensor2D;
}

/**
 * Rows `rows` of `x`: `[N, D] → [R, D]`, `y_r = x[rows_r]` (tf.gather on axis 0), differentiable
 * in `x`. Its gradient scatters `dy` back: `dx[rows_r] += dy_r`, zeros elsewhere. Native: the
 * project's `SrpoScatterRows` (elementwise-kernels.h; one pass, columns split over the cores),
 * where TensorFlow's `UnsortedSegmentSum`, which tf.gather's own gradient runs, took 180–580 µs
 * on the learner's shapes (#21). With distinct rows both give the same bits (each row copied).
 *
 * @param x float32 `[N, D]`
 * @param rows int32 `[R]` indices in `[0, N)`
 */
export function gatherRows(x: tf.Tensor2D, rows: tf.Tensor1D, composite = false): tf.Tensor2D {
  const n = x.shape[0];
  const fn = tf.customGrad((...args: (tf.Tensor | tf.GradSaveFunc)[]) => {
    const [xi, save] = args as [tf.Tensor2D, tf.GradSaveFunc];
    // rows belongs to the caller's scope, which may be gone when gradients run: the tape keeps what is saved.
    save([rows]);
    return {
      value: gatherRowsRaw(xi, rows, composite),
      gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => scatterRowsRaw(dy as tf.Tensor2D, saved[0] as tf.Tensor1D, n, composite),
    };
  });
  return fn(x);
}

/** True when rows are gathered and scattered by the project's kernels (`SrpoGatherRows`, `SrpoScatterRows`). */
export function nativeRowKernels(): boolean {
  return native() !== undefined && srpoKernelAvailable('SrpoGatherRows') && srpoKernelAvailable('SrpoScatterRows');
}

/**
 * `x[rows]` without a tape entry (for custom gradients): the project's `SrpoGatherRows` (a copy of
 * each row, the bits of tf.gather; TensorFlow's `GatherV2` took about 230 µs for the response
 * rows, #21) where available, else tf.gather.
 */
export function gatherRowsRaw(x: tf.Tensor2D, rows: tf.Tensor1D, composite = false): tf.Tensor2D {
  const be = composite ? undefined : native();
  if (be && srpoKernelAvailable('SrpoGatherRows')) return be.executeSingleOutput('SrpoGatherRows', [], [x, rows]) as tf.Tensor2D;
  return tf.gather<tf.Tensor2D>(x, rows);
}

/**
 * `[n, D]` zeros with `dy[r]` added to row `rows[r]`, in r order, without a tape entry: the
 * gradient of {@link gatherRowsRaw}. `SrpoScatterRows` where available, else unsortedSegmentSum.
 */
export function scatterRowsRaw(dy: tf.Tensor2D, rows: tf.Tensor1D, n: number, composite = false): tf.Tensor2D {
  const be = composite ? undefined : native();
  if (be && srpoKernelAvailable('SrpoScatterRows'))
    return be.executeSingleOutput('SrpoScatterRows', [{ name: 'n', type: be.binding.TF_ATTR_INT, value: n }], [dy, rows]) as tf.Tensor2D;
  return tf.unsortedSegmentSum<tf.Tensor2D>(dy, rows, n);
}

/**
 * 2-D matrix product `op(a) · op(b)`. Native: the project's `SrpoMatMul` where
 * `srpoMatMulRouted()` (gemm-kernels.h: packed blocks and a register-tiled micro-kernel; each
 * element one sequential chain of multiply-adds, so the bits do not depend on the core count or
 * the CPU), else one TensorFlow `MatMul` (tfjs's matMul wraps every call in three reshapes to a
 * batch of one and runs `BatchMatMulV2`, which is also slower than `MatMul` for 2-D operands here).
 * Not recorded on the gradient tape: use inside `tf.customGrad` functions only.
 */
export function matMul2d(a: tf.Tensor2D, b: tf.Tensor2D, transposeA = false, transposeB = false, composite = false): tf.Tensor2D {
  const be = composite ? undefined : native();
  if (!be) {
    if (transposeB && webgpuActive()) return tf.matMul(a, transposeInner(b), transposeA, false);
    return tf.matMul(a, b, transposeA, transposeB);
  }
  const bb = be.binding;
  const transposes = transposeAttrs(bb, transposeA, transposeB);
  if (srpoMatMulRouted()) return be.executeSingleOutput('SrpoMatMul', transposes, [a, b]) as tf.Tensor2D;
  if (options.matMulOp === 'BatchMatMulV2') {
    return be.executeSingleOutput(
      'BatchMatMulV2',
      [floatT(bb), { name: 'adj_x', type: bb.TF_ATTR_BOOL, value: transposeA }, { name: 'adj_y', type: bb.TF_ATTR_BOOL, value: transposeB }],
      [a, b],
    ) as tf.Tensor2D;
  }
  return be.executeSingleOutput('MatMul', [floatT(bb), ...transposes], [a, b]) as tf.Tensor2D;
}

/** The transpose attributes of the `SrpoMatMul` family and TensorFlow's `MatMul`. */
function transposeAttrs(bb: NativeBinding, transposeA: boolean, transposeB: boolean): TfeAttr[] {
  return [
    { name: 'transpose_a', type: bb.TF_ATTR_BOOL, value: transposeA },
    { name: 'transpose_b', type: bb.TF_ATTR_BOOL, value: transposeB },
  ];
}

/**
 * `op(a) · op(b) + bias`, the bias (`[N]` or `[1, N]`) added to every row: a linear layer's
 * forward. Native with `SrpoMatMul` routed: one `SrpoMatMulBias` (gemm-kernels.h adds the bias to
 * each finished tile, one float32 addition per element), bit for bit `matMul2d` and then `tf.add`,
 * without the pass over the product and the op between. Elsewhere exactly those two ops.
 * Not recorded on the gradient tape, like {@link matMul2d}.
 */
export function matMul2dBias(a: tf.Tensor2D, b: tf.Tensor2D, bias: tf.Tensor, transposeA = false, transposeB = false, composite = false): tf.Tensor2D {
  const be = composite ? undefined : native();
  if (be && srpoMatMulRouted() && srpoKernelAvailable('SrpoMatMulBias')) {
    return be.executeSingleOutput('SrpoMatMulBias', transposeAttrs(be.binding, transposeA, transposeB), [a, b, bias]) as tf.Tensor2D;
  }
  return tf.add(matMul2d(a, b, transposeA, transposeB, composite), bias);
}

/**
 * `h + (x · W + b)`: a residual block's output projection, the bias (`[N]` or `[1, N]`) added to
 * every row and then the residual `h` `[M, N]`. Native with `SrpoMatMul` routed: one
 * `SrpoMatMulBiasResidual`, which adds both to each finished tile, one rounding after the other,
 * bit for bit `SrpoAddResidualBias(h, matMul2d(x, W), b)` (`x · Wᵀ` with `transposeW`, W stored `[N, K]`). Elsewhere `undefined`: the caller
 * takes its own path (libs/policy's transformer-ops.ts, residualLinear). Not recorded on the gradient tape.
 */
export function matMul2dBiasResidual(x: tf.Tensor2D, w: tf.Tensor2D, bias: tf.Tensor, residual: tf.Tensor2D, transposeW = false): tf.Tensor2D | undefined {
  const be = native();
  if (!be || !srpoMatMulRouted() || !srpoKernelAvailable('SrpoMatMulBiasResidual')) return undefined;
  return be.executeSingleOutput('SrpoMatMulBiasResidual', transposeAttrs(be.binding, false, transposeW), [x, w, bias, residual]) as tf.Tensor2D;
}

/**
 * A weight gradient and its bias gradient together: `op(a) · b` and the column sums of b
 * (`Σ_r b[r, j]`, {@link sumToLastAxis}), for `Xᵀ · dY` and `Σ_rows dY`. Native with `SrpoMatMul`
 * routed: one `SrpoMatMulColumnSum`, which sums dY's columns while it packs them for the product,
 * in `SrpoColumnSum`'s order (the same bits as the two ops, one pass over dY fewer). Elsewhere
 * exactly {@link matMul2d} and {@link sumToLastAxis}. Not recorded on the gradient tape.
 *
 * @param b `[K, N]` as stored (no transpose)
 * @returns the product `[M, N]` and the column sums `[N]`
 */
export function matMul2dColumnSum(a: tf.Tensor2D, b: tf.Tensor2D, transposeA = false, composite = false): [tf.Tensor2D, tf.Tensor1D] {
  const be = composite ? undefined : native();
  if (be && srpoMatMulRouted() && srpoKernelAvailable('SrpoMatMulColumnSum')) {
    const [product, sums] = be.executeMultipleOutputs('SrpoMatMulColumnSum', transposeAttrs(be.binding, transposeA, false), [a, b], 2);
    return [product as tf.Tensor2D, sums as tf.Tensor1D];
  }
  return [matMul2d(a, b, transposeA, false, composite), sumToLastAxis(b, composite)];
}

/**
 * Batched matrix product over leading axes of equal size, `[..., M, K] · [..., K, N]`.
 * Native: one `BatchMatMulV2` without tfjs's reshapes to rank 3. Tape-free like {@link matMul2d}.
 */
export function batchMatMul<T extends tf.Tensor>(a: T, b: T, adjA = false, adjB = false, composite = false): T {
  const be = composite ? undefined : native();
  if (!be) {
    if (adjB && webgpuActive()) return tf.matMul(a, transposeInner(b), adjA, false) as unknown as T;
    return tf.matMul(a, b, adjA, adjB) as unknown as T;
  }
  const bb = be.binding;
  return be.executeSingleOutput(
    'BatchMatMulV2',
    [floatT(bb), { name: 'adj_x', type: bb.TF_ATTR_BOOL, value: adjA }, { name: 'adj_y', type: bb.TF_ATTR_BOOL, value: adjB }],
    [a, b],
  ) as T;
}

/**
 * Row means of `[N, D]` as `[N, 1]`, given `meanCol` (`[D, 1]` filled with 1/D).
 * Native and the other composite backends: one matrix–vector product, which
 * TensorFlow runs several times faster than its `Mean`; `webgpu`: its reduction kernel.
 * Tape-free like {@link matMul2d}.
 */
export function rowMean(x: tf.Tensor2D, meanCol: tf.Tensor2D, composite = false): tf.Tensor2D {
  if (!composite && native() === undefined && webgpuActive()) return tf.mean<tf.Tensor2D>(x, 1, true);
  return matMul2d(x, meanCol, false, false, composite);
}

/**
 * True when the fused kernels compute on this backend: the name an update's backend is
 * recorded with then says so (`tensorflow+srpo-kernels.<version>`, and `+srpo-matmul` when the
 * products run `SrpoMatMul`), because they round differently from the composite forms and
 * TensorFlow's `MatMul`, and audit and replay must tell other kernels from other inputs.
 * `backend` is the backend info of `initTfBackend`.
 */
export function backendLabel(backend: { name: string }): string {
  if (backend.name !== 'tensorflow' || !options.enabled) return backend.name;
  const version = fusedKernelSet();
  if (version === undefined) return backend.name;
  return `tensorflow+srpo-kernels.${version}${srpoMatMulRouted() ? '+srpo-matmul' : ''}`;
}

/** `dy · y · (1 − y)` where y = sigmoid(x): the sigmoid gradient from its output. Native: `SigmoidGrad`. */
export function sigmoidGrad(y: tf.Tensor, dy: tf.Tensor, composite = false): tf.Tensor {
  const be = composite ? undefined : native();
  if (!be) return tf.tidy(() => tf.mul(dy, tf.mul(y, tf.sub(1, y))));
  return be.executeSingleOutput('SigmoidGrad', [floatT(be.binding)], [y, dy]);
}

/**
 * Log-probability of each row's target under softmax(logits), and the
 * gradient of that log-prob with respect to the logits (`onehot − softmax`).
 * Native: one `SparseSoftmaxCrossEntropyWithLogits`.
 *
 * @param logits `[N, V]`
 * @param targets int32 `[N]`
 * @returns `logp` `[N]` and `dlogp` `[N, V]`
 */
export function targetLogProbs(logits: tf.Tensor2D, targets: tf.Tensor1D, composite = false): { logp: tf.Tensor1D; dlogp: tf.Tensor2D } {
  const be = composite ? undefined : native();
  const v = logits.shape[1];
  if (!be) {
    return tf.tidy(() => {
      const lsm = tf.logSoftmax(logits);
      const onehot = tf.oneHot(targets, v, 1, 0, 'float32');
      return { logp: tf.sum<tf.Tensor1D>(tf.mul(lsm, onehot), -1), dlogp: tf.sub<tf.Tensor2D>(onehot, tf.exp(lsm)) };
    });
  }
  const b = be.binding;
  return tf.tidy(() => {
    const [loss, backprop] = be.executeMultipleOutputs(
      'SparseSoftmaxCrossEntropyWithLogits',
      [floatT(b), { name: 'Tlabels', type: b.TF_ATTR_TYPE, value: b.TF_INT32 }],
      [logits, targets],
      2,
    );
    return { logp: tf.neg(loss) as tf.Tensor1D, dlogp: tf.neg(backprop) as tf.Tensor2D };
  });
}
