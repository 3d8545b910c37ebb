import { spawn, type ChildProcessWithoutNullStreams } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import * as readline from 'readline';
import * as tf from '@tensorflow/tfjs';
import { initTfBackend, repoRoot } from '@srpo/core';
import { disposePacked, packedLogProbs, packedToTensors, packPairs, SeededRng } from '@srpo/policy';
import {
  attachLora,
  exportHfModel,
  loadHfModel,
  loadLoraAdapter,
  mergeLora,
  peftAdapterConfigJson,
  readSafetensorsHeader,
  readSafetensorsTensor,
  saveLoraAdapter,
  scoreCases,
  type LoraAdapter,
  type LoraConfig,
  type ScoredCase,
} from '@srpo/hf';
import { buildPaddedSetBatch, disposePaddedSetBatch, objectiveLoss, resolveObjectiveConfig, type SetInput } from '@srpo/srpo';

/**
 * LoRA against peft itself (peft 0.21.2, torch, transformers; scripts/reference). Every
 * expected number comes from Python:
 *  (a) adapters made and saved here load in `PeftModel.from_pretrained`, which gives our
 *      per-token log-probs (1e-4), and the merged export gives them in plain transformers;
 *  (b) adapters peft wrote (`save_pretrained`) load here with peft's log-probs, and the
 *      adapter_config.json we would write for them is the one peft wrote, field for field;
 *  (c) the SRPO loss's gradient w.r.t. the LoRA factors equals torch autograd through peft.
 * Adapters are set to seeded non-zero values, so the base model's log-probs (transformers'
 * reference.json) are > 1e-2 away: an adapter that was silently dropped could not pass.
 */
const root = repoRoot();
const FIXTURES = path.join(root, 'libs', 'hf', 'fixtures');
const REF = path.join(root, 'scripts', 'reference');
const INSTALL = 'python3 -m pip install -r scripts/reference/requirements.txt';
const ALL = ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'] as LoraConfig['targetModules'];

/**
 * One Python process runs every reference call of this file (scripts/reference/worker.py runs
 * the same scripts as `python3 scripts/reference/<script>` would): torch, transformers and peft
 * are imported once, not once per call (about 5 s of CPU each, a dozen calls here).
 */
let worker: ChildProcessWithoutNullStreams | undefined;
let replies: AsyncIterator<string>;
let workerStderr = '';

async function python(script: string, args: string[], what: string): Promise<string> {
  if (!worker) throw new Error(`${what}: the reference worker did not start`);
  worker.stdin.write(`${JSON.stringify({ script, args })}\n`);
  const next = await replies.next();
  if (next.done) throw new Error(`${what} failed: the reference worker exited (${INSTALL} installs the reference):\n${workerStderr.slice(-2000)}`);
  const r = JSON.parse(next.value) as { status: number; stdout: string; stderr: string };
  if (r.status !== 0) throw new Error(`${what} failed (${INSTALL} installs the reference):\n${r.stderr.slice(-2000)}`);
  return r.stdout;
}

const tmp = (tag: string): string => fs.mkdtempSync(path.join(os.tmpdir(), `srpo-lora-${tag}-`));

function casesOf(name: string): { cases: { promptTokenIds: number[]; responseTokenIds: number[] }[]; base: number[][] } {
  const ref = JSON.parse(fs.readFileSync(path.join(FIXTURES, name, 'reference.json'), 'utf8')) as { cases: ScoredCase[]; idCases: ScoredCase[] };
  const all = [...ref.cases, ...ref.idCases];
  return { cases: all.map((c) => ({ promptTokenIds: c.promptTokenIds, responseTokenIds: c.responseTokenIds })), base: all.map((c) => c.logprobs) };
}

function writeCases(cases: unknown): string {
  const file = path.join(tmp('cases'), 'cases.json');
  fs.writeFileSync(file, JSON.stringify(cases));
  return file;
}

const peftScores = async (base: string, adapter: string, casesFile: string): Promise<number[][]> =>
  JSON.parse(await python('score_peft.py', [base, adapter, casesFile], 'peft scoring')) as number[][];

/** Largest per-token difference over all cases. */
const worst = (a: number[][], b: number[][]): number => {
  expect(a.map((r) => r.length)).toEqual(b.map((r) => r.length));
  return Math.max(...a.map((r, i) => Math.max(...r.map((v, j) => Math.abs(v - b[i][j])))));
};

/** Every factor (A and B) set to seeded N(0, std²). */
function randomize(adapter: LoraAdapter, seed: number, std: number): void {
  const rng = new SeededRng(seed);
  for (const v of adapter.weights.values()) tf.tidy(() => v.assign(tf.tensor(rng.normalArray(v.size, std), v.shape)));
}

