import * as path from 'node:path';
import { ErrorCode, SrpoError } from './errors';

/**
 * WebGPU in Node through Dawn (npm package `webgpu`, which ships Dawn as a
 * native addon `dist/<platform>-<arch>/dawn.node`), for
 * `@tensorflow/tfjs-backend-webgpu`.
 *
 * Both packages are optional: nothing here imports them statically, so the
 * project builds and runs without them, and {@link webgpuPackages} says which
 * are missing. The addon is loaded with `require` on its file rather than
 * through the package's ESM entry, which CommonJS code (and jest) cannot import.
 *
 * Order matters: tfjs-backend-webgpu registers itself at import time only when
 * `navigator.gpu` already exists, and its kernels read Dawn's globals
 * (`GPUBufferUsage`, `GPUMapMode`, ...). {@link installWebGpuGlobals} must run
 * before the backend package is required.
 */

/** The subset of WebGPU's API this module touches; `@webgpu/types` is not a dependency. */
export interface GpuAdapterInfoLike {
  vendor?: string;
  architecture?: string;
  device?: string;
  description?: string;
  isFallbackAdapter?: boolean;
}

interface GpuAdapterLike {
  info?: GpuAdapterInfoLike;
  isFallbackAdapter?: boolean;
  features: { has(name: string): boolean; [Symbol.iterator](): Iterator<string> };
  limits: Record<string, number | undefined>;
}

interface GpuLike {
  requestAdapter(options?: { powerPreference?: 'low-power' | 'high-performance'; forceFallbackAdapter?: boolean }): Promise<GpuAdapterLike | null>;
}

interface DawnModule {
  create(flags: string[]): GpuLike;
  globals: Record<string, unknown>;
}

/** What the WebGPU backend runs on, as Dawn reports it. */
export interface GpuAdapterReport {
  vendor: string;
  architecture: string;
  device: string;
  description: string;
  /** A software rasteriser (lavapipe/llvmpipe, SwiftShader, WARP): correct but no faster than the CPU. */
  software: boolean;
  /** Limits that bound the model sizes the backend can hold. */
  maxBufferSize?: number;
  maxStorageBufferBindingSize?: number;
  features: string[];
}

export const WEBGPU_BACKEND_PACKAGE = '@tensorflow/tfjs-backend-webgpu';
export const DAWN_PACKAGE = 'webgpu';

/**
 * Software adapters are recognised by what Dawn reports: the spec's
 * `isFallbackAdapter`, Dawn's `architecture: 'software'`, or a known
 * software driver's name (older Dawn builds set neither flag for lavapipe).
 */
export function isSoftwareAdapter(info: GpuAdapterInfoLike, adapterFallback = false): boolean {
  if (adapterFallback || info.isFallbackAdapter === true) return true;
  if ((info.architecture ?? '').toLowerCase() === 'software') return true;
  const text = `${info.vendor ?? ''} ${info.device ?? ''} ${info.description ?? ''}`;
  return /llvmpipe|lavapipe|softpipe|swiftshader|microsoft basic render|\bwarp\b/i.test(text);
}

/** One line for logs and benchmark headers: `nvidia hopper (NVIDIA H200, Vulkan ...)`. */
export function describeAdapter(a: GpuAdapterReport): string {
  const what = [a.vendor, a.architecture].filter((s) => s).join(' ') || 'unknown adapter';
  const detail = [a.device, a.description].filter((s) => s).join(', ');
  return `${what}${detail ? ` (${detail})` : ''}${a.software ? ' [software]' : ''}`;
}

/** dawn.node's path when given (`SRPO_DAWN_NODE`, through {@link useDawnAddon}), else undefined. */
let dawnAddonOverride: string | undefined;

/**
 * Takes dawn.node from `path` instead of the `webgpu` package: a single-file bundle inlines the
 * backend and carries dawn.node beside itself (`SRPO_DAWN_NODE`, read by the caller's config;
 * initTfBackend passes it). Undefined goes back to the package.
 */
export function useDawnAddon(path: string | undefined): void {
  dawnAddonOverride = path;
}

/**
 * Which of the two npm packages are missing (empty when both resolve).
 * With dawn.node's path given ({@link useDawnAddon}) nothing is looked up;
 * loading reports what fails.
 */
export function webgpuPackages(): { missing: string[] } {
  if (dawnAddonOverride) return { missing: [] };
  return { missing: [DAWN_PACKAGE, WEBGPU_BACKEND_PACKAGE].filter((p) => !resolves(`${p}/package.json`)) };
}

function resolves(request: string): boolean {
  try {
    require.resolve(request);
    return true;
  } catch {
    return false;
  }
}

