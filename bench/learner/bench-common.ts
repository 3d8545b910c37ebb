import { existsSync } from 'node:fs';
import * as path from 'node:path';

/** The two learner benches (bench/learner/run.ts and bench/learner/hf/run.ts): what they share. */

/** One side's result in a round; only the throughput matters for ranking. */
export interface Ranked {
  tokensPerSecond: number;
}

/** The result with the median tokens/s. */
export function median<T extends Ranked>(results: readonly T[]): T {
  const sorted = [...results].sort((a, b) => a.tokensPerSecond - b.tokensPerSecond);
  return sorted[(sorted.length - 1) >> 1];
}

export function best<T extends Ranked>(results: readonly T[]): T {
  return [...results].sort((a, b) => b.tokensPerSecond - a.tokensPerSecond)[0];
}

/** The same thread count for both sides: TensorFlow's pools and PyTorch's OpenMP/MKL. */
export function threadEnv(threads: number): NodeJS.ProcessEnv {
  return {
    ...process.env,
    TF_NUM_INTRAOP_THREADS: String(threads),
    TF_NUM_INTEROP_THREADS: String(threads),
    OMP_NUM_THREADS: String(threads),
    MKL_NUM_THREADS: String(threads),
    TF_CPP_MIN_LOG_LEVEL: '2',
  };
}

/** A worker prints logs, then its result as the last JSON line. */
export function lastJsonLine<T>(stdout: string): T {
  const line = stdout
    .trim()
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .pop();
  if (!line) throw new Error(`no result line in output:\n${stdout}`);
  return JSON.parse(line) as T;
}

/**
 * A Python script of bench/learner (`name`, e.g. `torch_learner.py`), found from the compiled
 * bench (dist-bench/bench/learner[/hf]) or the repository root; `depth` is how deep the caller sits
 * below bench/learner (0 for run.ts, 1 for hf/run.ts).
 */
export function findBenchScript(dirname: string, name: string, depth: number): string | undefined {
  const up = (n: number): string => path.join(...Array<string>(n).fill('..'));
  const candidates = [
    path.resolve(dirname, up(depth), name),
    path.resolve(dirname, up(depth + 3), 'bench', 'learner', name), // dist-bench/bench/learner[/hf] -> repo
    path.resolve(process.cwd(), 'bench', 'learner', name),
  ];
  return candidates.find((c) => existsSync(c));
}
