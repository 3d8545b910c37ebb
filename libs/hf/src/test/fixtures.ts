// Spec helpers of @srpo/hf: the few of @srpo/policy's (libs/policy/src/test/fixtures.ts) its
// specs use, copied rather than imported, so that no library reaches into another's test folder.
import * as tf from '@tensorflow/tfjs';
import { initTfBackend } from '@srpo/core';
import { loadSrpoKernels, srpoKernelAvailable } from '@srpo/kernels';
import { tokenLogProbs, SeededRng, type ActiveSet, type Policy } from '@srpo/policy';

/** Every spec runs on native TensorFlow (tfjs-node). */
export async function nativeBackend(): Promise<void> {
  const info = await initTfBackend('tensorflow');
  if (info.name !== 'tensorflow') throw new Error(`expected the tensorflow backend, got ${info.name}`);
}

/**
 * Deterministic active sets for `policy`: random tokens, behaviour log-probs
 * equal to the policy's own (ratio 1 at the start), alternating-sign advantages.
 */
export async function makeSets(policy: Policy, seed: number, numSets = 3, opts: { ctx?: number; resp?: number } = {}): Promise<ActiveSet[]> {
  const rng = new SeededRng(seed);
  const v = policy.model.config.vocabSize;
  const sets: ActiveSet[] = [];
  for (let s = 0; s < numSets; s++) {
    const k = 1 + (s % 3);
    const members = Array.from({ length: k }, (_, j) => ({
      outputId: `o${s}-${j}`,
      contextTokens: Array.from({ length: opts.ctx ?? 3 + rng.nextInt(3) }, () => rng.nextInt(v)),
      responseTokens: Array.from({ length: opts.resp ?? 2 + rng.nextInt(4) }, () => rng.nextInt(v)),
      logpOld: [] as number[],
    }));
    const { logProbs, mask } = tokenLogProbs(policy.model, members);
    const rows = (await logProbs.array()) as number[][];
    tf.dispose([logProbs, mask]);
    members.forEach((m, j) => (m.logpOld = rows[j].slice(0, m.responseTokens.length)));
    sets.push({ setId: `set${s}`, advantage: s % 2 === 0 ? 1 : -1, members });
  }
  return sets;
}

/** Seeded values in [−a, a) from a small LCG: spec inputs that do not come from the code under test. */
export function seededValues(n: number, seed: number, a = 1): Float32Array {
  let s = seed >>> 0;
  return Float32Array.from({ length: n }, () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return (s / 2 ** 32) * 2 * a - a;
  });
}

/** SRPO_REQUIRE_NATIVE_KERNELS=1 (CI): a spec of the native kernels must run, and fail without them. */
export const nativeKernelsRequired = process.env.SRPO_REQUIRE_NATIVE_KERNELS === '1';

/**
 * Whether the native kernels `ops` are loaded, for a spec file to decide when it loads whether
 * its kernel tests run (`describe`) or are reported skipped (`describe.skip`), never passed
 * without running. The addon registers into tfjs-node's libtensorflow (and routes tfjs-node's
 * Add), so tfjs-node loads first, as {@link nativeBackend} would load it.
 */
export function nativeKernelsLoaded(ops: readonly string[]): boolean {
  require('@tensorflow/tfjs-node');
  return ops.every((op) => srpoKernelAvailable(op));
}

/** Why the native kernels are not loaded (the addon's own reason), for a failure message. */
export function nativeKernelsMissingReason(ops: readonly string[]): string {
  const status = loadSrpoKernels();
  return status.reason ?? `the addon (kernel set ${String(status.version)}) lacks ${ops.filter((op) => !srpoKernelAvailable(op)).join(', ')}`;
}
