import type * as tfjs from '@tensorflow/tfjs';
import type { EnvReader } from './config';
import { ConfigError, ErrorCode, SrpoError } from './errors';
import { checkCudaEnvironment, cudaMismatchMessage } from './gpu-cuda';
import {
  describeAdapter,
  dawnGpu,
  installWebGpuGlobals,
  probeAdapter,
  releaseWebGpuGlobals,
  selectedAdapter,
  useDawnAddon,
  WEBGPU_BACKEND_PACKAGE,
  webgpuPackages,
  type GpuAdapterReport,
} from './gpu-webgpu';
import { Logger } from './logger';

// index.ts re-exports this module; the GPU helpers travel with it.
export { checkCudaLibraries, cudaMismatchMessage, parseLdconfigCache, CUDA11_TF291, CUDA12_TF_WHEEL } from './gpu-cuda';
export type { CudaCheck, CudaLibrary, CudaRequirement } from './gpu-cuda';
export { describeAdapter, isSoftwareAdapter } from './gpu-webgpu';
export type { GpuAdapterInfoLike, GpuAdapterReport } from './gpu-webgpu';

/**
 * TensorFlow.js backend selection.
 *
 * Automatic order: `tensorflow-gpu` (@tensorflow/tfjs-node-gpu, when installed,
 * its CUDA libraries are present and TensorFlow registers a GPU) > `webgpu`
 * (@tensorflow/tfjs-backend-webgpu on Dawn, only when Dawn offers a hardware
 * adapter: a software one such as lavapipe is slower than native TensorFlow on
 * the same CPU) > `tensorflow` (@tensorflow/tfjs-node, native libtensorflow) >
 * `cpu` (pure JS). `SRPO_BACKEND` (read by each app's config module and passed
 * here as `requested`) forces one; a forced backend that fails to start is an
 * error naming the cause, never a silent fallback, because `tf.setBackend`
 * only returns false. A forced `webgpu` accepts a software adapter (that is how
 * CI exercises the GPU code path) and logs a warning.
 */
export type BackendRequest = 'auto' | 'tensorflow-gpu' | 'webgpu' | 'tensorflow' | 'cpu';
// webgpu last: the order of the list is what config errors print, not the automatic order.
/**
 * This module's file: `srpo doctor` loads the compiled one (`.js`) in a child process to try the
 * backend selection without risking its own process.
 */
export const TF_BACKEND_MODULE_FILE = __filename;

export const BACKEND_REQUESTS: readonly BackendRequest[] = ['auto', 'tensorflow-gpu', 'tensorflow', 'cpu', 'webgpu'];

export interface BackendInfo {
  /** What the caller asked for. */
  requested: BackendRequest;
  /** The package that provides it (`@tensorflow/tfjs-node`, ...). */
  package: string;
  /** `tf.getBackend()` after selection: `tensorflow` for both native packages, `webgpu`, `cpu`. */
  name: string;
  /** libtensorflow's version for native backends. */
  nativeVersion?: string;
  /** True when the backend computes on a GPU (not on a software WebGPU adapter). */
  gpu: boolean;
  /** WebGPU: the adapter Dawn gave the backend. */
  adapter?: GpuAdapterReport;
}

/** A tfjs flag's value, as `tf.env().set` takes it. */
export type TfFlagValue = number | boolean | string;

/**
 * What loading a backend takes from the process's environment. Each app's config module reads
 * it ({@link tfBackendSettings}) and passes it to {@link initTfBackend}; this library reads no
 * environment variable itself.
 */
export interface TfBackendSettings {
  /** `SRPO_WEBGPU_FLAGS`: tfjs flag values for the webgpu backend, over this module's defaults (tuning runs). */
  webgpuFlags?: Readonly<Record<string, TfFlagValue>>;
  /** `SRPO_DAWN_NODE`: the path of dawn.node, for a single-file bundle that carries it beside itself. */
  dawnNode?: string;
  /** `SRPO_TF_CUDA`: the CUDA generation tfjs-node-gpu's libtensorflow needs, where its files do not tell. */
  tfCuda?: '11' | '12';
  /** `LD_LIBRARY_PATH`: where the dynamic loader looks for the CUDA libraries (the check before loading tfjs-node-gpu). */
  libraryPath?: string;
}

