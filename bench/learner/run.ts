/**
 * Learner benchmark: SRPO update throughput (tokens/s) of @srpo/policy on one
 * tfjs backend, next to the same model and step on the others.
 *
 *   npm run build:bench && node dist-bench/bench/learner/run.js [--backend tensorflow|webgpu|tensorflow-gpu]
 *       [--config reference|large] [--rounds 3] [--steps 30] [--warmup 40] [--cpu-steps 3]
 *       [--threads N] [--sequences N] [--no-native] [--no-torch] [--torch-device cpu|cuda]
 *       [--webgpu-layout on|off] [--isa native|avx2] [--profile-ops] [--no-fused] [--out FILE] [--json]
 *
 * `--backend tensorflow` (default) is the CPU comparison of RESULTS.md: native
 * TensorFlow against PyTorch CPU and, for reference, tfjs's pure-JS `cpu`.
 * A GPU backend (`webgpu`, `tensorflow-gpu`) runs against native TensorFlow
 * on the CPU (`--no-native` where tfjs-node is not installed) and PyTorch
 * (`--torch-device cuda` puts PyTorch on the GPU too). `--config large` is the
 * GPU-sized model of docs/gpu.md.
 *
 * Each side runs in its own process with the same intra-op thread count
 * (TF_NUM_INTRAOP_THREADS / torch.set_num_threads / OMP_NUM_THREADS) and the
 * same initial weights and batch (the first side writes them, the others read
 * them). A "token" is one model input position of a member (context' +
 * response − 1), forward + backward + optimizer included; every side counts
 * the same way.
 *
 * The output names the CPU (model and vector extensions), the thread settings and the
 * kernels each side ran: oneDNN's MatMul implementation inside libtensorflow (from a probe
 * run under ONEDNN_VERBOSE) and PyTorch's ATen/MKL dispatch. `--isa avx2` caps both sides'
 * dispatched kernels at AVX2 (see kernels.ts for what that does and does not reproduce).
 * `--profile-ops` adds each side's ops by time per step (tfjs: timed native calls;
 * PyTorch: torch.profiler self CPU), which slows both sides a little. `--no-fused` keeps the
 * project's fused TensorFlow kernels (libs/kernels/native) off, for A/B runs.
 *
 * Every side of every round runs `--warmup` untimed steps first (40 by default, since
 * 2026-12-03; 5 before). A learner trains for hours, so the figure is its steady state, and
 * tfjs reaches it late: V8 compiles the step's JavaScript function by function as each gets hot,
 * and on the Intel Xeon (2 vCPUs) steps 5–35 took 1.05–1.10x the time of steps 35–70 in the same
 * process, where PyTorch's eager step is flat after its first few (docs/benchmarks.md, #21).
 * `--warmup 5` gives the earlier, warm-up-inclusive figure.
 */
