/**
 * The learner on the real model: one SRPO update of SmolLM2-135M-Instruct with LoRA and one with
 * full weights, each on native TensorFlow (@srpo/hf's LlamaModel, SrpoTrainer) next to PyTorch +
 * transformers (+ peft for LoRA) on the same batch, with the same loss and hyperparameters, in one run.
 *
 *   npm run build:bench && node dist-bench/bench/learner/hf/smollm2.js [--modes lora,full] [--rounds 3]
 *       [--steps 5] [--warmup 2] [--sequences 8] [--seq-len 256] [--context 64] [--max-set-size 4]
 *       [--lora JSON] [--lr-lora 1e-6] [--lr-full 1e-8] [--torch-attn eager[,sdpa]] [--threads N]
 *       [--model DIR] [--out FILE] [--json]
 *
 * The model is the directory scripts/setup.sh makes (smollm2Dir() of @srpo/testing: SRPO_SMOLLM2_DIR,
 * else $SRPO_CACHE_DIR/models/smollm2-135m-instruct); --model names another Llama-family directory.
 * A prepare process builds the batch (seeded token ids, behaviour log-probs from the model plus
 * noise, seeded advantages; as bench/learner/hf/workload.ts's buildSets) and, for LoRA, the starting
 * adapter (attachLora, peft's init: A uniform, B 0; written with saveLoraAdapter), so both sides start
 * from the same factors. Then per round and mode, each side in its own process with the same thread
 * count (default: the core count): tfjs (`SrpoTrainer.update`) and PyTorch
 * (bench/learner/torch_hf_learner.py; PeftModel.from_pretrained(is_trainable=True) for LoRA).
 * Tokens/s counts model input positions, forward + backward + clip + Adam; peak memory is the
 * process's peak RSS (getrusage maxrss) on both sides. Modes run apart, so one's memory never
 * counts in the other's.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { best, findBenchScript, lastJsonLine, median, threadEnv } from '../bench-common';
import { cpuDescription } from '../../cpu';
import { compareSides, formatReport, TFJS_SIDE, type Mode, type Row, type SideResult } from './smollm2-report';

type Attn = 'eager' | 'sdpa';

interface Args {
  modes: Mode[];
  rounds: number;
  steps: number;
  warmup: number;
  sequences: number;
  seqLen: number;
  context?: number;
  maxSetSize: number;
  lora: string;
  lrLora: number;
  lrFull: number;
  torchAttn: Attn[];
  threads: number;
  model?: string;
  out?: string;
  json: boolean;
  worker?: 'prepare' | 'tfjs';
  job?: string;
}

interface Job {
  modelDir: string;
  loraDir?: string;
  sets: unknown[];
  lr: number;
  maxGradNorm: number;
  objective: unknown;
  threads: number;
  steps: number;
  warmup: number;
}

function parseArgs(argv: string[]): Args {
  const a: Args = {
    modes: ['lora', 'full'],
    rounds: 3,
    steps: 5,
    warmup: 2,
    sequences: 8,
    seqLen: 256,
    maxSetSize: 4,
    lora: '{}',
    lrLora: 1e-6,
    lrFull: 1e-8,
    torchAttn: ['eager'],
    threads: os.availableParallelism(),
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
    const positive = (): number => {
      const v = Number(next());
      if (!(v > 0)) throw new Error(`${k} must be > 0`);
      return v;
    };
    if (k === '--modes') {
      const v = next().split(',').filter(Boolean);
      if (v.length === 0 || v.some((m) => m !== 'lora' && m !== 'full')) throw new Error('--modes takes lora, full or lora,full');
      a.modes = v as Mode[];
    } else if (k === '--rounds') a.rounds = int();
    else if (k === '--steps') a.steps = int();
    else if (k === '--warmup') a.warmup = int();
    else if (k === '--sequences') a.sequences = int();
    else if (k === '--seq-len') a.seqLen = int(2);
    else if (k === '--context') a.context = int();
    else if (k === '--max-set-size') a.maxSetSize = int();
    else if (k === '--lora') a.lora = next();
    else if (k === '--lr-lora') a.lrLora = positive();
    else if (k === '--lr-full') a.lrFull = positive();
    else if (k === '--torch-attn') {
      const v = next().split(',').filter(Boolean);
      if (v.length === 0 || v.some((x) => x !== 'eager' && x !== 'sdpa')) throw new Error('--torch-attn takes eager, sdpa or eager,sdpa');
      a.torchAttn = v as Attn[];
    } else if (k === '--threads') a.threads = int();
    else if (k === '--model') a.model = next();
    else if (k === '--out') a.out = next();
    else if (k === '--json') a.json = true;
    else if (k === '--worker') {
      const v = next();
      if (v !== 'prepare' && v !== 'tfjs') throw new Error('--worker must be prepare or tfjs');
      a.worker = v;
    } else if (k === '--job') a.job = next();
    else throw new Error(`unknown argument ${k}`);
  }
  return a;
}

/** The batch's shape as workload.ts's buildSets reads it, with SmolLM2's dimensions from its config. */
async function workloadOf(args: Args, modelDir: string) {
  const { readHfConfig } = await import('@srpo/hf');
  const { TINY, validateWorkload } = await import('./workload');
  const c = readHfConfig(modelDir);
  const seqLen = Math.min(args.seqLen, c.maxSeqLen);
  const w = {
    ...TINY,
    name: path.basename(modelDir),
    arch: 'llama' as const,
    vocabSize: c.vocabSize,
    hiddenSize: c.hiddenSize,
    numLayers: c.numLayers,
    numHeads: c.numHeads,
    numKvHeads: c.numKvHeads,
    intermediateSize: c.intermediateSize,
    tied: c.tieWordEmbeddings,
    seqLen,
    contextTokens: args.context ?? Math.max(1, Math.round(seqLen / 4)),
    sequences: args.sequences,
    maxSetSize: args.maxSetSize,
  };
  validateWorkload(w);
  return w;
}

