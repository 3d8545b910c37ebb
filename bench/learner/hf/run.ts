/**
 * HF-architecture learner benchmark: SRPO update throughput (tokens/s) and peak memory of
 * @srpo/policy's LlamaModel on native TensorFlow (tfjs-node), next to PyTorch running the
 * transformers model of the same directory on the same batch.
 *
 *   npm run build:bench && node dist-bench/bench/learner/hf/run.js [--preset qwen2|tiny] [--rounds 3]
 *       [--steps 10] [--warmup 2] [--threads N] [--arch qwen2|llama] [--vocab N] [--hidden N]
 *       [--layers N] [--heads N] [--kv-heads N] [--intermediate N] [--seq-len N] [--context N]
 *       [--sequences N] [--untied|--tied] [--lr X] [--torch-attn eager,sdpa] [--no-torch]
 *       [--profile-ops N] [--keep-model DIR] [--out FILE] [--json] [--torch-all-positions] [--isa native|avx2]
 *
 * Default (`--preset qwen2`) is the issue's configuration: Qwen2-like, hidden 512, 8 layers,
 * 8 heads with 2 KV heads, SwiGLU 1408, vocabulary 32 000, T 256, 8 sequences per step.
 * `--preset tiny` (hidden 64, 2 layers, vocab 512, T 32) is for smoke runs.
 *
 * One random model is generated per run (transformers in Python, seeded; written with
 * save_pretrained as float32 safetensors). The tfjs side loads that directory with the
 * project's loader, PyTorch with AutoModelForCausalLM.from_pretrained; both train on the
 * identical batch (token ids, behaviour log-probs, advantages) with the same SRPO step
 * (objective defaults of @srpo/srpo, Adam, global-norm clip 1.0). The first-step losses
 * must agree: that checks that both sides compute the same thing.
 *
 * Each side runs in its own process with the same intra-op thread count
 * (TF_NUM_INTRAOP_THREADS / torch.set_num_threads / OMP_NUM_THREADS), and the sides
 * alternate `--rounds` times (median and best reported). A "token" is one model input
 * position (context' + response − 1 per member), forward + backward + optimizer included,
 * counted the same way on every side. Memory: the process's peak RSS (getrusage maxrss,
 * both sides), its RSS after loading, and for tfjs the peak of tf.memory().numBytes over one
 * profiled step (tensor bytes the engine tracks, at kernel boundaries).
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync, mkdirSync, cpSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { best, findBenchScript, lastJsonLine, median, threadEnv } from '../bench-common';
import { ISA_CAPS, isaEnv, type IsaCap } from '../kernels';
import { cpuDescription } from '../../cpu';

type Attn = 'eager' | 'sdpa';

interface SideResult {
  side: string;
  steps: number;
  seconds: number;
  msPerStep: number;
  firstStepMs: number;
  tokensPerStep: number;
  tokensPerSecond: number;
  firstLoss: number;
  firstGradNorm: number;
  lastLoss: number;
  lastGradNorm: number;
  /** Share of sets clipped (low, high or dual) at the first and the last timed step. */
  firstClipFraction?: number;
  lastClipFraction?: number;
  rssAfterLoadBytes: number;
  peakRssBytes: number;
  /** tfjs: peak of tf.memory().numBytes during one profiled step. */
  tfPeakBytes?: number;
  /** tfjs: tf.memory().numBytes between steps (weights, Adam moments, caches). */
  tfSteadyBytes?: number;
  device?: string;
  kernels?: string;
  threads?: number;
  opProfile?: { name: string; ms: number; count: number }[];
  [key: string]: unknown;
}

interface Args {
  rounds: number;
  steps: number;
  warmup: number;
  threads: number;
  preset: string;
  overrides: Record<string, number | boolean | string>;
  torch: boolean;
  torchAttn: Attn[];
  profileOps: number;
  /** Group the op profile by op and input shapes instead of by op alone. */
  profileShapes: boolean;
  /** The PyTorch side projects every position to logits (transformers' default) instead of response positions only (TRL's logits_to_keep). */
  torchAllPositions: boolean;
  /** `avx2` caps both sides' dispatched kernels (oneDNN, ATen, MKL) at AVX2: an emulation of an AVX2-only CPU. */
  isa: IsaCap;
  json: boolean;
  out?: string;
  keepModel?: string;
  worker?: 'prepare' | 'tfjs';
  jobDir?: string;
}