beforeAll(async () => {
  const child = spawn('python3', [path.join(REF, 'worker.py')], { stdio: ['pipe', 'pipe', 'pipe'] });
  worker = child;
  child.stderr.on('data', (d: Buffer) => (workerStderr = (workerStderr + d.toString()).slice(-20_000)));
  child.once('error', (e) => (workerStderr += `\n${e.message}`));
  replies = readline.createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  // Its first line says torch, transformers and peft imported.
  const ready = await replies.next();
  if (ready.done || !(JSON.parse(ready.value) as { ready?: boolean }).ready)
    throw new Error(`the Python reference (torch, transformers, peft) is not importable; ${INSTALL}\n${workerStderr.slice(-2000)}`);
  await initTfBackend('tensorflow');
});

afterAll(async () => {
  const child = worker;
  if (!child) return;
  const exited = new Promise((resolve) => (child.exitCode !== null || child.signalCode !== null ? resolve(null) : child.once('exit', resolve)));
  // End of input ends the worker's loop.
  child.stdin.end();
  await exited;
});

describe.each([
  ['llama', { r: 4, alpha: 12, dropout: 0, targetModules: ALL }],
  ['qwen2', { r: 2, alpha: 5, dropout: 0, targetModules: ['q_proj', 'k_proj', 'v_proj', 'down_proj'] }],
] as [string, LoraConfig][])('(a) %s: an adapter saved here, read by peft', (name, lora) => {
  it("peft gives our log-probs within 1e-4 (and the base model's are > 1e-2 away); the merged export matches in transformers", async () => {
    const base = path.join(FIXTURES, name);
    const { cases, base: baseScores } = casesOf(name);
    const casesFile = writeCases(cases);
    const hf = loadHfModel(base);
    try {
      const adapter = attachLora(hf.model, lora, { seed: 11 });
      randomize(adapter, 12, 0.08);
      const ours = (await scoreCases(hf.model, cases)).map((c) => c.logprobs);
      const dir = tmp(`${name}-ours`);
      await saveLoraAdapter(hf.model, dir, { baseModelNameOrPath: base });
      const theirs = await peftScores(base, dir, casesFile);
      const diff = worst(ours, theirs);
      const moved = worst(theirs, baseScores);
      const merged = path.join(tmp(`${name}-merged`), 'model');
      mergeLora(hf.model);
      await exportHfModel(hf.model, { baseDir: base, outDir: merged, dtype: 'F32' });
      const transformers = JSON.parse(await python('score_hf.py', [merged, casesFile], 'transformers scoring')) as number[][];
      const mergedDiff = worst(transformers, theirs);
      console.log(
        `${name} (a): ours vs peft ${diff.toExponential(2)}, peft vs base ${moved.toExponential(2)}, merged export (transformers) vs peft ${mergedDiff.toExponential(2)}`,
      );
      expect(diff).toBeLessThan(1e-4);
      expect(moved).toBeGreaterThan(1e-2);
      expect(mergedDiff).toBeLessThan(1e-4);
    } finally {
      hf.model.dispose();
    }
  });
});

describe.each([
  ['qwen2', 'q_proj,v_proj,o_proj,up_proj'],
  ['mistral', 'k_proj,gate_proj,down_proj'],
  ['llama', 'q_proj,v_proj'],
])('(b) %s: an adapter peft wrote, read here', (name, targets) => {
  it("loads with peft's log-probs within 1e-4, and our adapter_config.json for it is peft's", async () => {
    const base = path.join(FIXTURES, name);
    const { cases, base: baseScores } = casesOf(name);
    const casesFile = writeCases(cases);
    const dir = tmp(`${name}-peft`);
    await python('make_peft_fixture.py', [base, dir, '4', '8', targets, '21'], 'peft adapter writing');
    const written = JSON.parse(fs.readFileSync(path.join(dir, 'adapter_config.json'), 'utf8')) as Record<string, unknown>;
    const hf = loadHfModel(base);
    try {
      const { adapter, baseModelNameOrPath } = loadLoraAdapter(hf.model, dir);
      expect(adapter.config).toEqual({ r: 4, alpha: 8, dropout: 0, targetModules: ALL.filter((m) => targets.split(',').includes(m)) });
      expect(baseModelNameOrPath).toBe(base);
      // Field for field; peft writes target_modules in Python set order (hash-seeded), we write it sorted.
      const sorted = (c: Record<string, unknown>): Record<string, unknown> => ({ ...c, target_modules: [...(c.target_modules as string[])].sort() });
      expect(sorted(peftAdapterConfigJson(adapter.config, baseModelNameOrPath))).toEqual(sorted(written));
      const ours = (await scoreCases(hf.model, cases)).map((c) => c.logprobs);
      const theirs = await peftScores(base, dir, casesFile);
      const diff = worst(ours, theirs);
      const moved = worst(theirs, baseScores);
      console.log(`${name} (b): ours vs peft ${diff.toExponential(2)}, peft vs base ${moved.toExponential(2)}`);
      expect(diff).toBeLessThan(1e-4);
      expect(moved).toBeGreaterThan(1e-2);
    } finally {
      hf.model.dispose();
    }
  });
});