/** Prepare worker: the batch from the model, and the LoRA adapter both sides start from. Writes the jobs. */
async function prepare(args: Args): Promise<void> {
  const { initTfBackend } = await import('@srpo/core');
  await initTfBackend('tensorflow');
  const { attachLora, saveLoraAdapter } = await import('@srpo/hf');
  const { buildSets, loadModelDir, objectiveConfig, writeJson } = await import('./workload');
  const { jobDir, modelDir } = JSON.parse(readFileSync(args.job as string, 'utf8')) as { jobDir: string; modelDir: string };
  const w = await workloadOf(args, modelDir);
  const model = loadModelDir(modelDir);
  const sets = await buildSets(model, w);
  const common = { modelDir, sets, maxGradNorm: w.maxGradNorm, objective: objectiveConfig(), threads: args.threads, steps: args.steps, warmup: args.warmup };
  writeJson(path.join(jobDir, 'full.json'), { ...common, lr: args.lrFull } satisfies Job);
  // peft's initialisation (B = 0): the adapted model is the base until the first update, as a learner starts.
  attachLora(model, JSON.parse(args.lora) as object, { seed: 1 });
  const loraDir = path.join(jobDir, 'adapter');
  await saveLoraAdapter(model, loraDir, { baseModelNameOrPath: modelDir });
  writeJson(path.join(jobDir, 'lora.json'), { ...common, lr: args.lrLora, loraDir } satisfies Job);
  model.dispose();
}