const INT_FLAGS: Record<string, string> = {
  '--vocab': 'vocabSize',
  '--hidden': 'hiddenSize',
  '--layers': 'numLayers',
  '--heads': 'numHeads',
  '--kv-heads': 'numKvHeads',
  '--intermediate': 'intermediateSize',
  '--seq-len': 'seqLen',
  '--context': 'contextTokens',
  '--sequences': 'sequences',
  '--max-set-size': 'maxSetSize',
  '--model-seed': 'modelSeed',
  '--data-seed': 'dataSeed',
};

function parseArgs(argv: string[]): Args {
  const a: Args = {
    rounds: 3,
    steps: 10,
    warmup: 2,
    threads: os.availableParallelism(),
    preset: 'qwen2',
    overrides: {},
    torch: true,
    torchAttn: ['eager', 'sdpa'],
    profileOps: 0,
    profileShapes: false,
    torchAllPositions: false,
    isa: 'native',
    json: false,
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
    if (k === '--steps') a.steps = int();
    else if (k === '--rounds') a.rounds = int();
    else if (k === '--warmup') a.warmup = int();
    else if (k === '--threads') a.threads = int();
    else if (k === '--preset') a.preset = next();
    else if (k in INT_FLAGS) a.overrides[INT_FLAGS[k]] = int();
    else if (k === '--arch') {
      const v = next();
      if (v !== 'qwen2' && v !== 'llama') throw new Error(`--arch must be qwen2 or llama, got ${v}`);
      a.overrides.arch = v;
    } else if (k === '--untied') a.overrides.tied = false;
    else if (k === '--tied') a.overrides.tied = true;
    else if (k === '--lr') {
      const v = Number(next());
      if (!(v > 0)) throw new Error('--lr must be > 0');
      a.overrides.lr = v;
    } else if (k === '--no-torch') a.torch = false;
    else if (k === '--torch-attn') {
      const v = next().split(',').filter(Boolean);
      if (v.length === 0 || v.some((x) => x !== 'eager' && x !== 'sdpa')) throw new Error('--torch-attn takes eager, sdpa or eager,sdpa');
      a.torchAttn = v as Attn[];
    } else if (k === '--profile-ops') a.profileOps = int(0);
    else if (k === '--profile-shapes') a.profileShapes = true;
    else if (k === '--torch-all-positions') a.torchAllPositions = true;
    else if (k === '--isa') {
      const v = next();
      if (!(ISA_CAPS as readonly string[]).includes(v)) throw new Error(`--isa takes ${ISA_CAPS.join(' or ')}`);
      a.isa = v as IsaCap;
    } else if (k === '--json') a.json = true;
    else if (k === '--out') a.out = next();
    else if (k === '--keep-model') a.keepModel = next();
    else if (k === '--worker') {
      const v = next();
      if (v !== 'prepare' && v !== 'tfjs') throw new Error(`--worker must be prepare or tfjs`);
      a.worker = v;
    } else if (k === '--job-dir') a.jobDir = next();
    else throw new Error(`unknown argument ${k}`);
  }
  return a;
}

async function workload(args: Args) {
  const { PRESETS, validateWorkload } = await import('./workload');
  const base = PRESETS[args.preset];
  if (!base) throw new Error(`--preset must be one of ${Object.keys(PRESETS).join(', ')}, got ${args.preset}`);
  const w = { ...base, ...args.overrides };
  // A shorter sequence than the preset's keeps the preset's context share (1/4).
  if (args.overrides.seqLen !== undefined && args.overrides.contextTokens === undefined) w.contextTokens = Math.max(1, Math.round(w.seqLen / 4));
  validateWorkload(w);
  return w;
}