/** Reads {@link TfBackendSettings} through an app's config reader; a bad value names its variable. */
export function tfBackendSettings(r: EnvReader): TfBackendSettings {
  const settings: TfBackendSettings = {};
  const flags = r.json('SRPO_WEBGPU_FLAGS');
  if (flags !== undefined) settings.webgpuFlags = webGpuFlags(flags);
  const dawnNode = r.optionalStr('SRPO_DAWN_NODE');
  if (dawnNode !== undefined) settings.dawnNode = dawnNode;
  if (r.has('SRPO_TF_CUDA')) settings.tfCuda = r.oneOf('SRPO_TF_CUDA', ['11', '12'] as const);
  const libraryPath = r.optionalStr('LD_LIBRARY_PATH');
  if (libraryPath !== undefined) settings.libraryPath = libraryPath;
  return settings;
}

/** `SRPO_WEBGPU_FLAGS`, parsed: a JSON object whose values are numbers, booleans or strings. */
function webGpuFlags(parsed: unknown): Record<string, TfFlagValue> {
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed))
    throw new ConfigError('SRPO_WEBGPU_FLAGS', 'expected a JSON object of tfjs flags');
  const flags: Record<string, TfFlagValue> = {};
  for (const [k, v] of Object.entries(parsed)) {
    if (typeof v !== 'number' && typeof v !== 'boolean' && typeof v !== 'string')
      throw new ConfigError('SRPO_WEBGPU_FLAGS', `flag ${k}: expected a number, boolean or string`);
    flags[k] = v;
  }
  return flags;
}

let selected: { info: BackendInfo; tf: typeof tfjs } | undefined;
/**
 * tfjs-node-gpu once loaded: it cannot be unloaded, and loading tfjs-node beside
 * it would put a second libtensorflow in the process, so the `tensorflow`
 * candidate reuses it (its libtensorflow runs on the CPU as well).
 */
let nativeGpuPackage: typeof tfjs | undefined;
const log = new Logger('tf-backend');

/** The TensorFlow.js namespace; valid after {@link initTfBackend}. */
export function tf(): typeof tfjs {
  if (!selected) throw new SrpoError(ErrorCode.ENVIRONMENT, 'TensorFlow.js backend not initialised: call initTfBackend() first');
  return selected.tf;
}

export function currentBackend(): BackendInfo | undefined {
  return selected?.info;
}

/**
 * A candidate that does not apply here; in auto mode the next one is tried.
 * `notable`: installed but unusable (the user meant to use it), worth a warning.
 */
class Unavailable extends Error {
  constructor(
    message: string,
    readonly notable = false,
  ) {
    super(message);
  }
}

/**
 * Loads and activates a backend once per process; later calls return the first
 * choice (tfjs backends cannot be unloaded). Logs the choice once.
 */
export async function initTfBackend(requested: BackendRequest = 'auto', settings: TfBackendSettings = {}): Promise<BackendInfo> {
  if (selected) return selected.info;
  if (!BACKEND_REQUESTS.includes(requested)) {
    throw new SrpoError(ErrorCode.CONFIG_INVALID, `unknown backend '${String(requested)}' (one of ${BACKEND_REQUESTS.join(', ')})`, { field: 'SRPO_BACKEND' });
  }
  // libtensorflow prints oneDNN and CPU-feature notices on stderr at load; it takes its log
  // level from its environment only, so the default is written there, and a value set by the
  // user wins (0 shows why a GPU was not registered).
  process.env.TF_CPP_MIN_LOG_LEVEL ??= '2';
  useDawnAddon(settings.dawnNode);
  const auto = requested === 'auto';
  const attempts: BackendRequest[] = auto ? ['tensorflow-gpu', 'webgpu', 'tensorflow', 'cpu'] : [requested];
  const failures: string[] = [];
  for (const candidate of attempts) {
    try {
      const result = await tryBackend(candidate, auto, settings);
      selected = { info: { ...result.info, requested }, tf: result.tf };
      log.info('tensorflow backend selected', { ...selected.info, adapter: selected.info.adapter && describeAdapter(selected.info.adapter) });
      return selected.info;
    } catch (e) {
      const reason = e instanceof Error ? e.message.split('\n')[0] : String(e);
      if (!auto) {
        throw e instanceof SrpoError ? e : new SrpoError(ErrorCode.ENVIRONMENT, `SRPO_BACKEND=${requested}: ${reason}`, { cause: e });
      }
      if (!(e instanceof Unavailable) || e.notable) log.warn(`backend ${candidate} skipped`, { reason });
      else log.debug(`backend ${candidate} skipped`, { reason });
      failures.push(`${candidate}: ${reason}`);
    }
  }
  throw new SrpoError(ErrorCode.ENVIRONMENT, `no usable TensorFlow.js backend for SRPO_BACKEND=${requested} (${failures.join('; ')})`);
}