/** tfjs worker: one update mode in its own process, native TensorFlow. Prints one JSON line. */
async function tfjsWorker(args: Args): Promise<void> {
  const { initTfBackend } = await import('@srpo/core');
  const info = await initTfBackend('tensorflow');
  const { Policy, SrpoTrainer } = await import('@srpo/policy');
  const { loadLoraAdapter } = await import('@srpo/hf');
  const { nativeKernelsActive } = await import('@srpo/kernels');
  const { loadModelDir } = await import('./workload');
  const job = JSON.parse(readFileSync(args.job as string, 'utf8')) as Job & { sets: import('@srpo/policy').ActiveSet[] };
  const model = loadModelDir(job.modelDir);
  if (job.loraDir) loadLoraAdapter(model, job.loraDir);
  const policy = new Policy('bench', model);
  const trainer = new SrpoTrainer(policy, { objective: job.objective as never, schedule: { kind: 'constant', lr: job.lr }, maxGradNorm: job.maxGradNorm });
  const rssAfterLoad = process.memoryUsage().rss;
  const t1 = process.hrtime.bigint();
  const first = await trainer.update(job.sets);
  const firstStepMs = Number(process.hrtime.bigint() - t1) / 1e6;
  for (let i = 1; i < job.warmup; i++) await trainer.update(job.sets);
  let last = first;
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < job.steps; i++) last = await trainer.update(job.sets);
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  const result: SideResult = {
    side: TFJS_SIDE,
    steps: job.steps,
    msPerStep: (1000 * seconds) / job.steps,
    firstStepMs,
    tokensPerStep: last.tokens,
    tokensPerSecond: (last.tokens * job.steps) / seconds,
    firstLoss: first.loss,
    firstGradNorm: first.gradNorm,
    lastLoss: last.loss,
    lastGradNorm: last.gradNorm,
    rssAfterLoadBytes: rssAfterLoad,
    peakRssBytes: process.resourceUsage().maxRSS * 1024,
    parameters: policy.model.trainableVariables().reduce((n, v) => n + v.size, 0),
    device: info.nativeVersion ? `libtensorflow ${info.nativeVersion} (${info.package})` : info.package,
    kernels: `project native kernels ${nativeKernelsActive() ? 'on' : 'off'}`,
    threads: args.threads,
  };
  process.stdout.write(JSON.stringify(result) + '\n');
  trainer.dispose();
  policy.dispose();
}

function runWorker(args: Args, role: 'prepare' | 'tfjs', job: string): SideResult | undefined {
  const argv = [...process.execArgv, __filename, '--worker', role, '--job', job, '--threads', String(args.threads), '--steps', String(args.steps)];
  argv.push(
    '--warmup',
    String(args.warmup),
    '--sequences',
    String(args.sequences),
    '--seq-len',
    String(args.seqLen),
    '--max-set-size',
    String(args.maxSetSize),
  );
  argv.push('--lora', args.lora, '--lr-lora', String(args.lrLora), '--lr-full', String(args.lrFull));
  if (args.context !== undefined) argv.push('--context', String(args.context));
  const r = spawnSync(process.execPath, argv, { env: threadEnv(args.threads), encoding: 'utf8', maxBuffer: 64 << 20 });
  if (r.status !== 0) {
    const err = (r.stderr ?? '').split('\n').filter((l) => l && !/artificially reduced/.test(l));
    throw new Error(`${role} worker failed (${r.status ?? r.signal}):\n${err.slice(-20).join('\n')}`);
  }
  return role === 'tfjs' ? lastJsonLine<SideResult>(r.stdout) : undefined;
}

function runTorch(args: Args, script: string, job: string, attn: Attn): SideResult {
  const r = spawnSync('python3', [script, '--job', job, '--attn', attn], { env: threadEnv(args.threads), encoding: 'utf8', maxBuffer: 64 << 20 });
  if (r.status !== 0) throw new Error(`PyTorch side (${attn}) failed (${r.status ?? r.signal}):\n${(r.stderr ?? '').slice(-3000)}`);
  return lastJsonLine<SideResult>(r.stdout);
}

async function modelDirOf(args: Args): Promise<string> {
  if (args.model) return path.resolve(args.model);
  const { smollm2Dir } = await import('@srpo/testing');
  const found = smollm2Dir();
  if (found.dir === undefined) throw new Error(found.skip);
  return found.dir;
}