/** Path of dawn.node: the one given ({@link useDawnAddon}), else inside the `webgpu` package. */
export function dawnAddonPath(): string {
  if (dawnAddonOverride) return dawnAddonOverride;
  const root = path.dirname(require.resolve(`${DAWN_PACKAGE}/package.json`));
  const arch = process.platform === 'darwin' ? 'universal' : process.arch;
  return path.join(root, 'dist', `${process.platform}-${arch}`, 'dawn.node');
}

let dawn: DawnModule | undefined;

/** Loads Dawn once per process. Throws SrpoError naming what is missing. */
export function loadDawn(): DawnModule {
  if (dawn) return dawn;
  const addon = dawnAddonPath();
  try {
    // eslint-disable-next-line @typescript-eslint/no-require-imports -- a native addon at a path found at run time
    dawn = require(addon) as DawnModule;
  } catch (e) {
    throw new SrpoError(ErrorCode.ENVIRONMENT, `cannot load Dawn (${addon}): ${firstLine(e)}`, { cause: e });
  }
  return dawn;
}

/**
 * Asks Dawn for the adapter tfjs-backend-webgpu would get (high-performance
 * preference) and describes it; undefined when there is none. Throws when the
 * Vulkan loader is missing, with a hint.
 */
export async function probeAdapter(
  gpu: GpuLike,
  powerPreference: 'low-power' | 'high-performance' = 'high-performance',
): Promise<GpuAdapterReport | undefined> {
  let adapter: GpuAdapterLike | null;
  try {
    adapter = await gpu.requestAdapter({ powerPreference });
  } catch (e) {
    throw new SrpoError(ErrorCode.ENVIRONMENT, `WebGPU requestAdapter failed: ${firstLine(e)}`, { cause: e });
  }
  return adapter ? adapterReport(adapter) : undefined;
}

function adapterReport(adapter: GpuAdapterLike): GpuAdapterReport {
  const info = adapter.info ?? {};
  return {
    vendor: info.vendor ?? '',
    architecture: info.architecture ?? '',
    device: info.device ?? '',
    description: info.description ?? '',
    software: isSoftwareAdapter(info, adapter.isFallbackAdapter === true),
    maxBufferSize: adapter.limits.maxBufferSize,
    maxStorageBufferBindingSize: adapter.limits.maxStorageBufferBindingSize,
    features: [...adapter.features].sort(),
  };
}

/** Dawn's instance for this process, created on first use. */
let instance: GpuLike | undefined;
/** The adapter tfjs-backend-webgpu actually got (captured from its requestAdapter call). */
let lastAdapter: GpuAdapterLike | undefined;
let installed = false;

export function dawnGpu(): GpuLike {
  if (!instance) instance = loadDawn().create([]);
  return instance;
}

/**
 * Puts Dawn's `GPU*` globals and `navigator.gpu` in place for
 * tfjs-backend-webgpu. `navigator.gpu.requestAdapter` is wrapped so that the
 * adapter the backend picks can be reported afterwards ({@link selectedAdapter}).
 */
export function installWebGpuGlobals(): void {
  if (installed) return;
  const d = loadDawn();
  const gpu = dawnGpu();
  const g = globalThis as Record<string, unknown>;
  for (const [k, v] of Object.entries(d.globals)) {
    if (!(k in g)) g[k] = v;
  }
  // A plain object, not a subclass: Dawn's native methods check their receiver.
  const native = gpu as GpuLike & { getPreferredCanvasFormat?: () => string };
  const wrapped = {
    requestAdapter: async (options?: Parameters<GpuLike['requestAdapter']>[0]) => {
      const a = await native.requestAdapter(options);
      lastAdapter = a ?? undefined;
      return a;
    },
    getPreferredCanvasFormat: (): string => native.getPreferredCanvasFormat?.() ?? 'rgba8unorm',
  };
  const nav = g.navigator as Record<string, unknown> | undefined;
  // Node 21+ has a read-only `navigator` global: add `gpu` to it rather than replacing it.
  if (nav && typeof nav === 'object') Object.defineProperty(nav, 'gpu', { value: wrapped, configurable: true, writable: true });
  else Object.defineProperty(g, 'navigator', { value: { gpu: wrapped }, configurable: true, writable: true });
  installed = true;
}

/** The adapter the WebGPU backend got, once it has started. */
export function selectedAdapter(): GpuAdapterReport | undefined {
  return lastAdapter ? adapterReport(lastAdapter) : undefined;
}

/**
 * Drops `navigator.gpu` and this module's references to Dawn, so Dawn's
 * event loop handles stop keeping the process alive. Call after the backend
 * has been disposed (or when a probe decided against WebGPU).
 */
export function releaseWebGpuGlobals(): void {
  const nav = (globalThis as Record<string, unknown>).navigator as Record<string, unknown> | undefined;
  if (nav && 'gpu' in nav) delete nav.gpu;
  instance = undefined;
  lastAdapter = undefined;
  installed = false;
}

function firstLine(e: unknown): string {
  return (e instanceof Error ? e.message : String(e)).split('\n')[0];
}
