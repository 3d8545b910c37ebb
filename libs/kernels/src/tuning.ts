import { type AddonExports, type KernelIsa, type KernelIsaPart, loadedAddon, loadSrpoKernels } from './srpo-kernels';

/**
 * `@srpo/kernels/tuning`: the A/B and tuning switches of the native kernels, for benches and
 * specs only. None changes a result (both ISA builds and every gemm plan give the same bits);
 * they exist so that one process can compare builds and schedules. The product (apps, libs)
 * does not import this entry: it configures the kernels through `configureSrpoKernels` and
 * `configureNativeKernels` of `@srpo/kernels`.
 */

export { configureWebGpuKernels, type WebGpuKernelOptions } from './native-ops';

export type { KernelIsa, KernelIsaPart };

/** The loaded addon, or an error saying why there is none. */
function addon(): AddonExports {
  const loaded = loadedAddon();
  if (!loaded) throw new Error(`srpo-kernels not loaded: ${loadSrpoKernels().reason ?? 'load it first'}`);
  return loaded;
}

/**
 * Switches which build of `SrpoMatMul`'s micro-kernel (`gemm`) or of the elementwise loops built
 * twice (`elementwise`) the addon runs, and returns the previous one. Both builds give the same
 * bits; this exists so that tests and benches can compare them in one process. Not while kernels
 * run. Throws where the addon is not loaded, or for `avx512` where the CPU has no AVX-512F.
 */
export function setKernelIsa(part: KernelIsaPart, isa: KernelIsa): KernelIsa {
  const a = addon();
  // A build from before setIsa (same kernel set: the switch changed no result) lacks it.
  if (typeof a.setIsa !== 'function') throw new Error('srpo-kernels build has no setIsa; rebuild it (npm run build:native)');
  return a.setIsa(part, isa);
}

/**
 * Makes `SrpoMatMul` plan its products (how C is split, the pieces, whether K segments run whole)
 * as if its pool had `threads` threads, 0 meaning the pool's own count, and returns the previous
 * setting. The bits never depend on it: every element's chains are fixed by the shape
 * (gemm-kernels.h, gemm-ops.h). It exists so that tests run the schedules of larger machines on a
 * small one. Not while kernels run.
 */
export function setGemmPlanThreads(threads: number): number {
  const a = addon();
  if (typeof a.setGemmPlanThreads !== 'function') throw new Error('srpo-kernels build has no setGemmPlanThreads; rebuild it (npm run build:native)');
  return a.setGemmPlanThreads(threads);
}

/**
 * How long the pool's workers spin after a call, in µs (srpo-kernels.ts' syncWorkerSpin sets it
 * from the routing of the products); undefined without the addon.
 */
export function workerSpinMicroseconds(): number | undefined {
  return loadedAddon()?.workerSpin();
}