/**
 * Releases what the backend holds outside the JS heap. Needed for `webgpu`:
 * Dawn keeps the event loop alive until its device and `navigator.gpu` are gone.
 * After this, {@link initTfBackend} may be called again.
 */
export function releaseTfBackend(): void {
  if (!selected) return;
  const { tf: t, info } = selected;
  if (info.name === 'webgpu') {
    const device = (t.findBackend('webgpu') as unknown as { device?: { destroy?: () => void } } | null)?.device;
    t.removeBackend('webgpu');
    device?.destroy?.();
    releaseWebGpuGlobals();
  }
  selected = undefined;
}

async function tryBackend(
  candidate: BackendRequest,
  auto: boolean,
  settings: TfBackendSettings,
): Promise<{ info: Omit<BackendInfo, 'requested'>; tf: typeof tfjs }> {
  switch (candidate) {
    case 'tensorflow-gpu':
      return tensorflowGpu(auto, settings);
    case 'webgpu':
      return webgpu(auto, settings);
    case 'tensorflow': {
      const pkg = nativeGpuPackage ? '@tensorflow/tfjs-node-gpu' : '@tensorflow/tfjs-node';
      // eslint-disable-next-line @typescript-eslint/no-require-imports -- loaded only once this backend is chosen: loading registers a backend (and tfjs-node loads libtensorflow)
      const tf = nativeGpuPackage ?? (require('@tensorflow/tfjs-node') as typeof tfjs);
      await activate(tf, 'tensorflow');
      return { info: { package: pkg, name: tf.getBackend(), nativeVersion: nativeVersion(tf), gpu: false }, tf };
    }
    case 'cpu': {
      // eslint-disable-next-line @typescript-eslint/no-require-imports -- loaded only once this backend is chosen: loading registers a backend (and tfjs-node loads libtensorflow)
      const tf = require('@tensorflow/tfjs') as typeof tfjs;
      await activate(tf, 'cpu');
      return { info: { package: '@tensorflow/tfjs', name: tf.getBackend(), gpu: false }, tf };
    }
    default:
      throw new Unavailable(`unknown backend ${candidate}`);
  }
}

async function tensorflowGpu(auto: boolean, settings: TfBackendSettings): Promise<{ info: Omit<BackendInfo, 'requested'>; tf: typeof tfjs }> {
  const pkg = '@tensorflow/tfjs-node-gpu';
  if (!isInstalled(pkg)) throw new Unavailable(`${pkg} is not installed`);
  // Check the CUDA libraries before loading: libtensorflow would only log the
  // dlopen failures and run on the CPU, and once loaded it cannot be unloaded.
  const check = checkCudaEnvironment(settings);
  if (check.missing.length > 0) {
    const message = cudaMismatchMessage(check);
    if (auto) throw new Unavailable(message, true);
    throw new SrpoError(ErrorCode.ENVIRONMENT, message, { details: { missing: check.missing.map((l) => l.soname), otherVersions: check.otherVersions } });
  }
  let tf: typeof tfjs;
  try {
    // eslint-disable-next-line @typescript-eslint/no-require-imports -- loaded only once this backend is chosen: loading registers a backend (and tfjs-node loads libtensorflow)
    tf = require(pkg) as typeof tfjs;
  } catch (e) {
    throw new SrpoError(ErrorCode.ENVIRONMENT, `${pkg} failed to load (${firstLine(e)}); its libtensorflow is in ${pkg}/deps/lib`, { cause: e });
  }
  nativeGpuPackage = tf;
  await activate(tf, 'tensorflow');
  if (!nativeHasGpu(tf)) {
    throw new SrpoError(
      ErrorCode.ENVIRONMENT,
      `${pkg} loaded libtensorflow ${nativeVersion(tf) ?? '?'} but it registered no GPU device (a CPU-only libtensorflow, an old driver, or a GPU it was not built for; TF_CPP_MIN_LOG_LEVEL=0 shows why)`,
    );
  }
  return { info: { package: pkg, name: tf.getBackend(), nativeVersion: nativeVersion(tf), gpu: true }, tf };
}