interface GradCase {
  objective: { objective: 'srpo'; eventReduction: 'sqrt'; clipLow: number; clipHigh: number };
  sets: { setId: string; advantage: number; members: { outputId: string; contextTokens: number[]; responseTokens: number[]; logpOld: number[] }[] }[];
}

describe.each(['llama', 'qwen2'])('(c) %s: SRPO gradients w.r.t. the LoRA factors', (name) => {
  it('equal torch autograd through peft within 1e-4 relative; the loss within 1e-5', async () => {
    const base = path.join(FIXTURES, name);
    const caseFile = path.join(base, 'grad-case.json');
    const ref = JSON.parse(fs.readFileSync(caseFile, 'utf8')) as GradCase;
    const hf = loadHfModel(base);
    try {
      const adapter = attachLora(hf.model, { r: 3, alpha: 6, targetModules: ['q_proj', 'v_proj', 'o_proj', 'up_proj', 'down_proj'] }, { seed: 31 });
      randomize(adapter, 32, 0.03);
      const dir = tmp(`${name}-grad`);
      await saveLoraAdapter(hf.model, dir, { baseModelNameOrPath: base });
      const gradFile = path.join(dir, 'grads.safetensors');
      const torch = JSON.parse(await python('score_peft.py', [base, dir, '--grad', caseFile, gradFile], 'peft gradients')) as { loss: number };
      const header = readSafetensorsHeader(gradFile);

      const members = ref.sets.flatMap((s) => s.members);
      const packed = packPairs(
        members.map((m) => ({ contextTokens: m.contextTokens, responseTokens: m.responseTokens })),
        hf.model,
      );
      const inputs: SetInput[] = ref.sets.map((s) => ({
        setId: s.setId,
        advantage: s.advantage,
        members: s.members.map((m) => ({ outputId: m.outputId, logpOld: m.logpOld, mask: m.responseTokens.map(() => 1) })),
      }));
      const batch = buildPaddedSetBatch(inputs);
      const tensors = packedToTensors(packed);
      const vars = hf.model.trainableVariables();
      const names = hf.model.weightNames();
      const { grads, value } = tf.variableGrads(
        () => objectiveLoss(packedLogProbs(hf.model, tensors, 1), batch, resolveObjectiveConfig(ref.objective)).loss,
        vars,
      );
      const loss = (await value.data())[0];
      // torch reports exactly the LoRA factors as trainable, under peft's saved keys: ours.
      expect(names).toEqual([...header.tensors.keys()].sort());
      let rel = 0;
      for (let i = 0; i < names.length; i++) {
        const got = (await grads[vars[i].name].data()) as Float32Array;
        const want = readSafetensorsTensor(header, names[i]);
        let scale = 0;
        let d = 0;
        for (let j = 0; j < want.length; j++) {
          scale = Math.max(scale, Math.abs(want[j]));
          d = Math.max(d, Math.abs(got[j] - want[j]));
        }
        // Relative to the tensor's largest entry, as in hf-gradients.spec.ts.
        const r = d / Math.max(scale, 1e-12);
        rel = Math.max(rel, r);
        expect({ name: names[i], ok: r < 1e-4, nonzero: scale > 0 }).toEqual({ name: names[i], ok: true, nonzero: true });
      }
      tf.dispose([value, ...Object.values(grads)]);
      disposePacked(tensors);
      disposePaddedSetBatch(batch);
      console.log(
        `${name} (c): loss ${loss} vs torch ${torch.loss} (|Δ| ${Math.abs(loss - torch.loss).toExponential(2)}), ${names.length} factors, worst relative gradient difference ${rel.toExponential(2)}`,
      );
      expect(Math.abs(loss - torch.loss)).toBeLessThan(1e-5);
      expect(rel).toBeLessThan(1e-4);
    } finally {
      hf.model.dispose();
    }
  });
});