import { spawnSync } from 'node:child_process';
import { promises as fs, existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { cpuDescription } from '../cpu';
import { best, findBenchScript, lastJsonLine, median, threadEnv } from './bench-common';
import { describeThreads, ISA_CAPS, isaEnv, matMulProbe, probeTfKernels, type IsaCap } from './kernels';
import type { OpTime } from './op-profile';

type Backend = 'tensorflow' | 'webgpu' | 'tensorflow-gpu' | 'cpu';
const BACKENDS: readonly Backend[] = ['tensorflow', 'webgpu', 'tensorflow-gpu', 'cpu'];

interface SideResult {
  side: string;
  steps: number;
  seconds: number;
  msPerStep: number;
  tokensPerStep: number;
  tokensPerSecond: number;
  firstLoss: number;
  firstGradNorm: number;
  /** Where it ran: the WebGPU adapter, libtensorflow's version, PyTorch's device. */
  device?: string;
  /** PyTorch: its ATen dispatch, BLAS and threads. */
  kernels?: string;
  /** True when the 2-D products ran the project's `SrpoMatMul`, not TensorFlow's `MatMul`. */
  srpoMatMul?: boolean;
  /** `--profile-ops`: the ops with the most time per step. */
  opProfile?: OpTime[] | null;
  /** tfjs `--profile-ops`: step time outside native op calls (JavaScript, tape, GC). */
  outsideOpsMs?: number;
  /** tfjs `--profile-ops`: native op calls per step. */
  opsPerStep?: number;
  [key: string]: unknown;
}

interface Args {
  /** Sides alternate this many times; median and best of each are reported (the machine may be shared). */
  rounds: number;
  steps: number;
  warmup: number;
  /** Steps of the pure-JS `cpu` side (0 skips it; the default skips it for `large`). */
  cpuSteps: number;
  threads: number;
  torch: boolean;
  torchDevice: 'cpu' | 'cuda';
  native: boolean;
  json: boolean;
  backend: Backend;
  config: string;
  sequences?: number;
  /** `off`: the plain composite ops on webgpu too (configureWebGpuKernels), for A/B runs. */
  webgpuLayout: 'on' | 'off';
  out?: string;
  isa: IsaCap;
  profileOps: boolean;
  /** False: the project's fused TensorFlow kernels stay off (configureSrpoKernels). */
  fused: boolean;
  /** Internal: run one product with this TensorFlow op and exit, for the oneDNN probe. */
  probe?: 'MatMul' | 'BatchMatMulV2';
  worker?: Backend;
  jobDir?: string;
}

function parseArgs(argv: string[]): Args {
  const a: Args = {
    rounds: 3,
    steps: 30,
    warmup: 40,
    cpuSteps: -1,
    threads: os.availableParallelism(),
    torch: true,
    torchDevice: 'cpu',
    native: true,
    json: false,
    backend: 'tensorflow',
    config: 'reference',
    webgpuLayout: 'on',
    isa: 'native',
    profileOps: false,
    fused: true,
  };
  for (let i = 0; i < argv.length; i++) {
    const k = argv[i];
    const next = (): string => {
      const v = argv[++i];
      if (v === undefined) throw new Error(`${k} needs a value`);
      return v;
    };
    const int = (min = 1): number => {
      const v = Number(next());
      if (!Number.isInteger(v) || v < min) throw new Error(`${k} must be an integer >= ${min}`);
      return v;
    };
    const oneOf = <T extends string>(values: readonly T[]): T => {
      const v = next();
      if (!values.includes(v as T)) throw new Error(`${k} must be one of ${values.join(', ')}, got ${v}`);
      return v as T;
    };
    if (k === '--steps') a.steps = int();
    else if (k === '--rounds') a.rounds = int();
    else if (k === '--warmup') a.warmup = int();
    else if (k === '--cpu-steps') a.cpuSteps = int(0);
    else if (k === '--threads') a.threads = int();
    else if (k === '--sequences') a.sequences = int();
    else if (k === '--no-torch') a.torch = false;
    else if (k === '--torch-device') a.torchDevice = oneOf(['cpu', 'cuda'] as const);
    else if (k === '--no-native') a.native = false;
    else if (k === '--json') a.json = true;
    else if (k === '--backend') a.backend = oneOf(BACKENDS);
    else if (k === '--config') a.config = oneOf(['reference', 'large'] as const);
    else if (k === '--out') a.out = next();
    else if (k === '--webgpu-layout') a.webgpuLayout = oneOf(['on', 'off'] as const);
    else if (k === '--isa') a.isa = oneOf(ISA_CAPS);
    else if (k === '--profile-ops') a.profileOps = true;
    else if (k === '--no-fused') a.fused = false;
    else if (k === '--probe') a.probe = oneOf(['MatMul', 'BatchMatMulV2'] as const);
    else if (k === '--worker') a.worker = oneOf(BACKENDS);
    else if (k === '--job-dir') a.jobDir = next();
    else throw new Error(`unknown argument ${k}`);
  }
  if (a.cpuSteps < 0) a.cpuSteps = a.config === 'reference' && a.backend === 'tensorflow' ? 3 : 0;
  return a;
}

/**
 * Worker: one backend, one process. Prints one JSON line on stdout. The first
 * worker of a run writes the initial weights and the batch to the job dir; later
 * ones read that batch, so every side trains on identical data.
 */
async function worker(args: Args): Promise<void> {
  const { EnvReader, initTfBackend, releaseTfBackend, describeAdapter, tfBackendSettings } = await import('@srpo/core');
  const backend = args.worker as Backend;
  // SRPO_DAWN_NODE (the GPU bundle, bench/learner/gpu) and SRPO_WEBGPU_FLAGS (tuning runs) reach the backend as in the apps.
  const info = await initTfBackend(backend, tfBackendSettings(new EnvReader(process.env)));
  const tf = await import('@tensorflow/tfjs');
  const { SrpoTrainer, saveCheckpoint } = await import('@srpo/policy');
  const { configureSrpoKernels, loadSrpoKernels, srpoMatMulRouted } = await import('@srpo/kernels');
  const { configureWebGpuKernels } = await import('@srpo/kernels/tuning');
  configureWebGpuKernels({ enabled: args.webgpuLayout === 'on' });
  configureSrpoKernels({ enabled: args.fused });
  const { buildWorkload, WORKLOADS } = await import('./workload');
  const w = WORKLOADS[args.config];
  const jobFile = args.jobDir ? path.join(args.jobDir, 'job.json') : undefined;
  const built = await buildWorkload(w, args.sequences);
  const { policy } = built;
  let sets = built.sets;
  if (jobFile && existsSync(jobFile)) {
    sets = (JSON.parse(readFileSync(jobFile, 'utf8')) as { sets: typeof sets }).sets;
  } else if (args.jobDir && jobFile) {
    // Hand the exact initial weights and batch to the other sides.
    await saveCheckpoint(path.join(args.jobDir, 'init'), policy);
    writeFileSync(
      jobFile,
      JSON.stringify({
        checkpoint: path.join(args.jobDir, 'init'),
        sets,
        lr: w.lr,
        maxGradNorm: w.maxGradNorm,
        objective: w.objective,
        threads: args.threads,
        steps: args.steps,
        warmup: args.warmup,
        device: args.torchDevice,
      }),
    );
  }
  const trainer = new SrpoTrainer(policy, { objective: w.objective, schedule: { kind: 'constant', lr: w.lr }, maxGradNorm: w.maxGradNorm });
  const first = await trainer.update(sets);
  for (let i = 1; i < args.warmup; i++) await trainer.update(sets);
  const { OpProfiler } = await import('./op-profile');
  const profiler = args.profileOps && backend === 'tensorflow' ? new OpProfiler(tf.backend()) : undefined;
  const tensorsBefore = tf.memory().numTensors;
  profiler?.start();
  const t0 = process.hrtime.bigint();
  let tokens = 0;
  // Each update ends with one host read (loss, diagnostics, gradient norm), so the GPU's queue is drained per step.
  for (let i = 0; i < args.steps; i++) tokens = (await trainer.update(sets)).tokens;
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  profiler?.stop();
  const profile = profiler?.report(args.steps, (1000 * seconds) / args.steps);
  profiler?.dispose();
  const result: SideResult = {
    side: `tfjs-${backend}`,
    webgpuLayout: backend === 'webgpu' ? args.webgpuLayout : undefined,
    steps: args.steps,
    seconds,
    msPerStep: (1000 * seconds) / args.steps,
    tokensPerStep: tokens,
    tokensPerSecond: (tokens * args.steps) / seconds,
    firstLoss: first.loss,
    firstGradNorm: first.gradNorm,
    device: info.adapter ? describeAdapter(info.adapter) : info.nativeVersion ? `libtensorflow ${info.nativeVersion}` : info.package,
    tensorsLeaked: tf.memory().numTensors - tensorsBefore,
    opProfile: profile?.ops,
    outsideOpsMs: profile?.outsideOpsMs,
    opsPerStep: profile?.opsPerStep,
    kernels: backend !== 'tensorflow' ? undefined : !args.fused ? 'fused kernels off (--no-fused)' : fusedKernels(loadSrpoKernels(), srpoMatMulRouted()),
    srpoMatMul: backend === 'tensorflow' && args.fused && srpoMatMulRouted(),
  };
  process.stdout.write(JSON.stringify(result) + '\n');
  trainer.dispose();
  policy.dispose();
  // Dawn keeps the process alive until its device is released.
  releaseTfBackend();
}

function runNodeWorker(args: Args, backend: Backend, steps: number, warmup: number, jobDir?: string): SideResult {
  const argv = [
    ...process.execArgv,
    __filename,
    '--worker',
    backend,
    ...(args.profileOps ? ['--profile-ops'] : []),
    ...(args.fused ? [] : ['--no-fused']),
    '--config',
    args.config,
    '--steps',
    String(steps),
    '--warmup',
    String(warmup),
    '--threads',
    String(args.threads),
    '--torch-device',
    args.torchDevice,
    '--webgpu-layout',
    args.webgpuLayout,
  ];
  if (args.sequences) argv.push('--sequences', String(args.sequences));
  if (jobDir) argv.push('--job-dir', jobDir);
  const r = spawnSync(process.execPath, argv, { env: sideEnv(args), encoding: 'utf8', maxBuffer: 64 << 20 });
  if (r.status !== 0) {
    const err = (r.stderr ?? '').split('\n').filter((l) => l && !/artificially reduced/.test(l));
    throw new Error(`${backend} worker failed (${r.status ?? r.signal}):\n${err.slice(-15).join('\n')}`);
  }
  return lastJsonLine<SideResult>(r.stdout);
}

function fusedKernels(
  s: {
    loaded: boolean;
    version?: number;
    ops: readonly string[];
    reason?: string;
    onednnAvx512?: boolean;
    gemmIsa?: string;
    elementwiseIsa?: string;
    cpuVendor?: string;
  },
  srpoMatMul: boolean,
): string {
  if (!s.loaded) return `no fused kernels (${s.reason})`;
  const products = srpoMatMul
    ? `2-D products through SrpoMatMul, ${s.gemmIsa === 'avx512' ? 'AVX-512' : 'AVX2'} micro-kernel${s.onednnAvx512 ? '' : ' (oneDNN has no AVX-512 here)'}, not TensorFlow's MatMul`
    : `2-D products through TensorFlow's MatMul${s.onednnAvx512 ? ' (oneDNN with AVX-512)' : ''}`;
  return `fused kernels srpo-kernels.${s.version}: ${s.ops.join(', ')}; ${products}; GELU's ${s.elementwiseIsa === 'avx512' ? 'AVX-512' : 'AVX2'} build`;
}

/** Both sides' environment: the same threads, and the `--isa` cap. */
function sideEnv(args: Args): NodeJS.ProcessEnv {
  return { ...threadEnv(args.threads), ...isaEnv(args.isa) };
}

function torchAvailable(device: 'cpu' | 'cuda'): string | undefined {
  const check = device === 'cuda' ? 'import torch; assert torch.cuda.is_available(); print(torch.__version__)' : 'import torch; print(torch.__version__)';
  const r = spawnSync('python3', ['-c', check], { encoding: 'utf8' });
  return r.status === 0 ? r.stdout.trim() : undefined;
}

interface Side {
  label: string;
  results: SideResult[];
  /** Why the side did not run, when it did not. */
  skipped?: string;
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  if (args.probe) return matMulProbe(args.probe);
  if (args.worker) return worker(args);
  const { WORKLOADS, describeWorkload } = await import('./workload');
  const w = WORKLOADS[args.config];

  const jobDir = mkdtempSync(path.join(os.tmpdir(), 'srpo-bench-'));
  const primary: Side = { label: `tfjs-${args.backend}`, results: [] };
  const native: Side = { label: 'tfjs-tensorflow', results: [] };
  const torch: Side = { label: `pytorch-${args.torchDevice}`, results: [] };
  const gpuRun = args.backend !== 'tensorflow';
  const sides: Side[] = gpuRun ? [primary, native, torch] : [primary, torch];
  const notes: string[] = [];
  try {
    const script = findBenchScript(__dirname, 'torch_learner.py', 0);
    const torchVersion = args.torch ? torchAvailable(args.torchDevice) : undefined;
    if (!args.torch) torch.skipped = 'skipped (--no-torch)';
    else if (!torchVersion) torch.skipped = `skipped: python3 cannot import torch${args.torchDevice === 'cuda' ? ' with CUDA' : ''}`;
    else if (!script) torch.skipped = 'skipped: bench/learner/torch_learner.py not found';
    if (gpuRun && !args.native) native.skipped = 'skipped (--no-native)';
    // Alternate the sides so that load from other processes hits them alike.
    for (let round = 0; round < args.rounds; round++) {
      primary.results.push(runNodeWorker(args, args.backend, args.steps, args.warmup, jobDir));
      if (gpuRun && !native.skipped) {
        try {
          native.results.push(runNodeWorker(args, 'tensorflow', args.steps, args.warmup, jobDir));
        } catch (e) {
          // A GPU machine may lack libtensorflow (850 MB): report, do not abort the GPU figures.
          native.skipped = `failed: ${(e instanceof Error ? e.message : String(e)).split('\n').slice(0, 3).join(' ')}`;
        }
      }
      if (!torch.skipped) {
        const torchArgs = [script as string, '--job', path.join(jobDir, 'job.json'), ...(args.profileOps ? ['--profile-ops'] : [])];
        const r = spawnSync('python3', torchArgs, { env: sideEnv(args), encoding: 'utf8', maxBuffer: 64 << 20 });
        if (r.status !== 0) throw new Error(`PyTorch side failed (${r.status}):\n${r.stderr}`);
        torch.results.push(lastJsonLine<SideResult>(r.stdout));
      }
    }
    const cpu: Side = { label: 'tfjs-cpu', results: [] };
    if (args.cpuSteps > 0) {
      cpu.results.push(runNodeWorker(args, 'cpu', args.cpuSteps, 1, jobDir));
      sides.push(cpu);
    }
    for (const s of sides) if (s.skipped) notes.push(`${s.label}: ${s.skipped}`);
    const ran = sides.filter((s) => s.results.length > 0);

    const header = `learner benchmark, ${describeWorkload(w)}${args.sequences ? ` (batch overridden: ${args.sequences} sequences)` : ''}; ${args.threads} threads`;
    const c = cpuDescription();
    const cpuLine = `CPU: ${c.model}, ${c.vector} (${c.flags.join(' ')}), ${os.cpus().length} vCPUs${args.isa === 'avx2' ? '; dispatched kernels capped at AVX2 (--isa avx2: an emulation, not an AVX2 machine)' : ''}`;
    const threadsLine = `threads: ${describeThreads(sideEnv(args))}`;
    const fusedLine = native.results[0]?.kernels ?? primary.results[0]?.kernels;
    const matMulUnused = (native.results[0] ?? primary.results[0])?.srpoMatMul === true;
    const kernelsLines = [
      `tfjs-tensorflow kernels: ${probeTfKernels([...process.execArgv, __filename], sideEnv(args), matMulUnused)}${fusedLine ? `; ${fusedLine}` : ''}`,
    ];
    const torchKernels = torch.results[0]?.kernels;
    if (torchKernels) kernelsLines.push(`${torch.label} kernels: ${torchKernels}`);
    const summary = {
      header,
      cpu: cpuLine,
      threadSettings: threadsLine,
      kernels: kernelsLines,
      isa: args.isa,
      config: args.config,
      threads: args.threads,
      date: new Date().toISOString(),
      sides: ran.map((s) => ({ label: s.label, median: median(s.results), best: best(s.results), rounds: s.results })),
      notes,
    };
    if (args.out) writeFileSync(args.out, JSON.stringify(summary, null, 2) + '\n');
    if (args.json) {
      process.stdout.write(JSON.stringify(summary, null, 2) + '\n');
      return;
    }
    const row = (label: string, r: SideResult): string =>
      `${label.padEnd(28)}${String(r.steps).padStart(6)}${r.msPerStep.toFixed(1).padStart(10)}${Math.round(r.tokensPerSecond).toString().padStart(11)}${r.firstLoss.toFixed(7).padStart(14)}`;
    const lines = [
      header,
      cpuLine,
      threadsLine,
      ...kernelsLines,
      `rounds: ${args.rounds} x ${args.steps} timed steps (after ${args.warmup} warm-up) per side, sides alternating`,
      `${'side'.padEnd(28)}${'steps'.padStart(6)}${'ms/step'.padStart(10)}${'tokens/s'.padStart(11)}${'first loss'.padStart(14)}`,
    ];
    for (const s of ran) {
      if (s.results.length > 1) lines.push(row(`${s.label} median`, median(s.results)), row(`${s.label} best`, best(s.results)));
      else lines.push(row(s.label, s.results[0]));
    }
    for (const s of ran) if (s.results[0].device) lines.push(`${s.label} ran on: ${s.results[0].device}`);
    lines.push(`per-round tokens/s: ${ran.map((s) => `${s.label} ${s.results.map((r) => Math.round(r.tokensPerSecond)).join(', ')}`).join('; ')}`);
    const ref = median(primary.results);
    for (const other of ran.filter((s) => s !== primary && s.label !== 'tfjs-cpu')) {
      const o = median(other.results);
      lines.push(
        `${primary.label} / ${other.label} tokens/s: median ${(ref.tokensPerSecond / o.tokensPerSecond).toFixed(2)}x, best ${(best(primary.results).tokensPerSecond / best(other.results).tokensPerSecond).toFixed(2)}x`,
      );
      lines.push(
        `first-step loss difference |${primary.label} - ${other.label}|: ${Math.abs(ref.firstLoss - o.firstLoss).toExponential(2)} (same weights and batch)`,
      );
    }
    if (args.profileOps) lines.push(...opTables(ran));
    lines.push(...notes);
    process.stdout.write(lines.join('\n') + '\n');
  } finally {
    await fs.rm(jobDir, { recursive: true, force: true });
  }
}

/** `--profile-ops`: each side's ops by time per step (median round's profile), side by side. */
function opTables(ran: Side[]): string[] {
  const out: string[] = [];
  for (const s of ran) {
    const r = median(s.results);
    if (!r.opProfile) continue;
    const outside =
      r.outsideOpsMs === undefined ? '' : `; ${Math.round(r.opsPerStep ?? 0)} native ops; outside them (JavaScript, tape, GC): ${r.outsideOpsMs.toFixed(1)} ms`;
    out.push(`${s.label} ops by time per step (step ${r.msPerStep.toFixed(1)} ms${outside}):`);
    for (const o of r.opProfile.slice(0, 15))
      out.push(`  ${o.op.slice(0, 48).padEnd(50)}${o.callsPerStep.toFixed(1).padStart(7)} calls${o.msPerStep.toFixed(2).padStart(9)} ms`);
  }
  return out;
}

main().catch((e: unknown) => {
  process.stderr.write(`${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
  process.exit(1);
});
