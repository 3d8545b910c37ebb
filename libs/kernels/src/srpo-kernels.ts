import { existsSync } from 'node:fs';
import * as path from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { currentBackend, errorMessage, Logger } from '@srpo/core';

/**
 * The project's own TensorFlow kernels (libs/kernels/native/srpo-kernels.cc): fused CPU kernels
 * for the learner's hot spots, registered into the process's libtensorflow by a Node addon and
 * run by tfjs-node's backend like TensorFlow's own ops.
 *
 * `npm run build` (and so `npm run setup`) builds the addon (scripts/build-native-kernels.sh). Where it is not built, or
 * cannot load (no AVX2/FMA, another TensorFlow), the learner takes the composite paths: the same
 * function, more passes over memory, different float rounding. Because the rounding differs, an
 * update's recorded backend names the kernel set (native-ops' `backendLabel`), so that audit and
 * replay tell "other kernels" from "other inputs".
 */
export interface SrpoKernelsStatus {
  loaded: boolean;
  /** Kernel-set version (`SRPO_KERNELS_VERSION` of the source). */
  version?: number;
  /** The TensorFlow op names it registered. */
  ops: readonly string[];
  /** The addon file, when found. */
  file?: string;
  /** Why it is not loaded. */
  reason?: string;
  /**
   * Whether TensorFlow's `MatMul` (oneDNN) runs AVX-512 code on this machine: the CPU has
   * AVX-512 F/BW/VL/DQ and `ONEDNN_MAX_CPU_ISA` does not cap it below. Decides `matMul: 'auto'`.
   */
  onednnAvx512?: boolean;
  /**
   * The micro-kernel of `SrpoMatMul` here: `avx512` where the CPU has AVX-512F and
   * `ONEDNN_MAX_CPU_ISA` does not cap it below, else `avx2`. Both give the same bits.
   */
  gemmIsa?: 'avx512' | 'avx2';
  /**
   * The build of the elementwise loops compiled twice (GELU and SwiGLU, each way; kernel-support.h's
   * `SRPO_BOTH_ISAS`), by the same rule as {@link gemmIsa}. Both give the same bits.
   */
  elementwiseIsa?: 'avx512' | 'avx2';
  /** The CPU's vendor, as the addon's CPUID reads it. Decides `matMul: 'auto'` with {@link onednnAvx512}. */
  cpuVendor?: 'intel' | 'amd' | 'other';
}

/** What the addon's module exports (srpo-kernels.cc's Init); for this library's tuning.ts, not exported from the package. */
export interface AddonExports {
  version: number;
  ops: string[];
  onednnAvx512: boolean;
  gemmIsa: 'avx512' | 'avx2';
  elementwiseIsa: 'avx512' | 'avx2';
  cpuVendor: 'intel' | 'amd' | 'other';
  /** Absent from builds before it (the kernel set's results did not change with it). */
  setIsa?(part: KernelIsaPart, isa: KernelIsa): KernelIsa;
  setGemmPlanThreads?(threads: number): number;
  setWorkerSpin(microseconds: number): void;
  workerSpin(): number;
}

/** The addon's two builds of the micro-kernels (switched by tuning.ts' setKernelIsa). */
export type KernelIsa = 'avx2' | 'avx512';
/** The parts built twice: `SrpoMatMul`'s micro-kernel and the elementwise loops. */
export type KernelIsaPart = 'gemm' | 'elementwise';

/** The kernel set this code expects (`SRPO_KERNELS_VERSION` in srpo-kernels.cc); a build of another version is stale. */
export const SRPO_KERNELS_VERSION = 12;

const log = new Logger('srpo-kernels');
let status: SrpoKernelsStatus | undefined;
let addonExports: AddonExports | undefined;
let enabled = true;

/**
 * Where scripts/build-native-kernels.sh puts the addon (libs/kernels/native/build), seen from
 * libs/kernels/src (jest, run-ts.js) and from dist/libs/kernels/src (the build, which copies no
 * binary: the addon stays beside its sources).
 */
function candidates(): string[] {
  return [path.resolve(__dirname, '../native/build/srpo_kernels.node'), path.resolve(__dirname, '../../../../libs/kernels/native/build/srpo_kernels.node')];
}

/**
 * Loads the addon once per process; later calls return the first outcome. Call it only with
 * tfjs-node's backend active: the addon registers into the libtensorflow that backend loaded.
 * A failure to load is reported once, as a warning, and is not an error: the composite paths remain.
 */
