import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import * as path from 'node:path';

/**
 * CUDA libraries that native TensorFlow needs before it will register a GPU,
 * checked before `@tensorflow/tfjs-node-gpu` is loaded.
 *
 * libtensorflow links none of CUDA: it dlopens the driver and the CUDA
 * libraries when it starts, and if any of cudart, cuBLAS(Lt), cuFFT,
 * cuSOLVER, cuSPARSE or cuDNN is missing it logs "Cannot dlopen some GPU
 * libraries" and quietly runs on the CPU. Looking for the files first turns
 * that into an error that names them, and keeps a second libtensorflow out of
 * the process when the automatic choice moves on.
 *
 * Which set applies depends on the libtensorflow that tfjs-node-gpu carries:
 * - Google's `libtensorflow-gpu-linux-x86_64-2.9.1` (what `npm install` fetches
 *   when it can reach Google's storage): CUDA 11.2 and cuDNN 8.1;
 * - the `tensorflow` wheel laid out by infra/tensorflow/libtensorflow.sh
 *   (SRPO_TF_WHEEL=tensorflow SRPO_TF_FLAVOUR=gpu; 2.21 by default): CUDA 12 and
 *   cuDNN 9, i.e. the `nvidia-*-cu12` wheels from PyPI.
 */
export interface CudaLibrary {
  /** File name the dynamic loader is asked for. */
  soname: string;
  /** What provides it. */
  source: string;
}

export interface CudaRequirement {
  /** Human name of the libtensorflow build: `TensorFlow 2.21 wheel (CUDA 12, cuDNN 9)`. */
  label: string;
  /** CUDA major version of the runtime libraries (for "found CUDA 13 instead" hints). */
  cudaMajor: number;
  libraries: CudaLibrary[];
}

const DRIVER: CudaLibrary = { soname: 'libcuda.so.1', source: 'the NVIDIA driver' };

/** libtensorflow from the PyPI `tensorflow` 2.16–2.21 wheels. */
export const CUDA12_TF_WHEEL: CudaRequirement = {
  label: 'libtensorflow from the tensorflow wheel (CUDA 12, cuDNN 9)',
  cudaMajor: 12,
  libraries: [
    DRIVER,
    { soname: 'libcudart.so.12', source: 'nvidia-cuda-runtime-cu12' },
    { soname: 'libcublas.so.12', source: 'nvidia-cublas-cu12' },
    { soname: 'libcublasLt.so.12', source: 'nvidia-cublas-cu12' },
    { soname: 'libcufft.so.11', source: 'nvidia-cufft-cu12' },
    { soname: 'libcusolver.so.11', source: 'nvidia-cusolver-cu12' },
    { soname: 'libcusparse.so.12', source: 'nvidia-cusparse-cu12' },
    // cuSOLVER and cuSPARSE 12 link it; without it they fail to load.
    { soname: 'libnvJitLink.so.12', source: 'nvidia-nvjitlink-cu12' },
    { soname: 'libcudnn.so.9', source: 'nvidia-cudnn-cu12' },
  ],
};

/** Google's libtensorflow 2.9.1 GPU archive, tfjs-node-gpu 4.22's default. */
export const CUDA11_TF291: CudaRequirement = {
  label: "Google's libtensorflow 2.9.1 GPU build (CUDA 11.2, cuDNN 8.1)",
  cudaMajor: 11,
  libraries: [
    DRIVER,
    { soname: 'libcudart.so.11.0', source: 'CUDA 11.2 toolkit (cudart)' },
    { soname: 'libcublas.so.11', source: 'CUDA 11.2 toolkit (cuBLAS)' },
    { soname: 'libcublasLt.so.11', source: 'CUDA 11.2 toolkit (cuBLAS)' },
    { soname: 'libcufft.so.10', source: 'CUDA 11.2 toolkit (cuFFT)' },
    { soname: 'libcurand.so.10', source: 'CUDA 11.2 toolkit (cuRAND)' },
    { soname: 'libcusolver.so.11', source: 'CUDA 11.2 toolkit (cuSOLVER)' },
    { soname: 'libcusparse.so.11', source: 'CUDA 11.2 toolkit (cuSPARSE)' },
    { soname: 'libcudnn.so.8', source: 'cuDNN 8.1' },
  ],
};

export interface CudaCheck {
  requirement: CudaRequirement;
  /** Required libraries found nowhere on the search path. */
  missing: CudaLibrary[];
  /** Other major versions of a missing library that are present (`libcudart.so.13`): the usual mismatch. */
  otherVersions: string[];
  /** Directories searched, in order. */
  searched: string[];
}

/**
 * Pure core of the check: which required libraries are absent from `present`
 * (file names found on the search path), and which other versions of them are there.
 */
export function checkCudaLibraries(requirement: CudaRequirement, present: Iterable<string>, searched: string[] = []): CudaCheck {
  const names = new Set(present);
  const missing = requirement.libraries.filter((l) => !names.has(l.soname));
  const otherVersions = new Set<string>();
  for (const lib of missing) {
    const stem = lib.soname.replace(/\.so(\.\d+)*$/, '.so.');
    for (const n of names) if (n.startsWith(stem) && n !== lib.soname && /\.so\.\d+(\.\d+)*$/.test(n)) otherVersions.add(n);
  }
  return { requirement, missing, otherVersions: [...otherVersions].sort(), searched };
}