interface Job {
  modelDir: string;
  sets: unknown[];
  lr: number;
  maxGradNorm: number;
  objective: unknown;
  threads: number;
  steps: number;
  warmup: number;
  weightsFrom: string;
}

/**
 * Prepare worker (its own process, so no side's memory figures include it): makes sure the
 * model directory has weights (Python made them, or the tfjs fallback), builds the batch
 * from the model and writes job.json.
 */
async function prepare(args: Args): Promise<void> {
  const { initTfBackend } = await import('@srpo/core');
  await initTfBackend('tensorflow');
  const { buildSets, loadModelDir, objectiveConfig, writeRandomWeights, writeJson } = await import('./workload');
  const w = await workload(args);
  const jobDir = args.jobDir as string;
  const modelDir = path.join(jobDir, 'model');
  let weightsFrom = 'transformers (Python)';
  if (!existsSync(path.join(modelDir, 'model.safetensors'))) {
    writeRandomWeights(modelDir, w.modelSeed);
    weightsFrom = 'tfjs fallback (no transformers)';
  }
  const model = loadModelDir(modelDir);
  const sets = await buildSets(model, w);
  model.dispose();
  const job: Job = {
    modelDir,
    sets,
    lr: w.lr,
    maxGradNorm: w.maxGradNorm,
    objective: objectiveConfig(),
    threads: args.threads,
    steps: args.steps,
    warmup: args.warmup,
    weightsFrom,
  };
  writeJson(path.join(jobDir, 'job.json'), job);
}

/** tfjs worker: one process, native TensorFlow. Prints one JSON line on stdout. */
async function tfjsWorker(args: Args): Promise<void> {
  const { initTfBackend } = await import('@srpo/core');
  const info = await initTfBackend('tensorflow');
  const tf = await import('@tensorflow/tfjs');
  const { Policy, SrpoTrainer } = await import('@srpo/policy');
  const { backendLabel, configureNativeKernels, loadSrpoKernels, nativeKernelsActive, srpoMatMulRouted } = await import('@srpo/kernels');
  const { loadModelDir } = await import('./workload');
  const job = JSON.parse(readFileSync(path.join(args.jobDir as string, 'job.json'), 'utf8')) as Job & { sets: import('@srpo/policy').ActiveSet[] };
  const model = loadModelDir(job.modelDir);
  const policy = new Policy('bench', model);
  const trainer = new SrpoTrainer(policy, { objective: job.objective as never, schedule: { kind: 'constant', lr: job.lr }, maxGradNorm: job.maxGradNorm });
  const sets = job.sets;
  const rssAfterLoad = process.memoryUsage().rss;
  const tFirst = process.hrtime.bigint();
  const first = await trainer.update(sets);
  const firstStepMs = Number(process.hrtime.bigint() - tFirst) / 1e6;
  for (let i = 1; i < args.warmup; i++) await trainer.update(sets);
  const tensorsBefore = tf.memory().numTensors;
  const steady = tf.memory().numBytes;
  let tokens = 0;
  let last = first;
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < args.steps; i++) {
    last = await trainer.update(sets);
    tokens = last.tokens;
  }
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  // Process-lifetime RSS high-water mark (KiB), read before the profiled step below.
  const peakRss = process.resourceUsage().maxRSS * 1024;
  const tensorsLeaked = tf.memory().numTensors - tensorsBefore;
  // One more step under tf.profile: the peak of the engine's tensor bytes and per-kernel times.
  tf.env().set('CHECK_COMPUTATION_FOR_ERRORS', false);
  const prof = await tf.profile(async () => {
    await trainer.update(sets);
  });
  let opProfile: SideResult['opProfile'];
  if (args.profileOps > 0) {
    const byName = new Map<string, { ms: number; count: number }>();
    for (const k of prof.kernels) {
      const key = args.profileShapes ? `${k.name} ${JSON.stringify(k.inputShapes)}` : k.name;
      const e = byName.get(key) ?? { ms: 0, count: 0 };
      e.ms += Number(k.kernelTimeMs) || 0;
      e.count += 1;
      byName.set(key, e);
    }
    opProfile = [...byName.entries()]
      .map(([name, e]) => ({ name, ...e }))
      .sort((x, y) => y.ms - x.ms)
      .slice(0, args.profileOps);
  }
  const kernelsCfg = configureNativeKernels({});
  const onednn =
    process.env.TF_ENABLE_ONEDNN_OPTS === undefined
      ? 'on (default)'
      : process.env.TF_ENABLE_ONEDNN_OPTS === '0'
        ? 'off (TF_ENABLE_ONEDNN_OPTS=0)'
        : `TF_ENABLE_ONEDNN_OPTS=${process.env.TF_ENABLE_ONEDNN_OPTS}`;
  const result: SideResult = {
    side: 'tfjs-tensorflow',
    steps: args.steps,
    seconds,
    msPerStep: (1000 * seconds) / args.steps,
    firstStepMs,
    tokensPerStep: tokens,
    tokensPerSecond: (tokens * args.steps) / seconds,
    firstLoss: first.loss,
    firstGradNorm: first.gradNorm,
    lastLoss: last.loss,
    lastGradNorm: last.gradNorm,
    lastClipFraction: clipFraction(last.diagnostics),
    firstClipFraction: clipFraction(first.diagnostics),
    lastRatioRange: [last.diagnostics['ratio/min'], last.diagnostics['ratio/max']],
    rssAfterLoadBytes: rssAfterLoad,
    peakRssBytes: peakRss,
    tfPeakBytes: prof.peakBytes,
    tfPeakAt: peakAt(prof.kernels),
    tfSteadyBytes: steady,
    device: info.nativeVersion ? `libtensorflow ${info.nativeVersion} (${info.package})` : info.package,
    kernels:
      `oneDNN ${onednn}; ${backendLabel({ name: 'tensorflow' })}; ` +
      `project native kernels ${nativeKernelsActive() ? `on (2-D products via ${srpoMatMulRouted() ? `SrpoMatMul, ${loadSrpoKernels().gemmIsa === 'avx512' ? 'AVX-512' : 'AVX2'} micro-kernel` : kernelsCfg.matMulOp})` : 'off'}`,
    threads: args.threads,
    parameters: model.parameterCount(),
    kernelsPerStep: prof.kernels.length,
    tensorsLeaked,
    opProfile,
  };
  process.stdout.write(JSON.stringify(result) + '\n');
  trainer.dispose();
  policy.dispose();
}

