import { readFileSync } from 'node:fs';
import * as tf from '@tensorflow/tfjs';
import { initTfBackend } from '@srpo/core';
import { configureSrpoKernels } from '../srpo-kernels';

// Helpers of the kernel specs (and of the policy's specs on the kernels, through
// `@srpo/kernels/testing`): the backend, seeded inputs that do not come from the code under test,
// bit-exact comparison, and the CPU as /proc/cpuinfo describes it.

/** Every spec runs on native TensorFlow (tfjs-node). */
export async function nativeBackend(): Promise<void> {
  const info = await initTfBackend('tensorflow');
  if (info.name !== 'tensorflow') throw new Error(`expected the tensorflow backend, got ${info.name}`);
}

/** Seeded values in [−a, a) from a small LCG: spec inputs that do not come from the code under test. */
export function seededValues(n: number, seed: number, a = 1): Float32Array {
  let s = seed >>> 0;
  return Float32Array.from({ length: n }, () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return (s / 2 ** 32) * 2 * a - a;
  });
}

/** The float32 bits of a tensor, so that NaN, −0 and every last bit compare exactly. */
export async function bits(t: tf.Tensor): Promise<Uint32Array> {
  return new Uint32Array((await t.data<'float32'>()).slice().buffer);
}

/** Index of the first element whose bits differ (or -1): jest's deep equality is slow on 10^5 elements. */
export function firstMismatch(a: Uint32Array, b: Uint32Array): number {
  if (a.length !== b.length) return Math.min(a.length, b.length);
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return i;
  return -1;
}

/**
 * The column sums of x [rows, cols] in SrpoColumnSum's documented cascade (optimizer-kernels.h),
 * written out here in float32: rows in groups of 64 from row 0, each group summed in row order,
 * the group sums added in order into a total that starts at 0.
 */
export function cascadeColumnSums(x: Float32Array, rows: number, cols: number): Float32Array {
  const out = new Float32Array(cols);
  for (let j = 0; j < cols; j++) {
    let total = 0;
    for (let r0 = 0; r0 < rows; r0 += 64) {
      let part = x[r0 * cols + j];
      for (let r = r0 + 1; r < Math.min(rows, r0 + 64); r++) part = Math.fround(part + x[r * cols + j]);
      total = Math.fround(total + part);
    }
    out[j] = total;
  }
  return out;
}

/**
 * This machine's CPU flags and vendor, read from /proc/cpuinfo independently of the addon, and
 * whether ONEDNN_MAX_CPU_ISA (or DNNL_MAX_CPU_ISA) caps the process below AVX-512, as oneDNN and
 * the addon read it.
 */
export function cpuUnderTest(): { flags: ReadonlySet<string>; vendor: string | undefined; capped: boolean } {
  const cpuinfo = readFileSync('/proc/cpuinfo', 'utf8');
  return {
    flags: new Set(/^flags\s*:(.*)$/m.exec(cpuinfo)?.[1].trim().split(/\s+/) ?? []),
    vendor: /^vendor_id\s*:\s*(\S+)/m.exec(cpuinfo)?.[1],
    capped: /^(SSE41|AVX|AVX2|AVX2_.*)$/i.test(process.env.ONEDNN_MAX_CPU_ISA ?? process.env.DNNL_MAX_CPU_ISA ?? ''),
  };
}

/** Runs fn with the fused kernels switched off (the composite paths), then on again. */
export async function composite<T>(fn: () => Promise<T>): Promise<T> {
  configureSrpoKernels({ enabled: false });
  try {
    return await fn();
  } finally {
    configureSrpoKernels({ enabled: true });
  }
}
