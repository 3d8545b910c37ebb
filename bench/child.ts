/**
 * The benchmarks' job runner: each job runs in a child process of the same script
 * (`--worker JSON`), with one TensorFlow thread, so `jobs` of them share the cores without
 * their thread pools fighting; a job's answer is the last line of its stdout.
 */
import { spawn, spawnSync } from 'node:child_process';
import * as path from 'node:path';

/** Runs `script --worker JSON(task)` and parses the JSON line it prints last. */
export function runChild<T>(script: string, task: unknown, label: string): Promise<T> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [script, '--worker', JSON.stringify(task)], {
      env: { ...process.env, TF_NUM_INTRAOP_THREADS: '1', TF_NUM_INTEROP_THREADS: '1', SRPO_LOG_LEVEL: 'warn' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    child.once('exit', (code) => {
      const line = out.trim().split('\n').pop() ?? '';
      if (code !== 0 || !line.startsWith('{')) reject(new Error(`${label} failed (exit ${code}): ${err.slice(-2000)}`));
      else resolve(JSON.parse(line) as T);
    });
  });
}

/** Runs `run` over `items`, `jobs` at a time; results in input order. */
export async function pool<T, R>(items: readonly T[], jobs: number, run: (item: T) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array<R>(items.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(jobs, items.length) }, async () => {
      while (next < items.length) {
        const i = next++;
        out[i] = await run(items[i]);
      }
    }),
  );
  return out;
}

/** One command-line flag of a bench runner; `value`, `int` and `number` consume its value. */
export interface Flag {
  name: string;
  value(): string;
  /** An integer ≥ `min` (default 1). */
  int(min?: number): number;
  /** A number in (lo, hi]. */
  number(lo: number, hi: number): number;
}

/** The flags of `argv` in order, each reading its own value: `for (const f of flags(argv)) if (f.name === '--seeds') a.seeds = f.int();`. */
export function* flags(argv: readonly string[]): Generator<Flag> {
  for (let i = 0; i < argv.length; i++) {
    const name = argv[i];
    const value = (): string => {
      const v = argv[++i];
      if (v === undefined) throw new Error(`${name} needs a value`);
      return v;
    };
    yield {
      name,
      value,
      int: (min = 1) => {
        const v = value();
        const n = Number(v);
        if (!Number.isInteger(n) || n < min) throw new Error(`${name} must be an integer >= ${min}, got ${v}`);
        return n;
      },
      number: (lo, hi) => {
        const v = value();
        const n = Number(v);
        if (!(n > lo && n <= hi)) throw new Error(`${name} must be in (${lo}, ${hi}], got ${v}`);
        return n;
      },
    };
  }
}

/**
 * Draws a study's charts from its results JSON into docs/studies with
 * bench/studies/plot.py; says so, and goes on, when Python or matplotlib is missing.
 */
export function drawCharts(study: 'srpo' | 'progpo' | 'agentbrew', resultsFile: string): void {
  const plot = spawnSync('python3', [path.join('bench', 'studies', 'plot.py'), study, resultsFile, path.join('docs', 'studies')], { encoding: 'utf8' });
  if (plot.status !== 0)
    process.stderr.write(
      `charts not drawn (python3 bench/studies/plot.py needs matplotlib: pip install matplotlib): ${(plot.stderr ?? plot.error?.message ?? '').slice(-500)}\n`,
    );
  else process.stderr.write(plot.stdout);
}