/** Where in the step the engine's tensor bytes peaked: kernel index of all, and its name. */
function peakAt(kernels: { name: string; totalBytesSnapshot: number }[]): string {
  let at = 0;
  kernels.forEach((k, i) => {
    if (k.totalBytesSnapshot > kernels[at].totalBytesSnapshot) at = i;
  });
  return kernels.length ? `kernel ${at + 1} of ${kernels.length} (${kernels[at].name})` : '-';
}

/** Share of sets whose clip (low, high or dual) is active: where it is 1 the loss is flat and the gradient 0. */
function clipFraction(d: Record<string, number>): number {
  return (d['losses/clip_frac_low'] ?? 0) + (d['losses/clip_frac_high'] ?? 0) + (d['losses/clip_frac_dual'] ?? 0);
}

function workerArgv(args: Args): string[] {
  const out = [
    '--preset',
    args.preset,
    '--steps',
    String(args.steps),
    '--warmup',
    String(args.warmup),
    '--threads',
    String(args.threads),
    '--profile-ops',
    String(args.profileOps),
  ];
  if (args.profileShapes) out.push('--profile-shapes');
  const flagOf = Object.fromEntries(Object.entries(INT_FLAGS).map(([f, k]) => [k, f]));
  for (const [k, v] of Object.entries(args.overrides)) {
    if (k in flagOf) out.push(flagOf[k], String(v));
    else if (k === 'arch') out.push('--arch', String(v));
    else if (k === 'tied') out.push(v ? '--tied' : '--untied');
    else if (k === 'lr') out.push('--lr', String(v));
  }
  return out;
}