export function loadSrpoKernels(): SrpoKernelsStatus {
  if (status) return status;
  // The addon links tfjs-node's libtensorflow; tfjs-node-gpu (also named `tensorflow`) loads
  // another one, and two TensorFlow runtimes must not share a process.
  const pkg = currentBackend()?.package;
  if (pkg !== undefined && pkg !== '@tensorflow/tfjs-node') {
    status = { loaded: false, ops: [], reason: `built for @tensorflow/tfjs-node's libtensorflow; the backend comes from ${pkg}` };
    return status;
  }
  const file = candidates().find((f) => existsSync(f));
  if (!file) {
    status = { loaded: false, ops: [], reason: 'not built (run npm run setup, or bash scripts/build-native-kernels.sh)' };
    log.warn('fused kernels not built; the learner uses the composite paths', { reason: status.reason });
    return status;
  }
  try {
    // eslint-disable-next-line @typescript-eslint/no-require-imports -- a native addon at a path found at run time
    const addon = require(file) as AddonExports;
    if (addon.version !== SRPO_KERNELS_VERSION) {
      status = {
        loaded: false,
        ops: [],
        file,
        version: addon.version,
        reason: `stale build: kernel set ${addon.version}, this code expects ${SRPO_KERNELS_VERSION} (run npm run build:native)`,
      };
      log.warn('fused kernels not used; the learner uses the composite paths', { file, reason: status.reason });
      return status;
    }
    status = {
      loaded: true,
      version: addon.version,
      ops: [...addon.ops],
      file,
      onednnAvx512: addon.onednnAvx512,
      gemmIsa: addon.gemmIsa,
      elementwiseIsa: addon.elementwiseIsa,
      cpuVendor: addon.cpuVendor,
    };
    addonExports = addon;
    syncWorkerSpin();
    if (status.ops.includes('SrpoAdd')) routeAddsToSrpoAdd();
  } catch (e) {
    status = { loaded: false, ops: [], file, reason: errorMessage(e) };
    log.warn('fused kernels could not load; the learner uses the composite paths', { file, reason: status.reason });
  }
  return status;
}

/**
 * The loaded addon's exports, or undefined: for the A/B switches of tuning.ts (the bench- and
 * test-only entry `@srpo/kernels/tuning`); not exported from the package.
 */
export function loadedAddon(): AddonExports | undefined {
  return addonExports;
}

/**
 * How long the kernels' pool workers spin after a call before they sleep (kernel-support.h):
 * 1 ms where `SrpoMatMul` runs the products on that pool, 100 µs where TensorFlow's `MatMul`
 * runs them on TensorFlow's threads, which a spinning worker would hold off its core. Measured
 * in one process on the reference step (docs/benchmarks.md, #21): 1 ms against 100 µs took
 * 0.96–0.98x the time with `SrpoMatMul` (Intel Xeon), and longer spins up to 1.13x with oneDNN's
 * `MatMul` (AMD EPYC).
 */
function syncWorkerSpin(): void {
  addonExports?.setWorkerSpin(srpoMatMulRouted() ? 1000 : 100);
}

let addsEnabled = true;
let excluded: ReadonlySet<string> = new Set();
let matMulChoice: MatMulChoice = 'auto';

/**
 * The kernel of the learner's 2-D products on the native backend: `SrpoMatMul`
 * (gemm-kernels.h), TensorFlow's `MatMul`, or `auto`: `SrpoMatMul` everywhere except on AMD CPUs
 * where oneDNN has AVX-512. Measured (docs/benchmarks.md, #21): below AVX-512 (AVX2-only CPUs,
 * or `ONEDNN_MAX_CPU_ISA` capped) `SrpoMatMul` beats oneDNN's AVX2 code; on the Intel Xeon with
 * AVX-512, `SrpoMatMul`'s AVX-512 micro-kernel beats oneDNN's sgemm; on the AMD EPYC (Zen 4)
 * oneDNN's AVX-512 sgemm was a few percent faster than the AVX2 `SrpoMatMul`, and the AVX-512
 * one has not been measured there, so TensorFlow's `MatMul` stays.
 */
export type MatMulChoice = 'auto' | 'srpo' | 'tensorflow';

/** The process-wide switches of {@link configureSrpoKernels}. */
export interface SrpoKernelSwitches {
  /** Every fused kernel; default true. */
  enabled: boolean;
  /** The routing of tfjs's adds to `SrpoAdd` alone; default true. */
  adds: boolean;
  /** Fused forward kernels not to use (e.g. `['SrpoAttention']`), the others staying on; default none. */
  except: readonly string[];
  /** The kernel of 2-D products (see {@link MatMulChoice}); default `auto`. */
  matMul: MatMulChoice;
}

/**
 * Process-wide switches (bench A/B, or a team that wants TensorFlow's kernels only). A kernel
 * left out by `except` is not taken by new forward passes; a backward whose forward took it still
 * runs its pair (see {@link srpoKernelRegistered}).
 */
