/**
 * Learner benchmark: SRPO update throughput (tokens/s) of @srpo/policy on the
 * native TensorFlow backend, next to the same model and step in PyTorch CPU
 * (when `python3 -c "import torch"` works) and, for reference, tfjs's pure-JS
 * `cpu` backend on fewer steps.
 *
 *   npm run build && node dist/bench/learner/run.js [--rounds 3] [--steps 30] [--warmup 5] [--cpu-steps 3] [--threads N] [--no-torch] [--json]
 *
 * Each side runs in its own process with the same intra-op thread count
 * (TF_NUM_INTRAOP_THREADS / torch.set_num_threads / OMP_NUM_THREADS). A
 * "token" is one model input position of a member (context' + response − 1),
 * forward + backward + optimizer included; both sides count the same way.
 */
import { spawnSync } from 'node:child_process';
import { promises as fs, existsSync, mkdtempSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

interface SideResult {
  side: string;
  steps: number;
  seconds: number;
  msPerStep: number;
  tokensPerStep: number;
  tokensPerSecond: number;
  firstLoss: number;
  firstGradNorm: number;
  [key: string]: unknown;
}

interface Args {
  /** Native and PyTorch sides alternate this many times; median and best of each are reported (the machine may be shared). */
  rounds: number;
  steps: number;
  warmup: number;
  cpuSteps: number;
  threads: number;
  torch: boolean;
  json: boolean;
  worker?: 'tensorflow' | 'cpu';
  jobDir?: string;
}

function parseArgs(argv: string[]): Args {
  const a: Args = { rounds: 3, steps: 30, warmup: 5, cpuSteps: 3, threads: os.availableParallelism(), torch: true, json: false };
  for (let i = 0; i < argv.length; i++) {
    const k = argv[i];
    const next = (): string => {
      const v = argv[++i];
      if (v === undefined) throw new Error(`${k} needs a value`);
      return v;
    };
    const int = (): number => {
      const v = Number(next());
      if (!Number.isInteger(v) || v < 1) throw new Error(`${k} must be a positive integer`);
      return v;
    };
    if (k === '--steps') a.steps = int();
    else if (k === '--rounds') a.rounds = int();
    else if (k === '--warmup') a.warmup = int();
    else if (k === '--cpu-steps') a.cpuSteps = int();
    else if (k === '--threads') a.threads = int();
    else if (k === '--no-torch') a.torch = false;
    else if (k === '--json') a.json = true;
    else if (k === '--worker') a.worker = next() as Args['worker'];
    else if (k === '--job-dir') a.jobDir = next();
    else throw new Error(`unknown argument ${k}`);
  }
  return a;
}

/** Worker: one backend, one process. Prints one JSON line on stdout. */
async function worker(args: Args): Promise<void> {
  const { initTfBackend } = await import('@srpo/core');
  const backend = args.worker as 'tensorflow' | 'cpu';
  await initTfBackend(backend);
  const tf = await import('@tensorflow/tfjs');
  const { SrpoTrainer, saveCheckpoint } = await import('@srpo/policy');
  const { buildWorkload, REFERENCE } = await import('./workload');
  const { policy, sets } = await buildWorkload();
  if (args.jobDir) {
    // Hand the exact initial weights and batch to the PyTorch side.
    await saveCheckpoint(path.join(args.jobDir, 'init'), policy);
    await fs.writeFile(
      path.join(args.jobDir, 'job.json'),
      JSON.stringify({
        checkpoint: path.join(args.jobDir, 'init'),
        sets,
        lr: REFERENCE.lr,
        maxGradNorm: REFERENCE.maxGradNorm,
        objective: REFERENCE.objective,
        threads: args.threads,
        steps: args.steps,
        warmup: args.warmup,
      }),
    );
  }
  const trainer = new SrpoTrainer(policy, {
    objective: REFERENCE.objective,
    schedule: { kind: 'constant', lr: REFERENCE.lr },
    maxGradNorm: REFERENCE.maxGradNorm,
  });
  const first = await trainer.update(sets);
  for (let i = 1; i < args.warmup; i++) await trainer.update(sets);
  const tensorsBefore = tf.memory().numTensors;
  const t0 = process.hrtime.bigint();
  let tokens = 0;
  for (let i = 0; i < args.steps; i++) tokens = (await trainer.update(sets)).tokens;
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  const result: SideResult = {
    side: `tfjs-${backend}`,
    steps: args.steps,
    seconds,
    msPerStep: (1000 * seconds) / args.steps,
    tokensPerStep: tokens,
    tokensPerSecond: (tokens * args.steps) / seconds,
    firstLoss: first.loss,
    firstGradNorm: first.gradNorm,
    tensorsLeaked: tf.memory().numTensors - tensorsBefore,
  };
  process.stdout.write(JSON.stringify(result) + '\n');
  trainer.dispose();
  policy.dispose();
}

function lastJsonLine(stdout: string): SideResult {
  const line = stdout.trim().split('\n').filter((l) => l.startsWith('{')).pop();
  if (!line) throw new Error(`no result line in output:\n${stdout}`);
  return JSON.parse(line) as SideResult;
}

function runNodeWorker(args: Args, backend: 'tensorflow' | 'cpu', steps: number, warmup: number, jobDir?: string): SideResult {
  const argv = [...process.execArgv, __filename, '--worker', backend, '--steps', String(steps), '--warmup', String(warmup), '--threads', String(args.threads)];
  if (jobDir) argv.push('--job-dir', jobDir);
  const r = spawnSync(process.execPath, argv, { env: threadEnv(args.threads), encoding: 'utf8', maxBuffer: 64 << 20 });
  if (r.status !== 0) throw new Error(`${backend} worker failed (${r.status}):\n${r.stderr}`);
  return lastJsonLine(r.stdout);
}

function threadEnv(threads: number): NodeJS.ProcessEnv {
  return {
    ...process.env,
    TF_NUM_INTRAOP_THREADS: String(threads),
    TF_NUM_INTEROP_THREADS: String(threads),
    OMP_NUM_THREADS: String(threads),
    MKL_NUM_THREADS: String(threads),
    TF_CPP_MIN_LOG_LEVEL: '2',
  };
}

function findTorchScript(): string | undefined {
  const candidates = [
    path.join(__dirname, 'torch_learner.py'),
    path.resolve(__dirname, '../../../bench/learner/torch_learner.py'), // dist/bench/learner -> repo
    path.resolve(process.cwd(), 'bench/learner/torch_learner.py'),
  ];
  return candidates.find((c) => existsSync(c));
}

function torchAvailable(): string | undefined {
  const r = spawnSync('python3', ['-c', 'import torch; print(torch.__version__)'], { encoding: 'utf8' });
  return r.status === 0 ? r.stdout.trim() : undefined;
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  if (args.worker) return worker(args);

  const jobDir = mkdtempSync(path.join(os.tmpdir(), 'srpo-bench-'));
  const natives: SideResult[] = [];
  const torches: SideResult[] = [];
  const notes: string[] = [];
  try {
    const script = findTorchScript();
    const torchVersion = args.torch ? torchAvailable() : undefined;
    if (!args.torch) notes.push('PyTorch side skipped (--no-torch)');
    else if (!torchVersion) notes.push('PyTorch side skipped: python3 cannot import torch');
    else if (!script) notes.push('PyTorch side skipped: bench/learner/torch_learner.py not found');
    const withTorch = args.torch && torchVersion !== undefined && script !== undefined;
    // Alternate the sides so that load from other processes hits both alike.
    for (let round = 0; round < args.rounds; round++) {
      natives.push(runNodeWorker(args, 'tensorflow', args.steps, args.warmup, jobDir));
      if (withTorch) {
        const r = spawnSync('python3', [script as string, '--job', path.join(jobDir, 'job.json')], {
          env: threadEnv(args.threads),
          encoding: 'utf8',
          maxBuffer: 64 << 20,
        });
        if (r.status !== 0) throw new Error(`PyTorch side failed (${r.status}):\n${r.stderr}`);
        torches.push(lastJsonLine(r.stdout));
      }
    }
    const cpu = runNodeWorker(args, 'cpu', args.cpuSteps, 1);
    const native = median(natives);
    const torch = torches.length > 0 ? median(torches) : undefined;
    const summary = [native, ...(torch ? [torch] : []), cpu];

    if (args.json) {
      process.stdout.write(JSON.stringify({ threads: args.threads, rounds: { native: natives, torch: torches }, summary, notes }, null, 2) + '\n');
      return;
    }
    const best = (rs: SideResult[]): SideResult => [...rs].sort((a, b) => b.tokensPerSecond - a.tokensPerSecond)[0];
    const row = (label: string, r: SideResult): string =>
      `${label.padEnd(24)}${String(r.steps).padStart(6)}${r.msPerStep.toFixed(1).padStart(10)}${Math.round(r.tokensPerSecond).toString().padStart(11)}${r.firstLoss.toFixed(7).padStart(14)}`;
    const lines = [
      `learner benchmark: vocab 64, width 128, 2 layers, 4 heads, sequence 64, 32 sequences/step, sets of 1-4; ${args.threads} threads; ${os.cpus()[0]?.model ?? 'cpu'}`,
      `rounds: ${args.rounds} x ${args.steps} timed steps (after ${args.warmup} warm-up) per side, sides alternating`,
      `${'side'.padEnd(24)}${'steps'.padStart(6)}${'ms/step'.padStart(10)}${'tokens/s'.padStart(11)}${'first loss'.padStart(14)}`,
      row('tfjs-tensorflow median', native),
      row('tfjs-tensorflow best', best(natives)),
      ...(torch ? [row('pytorch median', torch), row('pytorch best', best(torches))] : []),
      row('tfjs-cpu', cpu),
      `per-round tokens/s: tfjs-tensorflow ${natives.map((r) => Math.round(r.tokensPerSecond)).join(', ')}` +
        (torches.length > 0 ? `; pytorch ${torches.map((r) => Math.round(r.tokensPerSecond)).join(', ')}` : ''),
    ];
    if (torch) {
      lines.push(
        `tfjs-tensorflow / pytorch tokens/s: median ${(native.tokensPerSecond / torch.tokensPerSecond).toFixed(2)}x, ` +
          `best ${(best(natives).tokensPerSecond / best(torches).tokensPerSecond).toFixed(2)}x (goal >= 0.90x)`,
      );
      lines.push(`first-step loss difference |tfjs - torch|: ${Math.abs(native.firstLoss - torch.firstLoss).toExponential(2)} (same weights and batch)`);
    }
    lines.push(...notes);
    process.stdout.write(lines.join('\n') + '\n');
  } finally {
    await fs.rm(jobDir, { recursive: true, force: true });
  }
}

/** The result with the median tokens/s. */
function median(results: SideResult[]): SideResult {
  const sorted = [...results].sort((a, b) => a.tokensPerSecond - b.tokensPerSecond);
  return sorted[(sorted.length - 1) >> 1];
}

main().catch((e: unknown) => {
  process.stderr.write(`${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
  process.exit(1);
});
