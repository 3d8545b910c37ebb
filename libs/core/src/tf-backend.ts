import type * as tfjs from '@tensorflow/tfjs';
import { ErrorCode, SrpoError } from './errors';
import { Logger } from './logger';

/**
 * TensorFlow.js backend selection.
 *
 * Automatic order: `tensorflow-gpu` (@tensorflow/tfjs-node-gpu, when installed and
 * it sees a GPU) > `tensorflow` (@tensorflow/tfjs-node, native libtensorflow) >
 * `cpu` (pure JS). `SRPO_BACKEND` (read by each app's config module and passed
 * here as `requested`) forces one; a forced backend that fails to start is an
 * error, never a silent fallback, because `tf.setBackend` only returns false.
 */
export type BackendRequest = 'auto' | 'tensorflow-gpu' | 'tensorflow' | 'cpu';
export const BACKEND_REQUESTS: readonly BackendRequest[] = ['auto', 'tensorflow-gpu', 'tensorflow', 'cpu'];

export interface BackendInfo {
  /** What the caller asked for. */
  requested: BackendRequest;
  /** The package that provides it (`@tensorflow/tfjs-node`, ...). */
  package: string;
  /** `tf.getBackend()` after selection: `tensorflow` for both native packages. */
  name: string;
  /** libtensorflow's version for native backends. */
  nativeVersion?: string;
  /** True when the native backend runs on a GPU. */
  gpu: boolean;
}

let selected: { info: BackendInfo; tf: typeof tfjs } | undefined;
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
 * Loads and activates a backend once per process; later calls return the first
 * choice (tfjs backends cannot be unloaded). Logs the choice once.
 */
export async function initTfBackend(requested: BackendRequest = 'auto'): Promise<BackendInfo> {
  if (selected) return selected.info;
  // libtensorflow prints oneDNN and CPU-feature notices on stderr at load.
  process.env.TF_CPP_MIN_LOG_LEVEL = '2';
  const attempts: BackendRequest[] = requested === 'auto' ? ['tensorflow-gpu', 'tensorflow', 'cpu'] : [requested];
  const failures: string[] = [];
  for (const candidate of attempts) {
    try {
      const result = await tryBackend(candidate);
      if (result) {
        selected = { info: { ...result.info, requested }, tf: result.tf };
        log.info('tensorflow backend selected', { ...selected.info });
        return selected.info;
      }
      failures.push(`${candidate}: not available`);
    } catch (e) {
      failures.push(`${candidate}: ${e instanceof Error ? e.message.split('\n')[0] : String(e)}`);
    }
  }
  throw new SrpoError(ErrorCode.ENVIRONMENT, `no usable TensorFlow.js backend for SRPO_BACKEND=${requested} (${failures.join('; ')})`);
}

async function tryBackend(candidate: BackendRequest): Promise<{ info: Omit<BackendInfo, 'requested'>; tf: typeof tfjs } | null> {
  switch (candidate) {
    case 'tensorflow-gpu': {
      if (!isInstalled('@tensorflow/tfjs-node-gpu')) return null;
      const tf = require('@tensorflow/tfjs-node-gpu') as typeof tfjs;
      await activate(tf, 'tensorflow');
      const gpu = nativeHasGpu(tf);
      if (!gpu) return null;
      return { info: { package: '@tensorflow/tfjs-node-gpu', name: tf.getBackend(), nativeVersion: nativeVersion(tf), gpu }, tf };
    }
    case 'tensorflow': {
      const tf = require('@tensorflow/tfjs-node') as typeof tfjs;
      await activate(tf, 'tensorflow');
      return { info: { package: '@tensorflow/tfjs-node', name: tf.getBackend(), nativeVersion: nativeVersion(tf), gpu: false }, tf };
    }
    case 'cpu': {
      const tf = require('@tensorflow/tfjs') as typeof tfjs;
      await activate(tf, 'cpu');
      return { info: { package: '@tensorflow/tfjs', name: tf.getBackend(), gpu: false }, tf };
    }
    default:
      return null;
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

interface NativeBinding {
  TF_Version?: string;
}

function binding(tf: typeof tfjs): NativeBinding {
  return ((tf.backend() as unknown as { binding?: NativeBinding }).binding ?? {}) as NativeBinding;
}

function nativeVersion(tf: typeof tfjs): string | undefined {
  return binding(tf).TF_Version;
}

function nativeHasGpu(tf: typeof tfjs): boolean {
  return (tf.backend() as unknown as { isUsingGpuDevice?: boolean }).isUsingGpuDevice === true;
}