/** The error text for a failed check: what is missing, where it comes from, what was searched. */
export function cudaMismatchMessage(check: CudaCheck): string {
  const { requirement, missing, otherVersions, searched } = check;
  const driverMissing = missing.some((l) => l.soname === DRIVER.soname);
  const libs = missing.filter((l) => l.soname !== DRIVER.soname);
  const parts: string[] = [`@tensorflow/tfjs-node-gpu cannot use a GPU: ${requirement.label} needs`];
  const needs: string[] = [];
  if (driverMissing) needs.push('the NVIDIA driver (libcuda.so.1 not found)');
  if (libs.length > 0) {
    const bySource = new Map<string, string[]>();
    for (const l of libs) bySource.set(l.source, [...(bySource.get(l.source) ?? []), l.soname]);
    needs.push(`missing ${libs.map((l) => l.soname).join(', ')} (from ${[...bySource.keys()].join(', ')})`);
  }
  parts.push(needs.join(' and '));
  let msg = parts.join(' ');
  if (otherVersions.length > 0) {
    msg += `; found other versions: ${otherVersions.join(', ')} — these belong to another CUDA release and libtensorflow will not load them`;
  }
  if (libs.length > 0) {
    msg +=
      requirement.cudaMajor >= 12
        ? '. Install the CUDA 12 wheels (pip install nvidia-cuda-runtime-cu12 nvidia-cublas-cu12 nvidia-cufft-cu12 nvidia-cusolver-cu12 nvidia-cusparse-cu12 nvidia-nvjitlink-cu12 nvidia-cudnn-cu12) and put each nvidia/*/lib folder on LD_LIBRARY_PATH (see the README, "GPU training")'
        : '. Install CUDA 11.2 and cuDNN 8.1, or rebuild libtensorflow from the tensorflow wheel for CUDA 12 (see the README, "GPU training")';
  }
  if (searched.length > 0) msg += `. Searched: ${searched.join(', ')}`;
  return msg;
}

/**
 * Parses `ldconfig -p` output into library file names (`libcuda.so.1`).
 * Lines look like `\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1`.
 */
export function parseLdconfigCache(output: string): string[] {
  const out: string[] = [];
  for (const line of output.split('\n')) {
    const m = /^\s+(\S+)\s+\(([^)]*)\)\s+=>/.exec(line);
    // Only 64-bit entries: a 32-bit libcuda does not help a 64-bit Node.
    if (m && (process.arch !== 'x64' || /x86-64/.test(m[2]))) out.push(m[1]);
  }
  return out;
}

/**
 * Directories the dynamic loader searches for libtensorflow's dlopen calls, as
 * far as a file listing can tell: LD_LIBRARY_PATH (the documented route for the
 * pip wheels), then the usual driver and toolkit locations. The ldconfig cache
 * is added by {@link checkCudaEnvironment}.
 */
export function cudaSearchDirs(libraryPath: string | undefined): string[] {
  const dirs: string[] = [];
  for (const d of (libraryPath ?? '').split(':')) if (d) dirs.push(d);
  dirs.push('/usr/local/nvidia/lib64', '/usr/local/cuda/lib64', '/usr/lib/x86_64-linux-gnu', '/usr/lib64', '/usr/lib');
  return [...new Set(dirs)];
}

function safeReaddir(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}

/** Where tfjs-node-gpu keeps libtensorflow (`deps/lib`), if installed. */
export function tfjsNodeGpuLibDir(): string | undefined {
  try {
    return path.join(path.dirname(require.resolve('@tensorflow/tfjs-node-gpu/package.json')), 'deps', 'lib');
  } catch {
    return undefined;
  }
}

/**
 * Which requirement applies to the libtensorflow in `libDir`: the wheel route
 * leaves `libtensorflow_cc.so.2` there (libtensorflow.so.2.9.1 is a link to it),
 * Google's archive does not. `tfCuda` (`SRPO_TF_CUDA=11|12`, read by the caller's config) overrides.
 */
export function cudaRequirementFor(libDir: string | undefined, tfCuda?: '11' | '12'): CudaRequirement {
  if (tfCuda === '11') return CUDA11_TF291;
  if (tfCuda === '12') return CUDA12_TF_WHEEL;
  if (libDir && existsSync(path.join(libDir, 'libtensorflow_cc.so.2'))) return CUDA12_TF_WHEEL;
  return CUDA11_TF291;
}

/**
 * The check against this machine: files in the search directories (`libraryPath`, the process's
 * `LD_LIBRARY_PATH` as its config read it, then the usual ones) plus the ldconfig cache.
 */
export function checkCudaEnvironment(settings: { tfCuda?: '11' | '12'; libraryPath?: string } = {}): CudaCheck {
  const libDir = tfjsNodeGpuLibDir();
  const requirement = cudaRequirementFor(libDir, settings.tfCuda);
  const searched = cudaSearchDirs(settings.libraryPath);
  const present: string[] = [];
  for (const d of searched) present.push(...safeReaddir(d));
  // ldconfig lives in /sbin, which is not on an ordinary user's PATH.
  for (const bin of ['ldconfig', '/sbin/ldconfig', '/usr/sbin/ldconfig']) {
    try {
      present.push(...parseLdconfigCache(execFileSync(bin, ['-p'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'], timeout: 5000 })));
      searched.push('ldconfig cache');
      break;
    } catch {
      // Not there (musl, minimal containers): try the next, else the directories above are all we know.
    }
  }
  return checkCudaLibraries(requirement, present, searched);
}