export function configureSrpoKernels(next: Partial<SrpoKernelSwitches>): SrpoKernelSwitches {
  if (next.enabled !== undefined) enabled = next.enabled;
  if (next.adds !== undefined) addsEnabled = next.adds;
  if (next.except !== undefined) excluded = new Set(next.except);
  if (next.matMul !== undefined) matMulChoice = next.matMul;
  syncWorkerSpin();
  return { enabled, adds: addsEnabled, except: [...excluded], matMul: matMulChoice };
}

/**
 * True when the learner's 2-D products run `SrpoMatMul`: the addon loaded, the kernels on, and
 * `matMul` is `srpo`, or `auto` anywhere but an AMD CPU where oneDNN has AVX-512 (see {@link MatMulChoice}).
 */
export function srpoMatMulRouted(): boolean {
  if (matMulChoice === 'tensorflow' || !srpoKernelAvailable('SrpoMatMul')) return false;
  const kernels = loadSrpoKernels();
  return matMulChoice === 'srpo' || !(kernels.onednnAvx512 === true && kernels.cpuVendor === 'amd');
}

/** True when `op` is registered and switched on (see {@link configureSrpoKernels}). Loads the addon on first use. */
export function srpoKernelAvailable(op: string): boolean {
  return enabled && !excluded.has(op) && srpoKernelRegistered(op);
}

/**
 * True when `op` is registered, switched on or not: a backward whose forward took a fused
 * kernel must take its fused pair even if the switch flipped in between.
 */
export function srpoKernelRegistered(op: string): boolean {
  return loadSrpoKernels().ops.includes(op);
}

/** The loaded kernel set's version when the fused kernels are switched on, else undefined. */
export function fusedKernelSet(): number | undefined {
  if (!enabled) return undefined;
  const s = loadSrpoKernels();
  return s.loaded ? s.version : undefined;
}

interface AddBackend {
  executeSingleOutput(name: string, attrs: never[], inputs: tf.TensorInfo[]): tf.TensorInfo;
}

let addRouted = false;

/** True when tfjs's float32 adds on the native backend run `SrpoAdd` (the addon loaded and the switch on). */
export function srpoAddRouted(): boolean {
  return addRouted && enabled && addsEnabled;
}

/**
 * Routes tfjs's `Add` on the native backend to `SrpoAdd` (elementwise-kernels.h) for float32
 * operands of one shape, or a row `[C]` (or `[1, ..., C]`) and a `[..., C]`: every add of a step, tfjs's own
 * gradient accumulation included, which no custom gradient reaches. Other adds, and all adds
 * while the switch is off, keep tfjs-node's kernel. The sums are bit for bit TensorFlow's
 * (one IEEE addition per element), so this is not part of the recorded kernel set.
 */
function routeAddsToSrpoAdd(): void {
  if (addRouted) return;
  const registered = tf.getKernel(tf.Add, 'tensorflow');
  if (!registered) return;
  // tfjs's kernel registry is process-wide while this module may be loaded twice (jest's module
  // registries): wrap tfjs-node's own kernel, never a wrapper installed by another copy.
  const original = (registered.kernelFunc as RoutedAdd).tensorflowAdd ?? registered.kernelFunc;
  addRouted = true;
  const sameShape = (a: tf.TensorInfo, b: tf.TensorInfo) => a.shape.length === b.shape.length && a.shape.every((d, i) => d === b.shape[i]);
  // A row: [C], or [1, ..., 1, C] with no more axes than x (normLinear's [1, O] bias row): the sum
  // broadcasts to x's shape either way.
  const isRowOf = (row: tf.TensorInfo, x: tf.TensorInfo) => {
    const r = row.shape.length;
    if (r < 1 || r > x.shape.length || row.shape[r - 1] !== x.shape[x.shape.length - 1]) return false;
    for (let i = 0; i < r - 1; i++) if (row.shape[i] !== 1) return false;
    return true;
  };
  const routed: RoutedAdd = (args) => {
    const { a, b } = args.inputs as { a: tf.TensorInfo; b: tf.TensorInfo };
    if (enabled && addsEnabled && a.dtype === 'float32' && b.dtype === 'float32') {
      const backend = args.backend as unknown as AddBackend;
      if (sameShape(a, b) || isRowOf(b, a)) return backend.executeSingleOutput('SrpoAdd', [], [a, b]);
      // Addition commutes exactly: a row first is the same sum.
      if (isRowOf(a, b)) return backend.executeSingleOutput('SrpoAdd', [], [b, a]);
    }
    return original(args);
  };
  routed.tensorflowAdd = original;
  tf.unregisterKernel(tf.Add, 'tensorflow');
  tf.registerKernel({ kernelName: tf.Add, backendName: 'tensorflow', kernelFunc: routed });
}

/** The `Add` kernel this module installs, carrying the one it replaced. */
type RoutedAdd = tf.KernelFunc & { tensorflowAdd?: tf.KernelFunc };