/** Both sides' environment: the same threads, and the `--isa` cap. */
function sideEnv(args: Args): NodeJS.ProcessEnv {
  return { ...threadEnv(args.threads), ...isaEnv(args.isa) };
}

function runNode(args: Args, role: 'prepare' | 'tfjs', jobDir: string): SideResult | undefined {
  const argv = [...process.execArgv, __filename, '--worker', role, '--job-dir', jobDir, ...workerArgv(args)];
  const r = spawnSync(process.execPath, argv, { env: sideEnv(args), encoding: 'utf8', maxBuffer: 64 << 20 });
  if (r.status !== 0) {
    const err = (r.stderr ?? '').split('\n').filter((l) => l && !/artificially reduced/.test(l));
    throw new Error(`${role} worker failed (${r.status ?? r.signal}):\n${err.slice(-20).join('\n')}`);
  }
  return role === 'tfjs' ? lastJsonLine<SideResult>(r.stdout) : undefined;
}

function transformersAvailable(): string | undefined {
  const r = spawnSync('python3', ['-c', 'import torch, transformers; print(torch.__version__, transformers.__version__)'], {
    encoding: 'utf8',
    env: { ...process.env, TRANSFORMERS_VERBOSITY: 'error' },
  });
  return r.status === 0 ? r.stdout.trim().split('\n').pop() : undefined;
}

interface Side {
  label: string;
  results: SideResult[];
  skipped?: string;
}