async function webgpu(auto: boolean, settings: TfBackendSettings): Promise<{ info: Omit<BackendInfo, 'requested'>; tf: typeof tfjs }> {
  const { missing } = webgpuPackages();
  if (missing.length > 0) throw new Unavailable(`not installed: ${missing.join(', ')} (npm packages)`);
  const probe = await probeAdapter(dawnGpu());
  if (!probe) {
    releaseWebGpuGlobals();
    throw new Unavailable('Dawn found no WebGPU adapter (no Vulkan driver? infra/webgpu/install.sh installs the loader and lavapipe)');
  }
  if (auto && probe.software) {
    releaseWebGpuGlobals();
    throw new Unavailable(`only a software adapter: ${describeAdapter(probe)}; SRPO_BACKEND=webgpu uses it anyway`);
  }
  installWebGpuGlobals();
  // eslint-disable-next-line @typescript-eslint/no-require-imports -- loaded only once this backend is chosen: loading registers a backend (and tfjs-node loads libtensorflow)
  const tf = require('@tensorflow/tfjs') as typeof tfjs;
  try {
    // Registers the backend; must come after navigator.gpu exists (see gpu-webgpu.ts).
    // A literal name, so that bundlers inline the package.
    // eslint-disable-next-line @typescript-eslint/no-require-imports -- loaded only after navigator.gpu exists (above)
    require('@tensorflow/tfjs-backend-webgpu');
  } catch (e) {
    releaseWebGpuGlobals();
    throw new SrpoError(ErrorCode.ENVIRONMENT, `cannot load ${WEBGPU_BACKEND_PACKAGE}: ${firstLine(e)}`, { cause: e });
  }
  try {
    applyWebGpuFlags(tf, settings.webgpuFlags);
    await activate(tf, 'webgpu');
  } catch (e) {
    releaseWebGpuGlobals();
    throw e;
  }
  const adapter = selectedAdapter() ?? probe;
  if (adapter.software) {
    log.warn('WebGPU runs on a software adapter: numerically the GPU code path, but slower than the native CPU backend', { adapter: describeAdapter(adapter) });
  }
  return { info: { package: WEBGPU_BACKEND_PACKAGE, name: tf.getBackend(), gpu: !adapter.software, adapter }, tf };
}

/**
 * tfjs-backend-webgpu flags. By default its matmul splits the inner dimension
 * across workgroups when the output is small and sums the parts with atomic
 * float adds, whose order varies from run to run; a threshold below one
 * workgroup keeps every product on the tiled program, so the same weights and
 * batch give the same bits (as on the CPU backends). `extra`
 * (`SRPO_WEBGPU_FLAGS`, {@link TfBackendSettings}) overrides, for tuning runs.
 */
function applyWebGpuFlags(tf: typeof tfjs, extra: Readonly<Record<string, TfFlagValue>> = {}): void {
  const flags: Record<string, TfFlagValue> = { WEBGPU_THRESHOLD_TO_INCREASE_WORKGROUPS_FOR_MATMUL: 0.5, ...extra };
  for (const [k, v] of Object.entries(flags)) {
    try {
      tf.env().set(k, v);
    } catch (e) {
      throw new SrpoError(ErrorCode.CONFIG_INVALID, `tfjs flag ${k}: ${firstLine(e)}`, { field: 'SRPO_WEBGPU_FLAGS' });
    }
  }
}

async function activate(tf: typeof tfjs, name: string): Promise<void> {
  const ok = await tf.setBackend(name);
  if (!ok || tf.getBackend() !== name) {
    throw new SrpoError(ErrorCode.ENVIRONMENT, `tf.setBackend('${name}') failed; tfjs stayed on '${tf.getBackend()}'`);
  }
  await tf.ready();
}

function isInstalled(pkg: string): boolean {
  try {
    require.resolve(pkg);
    return true;
  } catch {
    return false;
  }
}

function firstLine(e: unknown): string {
  return (e instanceof Error ? e.message : String(e)).split('\n')[0];
}

interface NativeBinding {
  TF_Version?: string;
}

function binding(tf: typeof tfjs): NativeBinding {
  return (tf.backend() as unknown as { binding?: NativeBinding }).binding ?? {};
}

function nativeVersion(tf: typeof tfjs): string | undefined {
  return binding(tf).TF_Version;
}

function nativeHasGpu(tf: typeof tfjs): boolean {
  return (tf.backend() as unknown as { isUsingGpuDevice?: boolean }).isUsingGpuDevice === true;
}