/** --lora checked before any process starts, as the learner checks SRPO_LORA. */
async function loraSettings(args: Args, modelDir: string) {
  const { readHfConfig, resolveLoraConfig } = await import('@srpo/hf');
  let raw: unknown;
  try {
    raw = JSON.parse(args.lora);
  } catch (e) {
    throw new Error(`--lora: not valid JSON (${(e as Error).message})`);
  }
  return resolveLoraConfig(raw, readHfConfig(modelDir).architecture, '--lora');
}

/** Every round, each mode, each side in its own process; rounds outermost and sides alternating, so that load from other processes hits every side alike. */
function runRounds(args: Args, script: string, jobDir: string): Row[] {
  const rows: Row[] = [];
  for (const mode of args.modes) {
    rows.push({ mode, side: TFJS_SIDE, results: [] });
    for (const attn of args.torchAttn) rows.push({ mode, side: `pytorch-${attn}${mode === 'lora' ? '+peft' : ''}`, results: [] });
  }
  for (let round = 0; round < args.rounds; round++) {
    for (const mode of args.modes) {
      const job = path.join(jobDir, `${mode}.json`);
      for (const row of rows.filter((r) => r.mode === mode)) {
        const attn = row.side.startsWith('pytorch-') ? (row.side.slice('pytorch-'.length).replace('+peft', '') as Attn) : undefined;
        row.results.push(attn ? runTorch(args, script, job, attn) : (runWorker(args, 'tfjs', job) as SideResult));
      }
    }
  }
  return rows;
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  if (args.worker === 'prepare') return prepare(args);
  if (args.worker === 'tfjs') return tfjsWorker(args);
  const modelDir = await modelDirOf(args);
  const script = findBenchScript(__dirname, 'torch_hf_learner.py', 1);
  if (!script) throw new Error('bench/learner/torch_hf_learner.py not found');
  const w = await workloadOf(args, modelDir);
  const lora = await loraSettings(args, modelDir);
  const jobDir = mkdtempSync(path.join(os.tmpdir(), 'srpo-smollm2-bench-'));
  try {
    const seed = path.join(jobDir, 'paths.json');
    writeFileSync(seed, JSON.stringify({ jobDir, modelDir }));
    runWorker(args, 'prepare', seed);
    const rows = runRounds(args, script, jobDir);
    const ratios = compareSides(rows, args.modes);
    const cpu = cpuDescription();
    const header =
      `SmolLM2 learner benchmark: ${modelDir}; ${w.numLayers} layers, hidden ${w.hiddenSize}, vocab ${w.vocabSize}; ` +
      `T ${w.seqLen} (${w.contextTokens} context + ${w.seqLen + 1 - w.contextTokens} response), ${w.sequences} sequences/step in sets of 1-${w.maxSetSize}; ` +
      `LoRA r ${lora.r}, alpha ${lora.alpha}, ${lora.targetModules.join('/')}, lr ${args.lrLora}; full weights lr ${args.lrFull}; Adam, clip 1.0, @srpo/srpo defaults`;
    const machine = `CPU: ${cpu.model}; ${cpu.vector} [${cpu.flags.join(' ')}]; ${os.availableParallelism()} logical CPUs; threads per side ${args.threads}; load average ${os
      .loadavg()
      .map((x) => x.toFixed(2))
      .join(' ')}`;
    const summary = {
      header,
      machine,
      cpu,
      modelDir,
      workload: w,
      lora,
      args: { ...args, worker: undefined, job: undefined },
      date: new Date().toISOString(),
      rows: rows.map((r) => ({ mode: r.mode, side: r.side, median: median(r.results), best: best(r.results), rounds: r.results })),
      ratios,
    };
    if (args.out) writeFileSync(args.out, JSON.stringify(summary, null, 2) + '\n');
    if (args.json) {
      process.stdout.write(JSON.stringify(summary, null, 2) + '\n');
      return;
    }
    const lines = formatReport(header, machine, args, rows, ratios);
    process.stdout.write(lines.join('\n') + '\n');
  } finally {
    rmSync(jobDir, { recursive: true, force: true });
  }
}

main().catch((e: unknown) => {
  process.stderr.write(`${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
  process.exit(1);
});