const fmtShare = (x: number | undefined): string => (x === undefined ? '-' : `${(100 * x).toFixed(0)}%`);
const mb = (b: number | undefined): string => (b === undefined ? '-' : (b / 2 ** 20).toFixed(0));

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  if (args.worker === 'prepare') return prepare(args);
  if (args.worker === 'tfjs') return tfjsWorker(args);
  const { describeWorkload, hfConfigJson, writeJson } = await import('./workload');
  const w = await workload(args);
  const cpu = cpuDescription();
  const jobDir = mkdtempSync(path.join(os.tmpdir(), 'srpo-hf-bench-'));
  const modelDir = path.join(jobDir, 'model');
  const tfjs: Side = { label: 'tfjs-tensorflow', results: [] };
  const torchSides: Side[] = args.torchAttn.map((a) => ({ label: `pytorch-${a}`, results: [] }));
  const notes: string[] = [];
  try {
    const script = findBenchScript(__dirname, 'torch_hf_learner.py', 1);
    const versions = transformersAvailable();
    let torchSkip: string | undefined;
    if (!args.torch) torchSkip = 'skipped (--no-torch)';
    else if (!versions) torchSkip = 'skipped: python3 cannot import torch and transformers';
    else if (!script) torchSkip = 'skipped: bench/learner/torch_hf_learner.py not found';
    for (const s of torchSides) s.skipped = torchSkip;

    // The model: config.json from the workload, weights from transformers when it is there.
    mkdirSync(modelDir, { recursive: true });
    writeJson(path.join(modelDir, 'config.json'), hfConfigJson(w));
    if (versions && script) {
      const r = spawnSync('python3', [script, '--make-model', modelDir, '--seed', String(w.modelSeed)], {
        env: sideEnv(args),
        encoding: 'utf8',
        maxBuffer: 16 << 20,
      });
      if (r.status !== 0) throw new Error(`making the model failed (${r.status}):\n${r.stderr}`);
    }
    runNode(args, 'prepare', jobDir);
    const job = JSON.parse(readFileSync(path.join(jobDir, 'job.json'), 'utf8')) as Job;
    if (args.keepModel) cpSync(modelDir, args.keepModel, { recursive: true });

    // Alternate the sides so that load from other processes hits them alike.
    for (let round = 0; round < args.rounds; round++) {
      tfjs.results.push(runNode(args, 'tfjs', jobDir) as SideResult);
      for (const s of torchSides) {
        if (s.skipped) continue;
        const attn = s.label.slice('pytorch-'.length);
        const r = spawnSync(
          'python3',
          [
            script as string,
            '--job',
            path.join(jobDir, 'job.json'),
            '--attn',
            attn,
            '--profile-ops',
            String(args.profileOps),
            ...(args.profileShapes ? ['--profile-shapes'] : []),
            ...(args.torchAllPositions ? ['--all-positions'] : []),
          ],
          {
            env: sideEnv(args),
            encoding: 'utf8',
            maxBuffer: 64 << 20,
          },
        );
        if (r.status !== 0) throw new Error(`PyTorch side (${attn}) failed (${r.status}):\n${r.stderr}`);
        s.results.push(lastJsonLine<SideResult>(r.stdout));
      }
    }
    const sides = [tfjs, ...torchSides];
    for (const s of sides) if (s.skipped) notes.push(`${s.label}: ${s.skipped}`);
    notes.push(
      `logits: tfjs projects the response positions only; PyTorch ${args.torchAllPositions ? 'every position (--torch-all-positions)' : 'from the first response position on (logits_to_keep, as TRL)'}`,
    );
    const ran = sides.filter((s) => s.results.length > 0);

    const header = `HF learner benchmark, ${describeWorkload(w)}; weights from ${job.weightsFrom}`;
    const machine = `CPU: ${cpu.model}; vector extensions: ${cpu.vector} [${cpu.flags.join(' ')}]; ${os.availableParallelism()} logical CPUs; threads per side: ${args.threads} (TF_NUM_INTRAOP_THREADS, TF_NUM_INTEROP_THREADS, OMP_NUM_THREADS, MKL_NUM_THREADS, torch.set_num_threads)${args.isa === 'avx2' ? '; dispatched kernels capped at AVX2 (--isa avx2: an emulation, not an AVX2 machine)' : ''}`;
    const ratios: Record<
      string,
      { median: number; best: number; firstLossDiff: number; firstGradNormRelDiff: number; lastLossDiff: number; lastGradNormRelDiff: number }
    > = {};
    const rel = (a: number, b: number): number => Math.abs(a - b) / Math.max(Math.abs(b), 1e-30);
    const ref = tfjs.results.length ? median(tfjs.results) : undefined;
    for (const other of ran.filter((s) => s !== tfjs)) {
      if (!ref) break;
      const o = median(other.results);
      ratios[other.label] = {
        median: ref.tokensPerSecond / o.tokensPerSecond,
        best: best(tfjs.results).tokensPerSecond / best(other.results).tokensPerSecond,
        firstLossDiff: Math.abs(ref.firstLoss - o.firstLoss),
        firstGradNormRelDiff: rel(ref.firstGradNorm, o.firstGradNorm),
        lastLossDiff: Math.abs(ref.lastLoss - o.lastLoss),
        lastGradNormRelDiff: rel(ref.lastGradNorm, o.lastGradNorm),
      };
    }
    const summary = {
      header,
      machine,
      cpu,
      preset: args.preset,
      workload: w,
      threads: args.threads,
      rounds: args.rounds,
      steps: args.steps,
      warmup: args.warmup,
      date: new Date().toISOString(),
      loadAverage: os.loadavg(),
      sides: ran.map((s) => ({ label: s.label, median: median(s.results), best: best(s.results), rounds: s.results })),
      ratios,
      notes,
    };
    if (args.out) writeFileSync(args.out, JSON.stringify(summary, null, 2) + '\n');
    if (args.json) {
      process.stdout.write(JSON.stringify(summary, null, 2) + '\n');
      return;
    }
    const cols = `${'side'.padEnd(24)}${'steps'.padStart(6)}${'ms/step'.padStart(10)}${'tokens/s'.padStart(10)}${'1st step ms'.padStart(12)}${'first loss'.padStart(15)}${'last loss'.padStart(15)}${'RSS load MB'.padStart(12)}${'peak RSS MB'.padStart(12)}${'tf peak MB'.padStart(11)}`;
    const row = (label: string, r: SideResult): string =>
      `${label.padEnd(24)}${String(r.steps).padStart(6)}${r.msPerStep.toFixed(1).padStart(10)}${Math.round(r.tokensPerSecond).toString().padStart(10)}${r.firstStepMs.toFixed(0).padStart(12)}` +
      `${r.firstLoss.toFixed(9).padStart(15)}${r.lastLoss.toFixed(9).padStart(15)}${mb(r.rssAfterLoadBytes).padStart(12)}${mb(r.peakRssBytes).padStart(12)}${mb(r.tfPeakBytes).padStart(11)}`;
    const lines = [
      header,
      machine,
      `rounds: ${args.rounds} x ${args.steps} timed steps (after ${args.warmup} warm-up, the first included) per side, sides alternating; load average ${os
        .loadavg()
        .map((x) => x.toFixed(2))
        .join(' ')}`,
      cols,
    ];
    for (const s of ran) {
      if (s.results.length > 1) lines.push(row(`${s.label} median`, median(s.results)), row(`${s.label} best`, best(s.results)));
      else lines.push(row(s.label, s.results[0]));
    }
    for (const s of ran) {
      const r = s.results[0];
      lines.push(`${s.label}: ${r.device ?? ''}; ${r.kernels ?? ''}`);
    }
    if (ref)
      lines.push(
        `tfjs first step: gradient norm ${ref.firstGradNorm.toPrecision(7)}, sets clipped ${fmtShare(ref.firstClipFraction)}; last timed step: gradient norm ${ref.lastGradNorm.toPrecision(7)}, sets clipped ${fmtShare(ref.lastClipFraction)}, set ratios ${(ref.lastRatioRange as number[]).map((x) => x.toFixed(4)).join('..')}`,
      );
    if (ref?.tfSteadyBytes !== undefined)
      lines.push(
        `tfjs tensor bytes between steps (weights + Adam moments): ${mb(ref.tfSteadyBytes)} MB, peak ${mb(ref.tfPeakBytes)} MB at ${String(ref.tfPeakAt)}; ${String(ref.kernelsPerStep)} tfjs kernels per step; tensors leaked per ${args.steps} steps: ${String(ref.tensorsLeaked)}`,
      );
    lines.push(`per-round tokens/s: ${ran.map((s) => `${s.label} ${s.results.map((r) => Math.round(r.tokensPerSecond)).join(', ')}`).join('; ')}`);
    for (const [label, q] of Object.entries(ratios)) {
      const like = label === 'pytorch-eager' ? ' (like for like: same attention arithmetic)' : label === 'pytorch-sdpa' ? ' (PyTorch fused attention)' : '';
      lines.push(`tfjs-tensorflow / ${label} tokens/s: median ${q.median.toFixed(2)}x, best ${q.best.toFixed(2)}x${like}`);
      lines.push(
        `  |tfjs - ${label}| (same weights and batch): first-step loss ${q.firstLossDiff.toExponential(2)}, first-step gradient norm ${q.firstGradNormRelDiff.toExponential(2)} relative; ` +
          `after ${args.warmup + args.steps - 1} updates: loss ${q.lastLossDiff.toExponential(2)}, gradient norm ${q.lastGradNormRelDiff.toExponential(2)} relative`,
      );
    }
    if (args.profileOps > 0) {
      for (const s of ran) {
        const ops = s.results[s.results.length - 1].opProfile;
        if (!ops) continue;
        const total = ops.reduce((a, o) => a + o.ms, 0);
        lines.push(`${s.label}: top ${ops.length} ops of one profiled step (ms, calls; ${total.toFixed(1)} ms listed):`);
        for (const o of ops) lines.push(`  ${o.name.padEnd(args.profileShapes ? 90 : 40)}${o.ms.toFixed(2).padStart(10)}${String(o.count).padStart(7)}`);
      }
    }
    lines.push(...notes);
    process.stdout.write(lines.join('\n') + '\n');
  } finally {
    rmSync(jobDir, { recursive: true, force: true });
  }
}

main().catch((e: unknown) => {
  process.stderr.write(`${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
  process.exit(1);
});
