import { spawnSync } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import * as tf from '@tensorflow/tfjs';
import { initTfBackend, repoRoot } from '@srpo/core';
import { SeededRng } from '@srpo/policy';
import { exportHfModel, loadHfModel, openHfWeights, scoreCases, type HfModel, type ScoredCase } from '@srpo/hf';

/**
 * Export round trip: a model changed in tfjs (as training would change it) is written as a
 * Hugging Face directory; Python transformers loads that directory and gives the log-probs
 * our model gives (1e-4 per token), and the directory loads back here.
 */
const root = repoRoot();
const FIXTURES = path.join(root, 'libs', 'hf', 'fixtures');

function transformersScores(dir: string, cases: { promptTokenIds: number[]; responseTokenIds: number[] }[]): number[][] {
  const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-rt-')), 'cases.json');
  fs.writeFileSync(file, JSON.stringify(cases));
  const r = spawnSync('python3', [path.join(root, 'scripts', 'reference', 'score_hf.py'), dir, file], { encoding: 'utf8' });
  if (r.status !== 0) {
    throw new Error(
      `transformers could not score ${dir} (python3 -m pip install -r scripts/reference/requirements.txt installs the reference):\n${r.stderr.slice(-2000)}`,
    );
  }
  return JSON.parse(r.stdout) as number[][];
}

/** Every weight moved by N(0, 0.02²), seeded: stands in for training. */
function perturb(hf: HfModel, seed: number): void {
  const rng = new SeededRng(seed);
  for (const name of hf.model.weightNames()) {
    const v = hf.model.weight(name);
    const delta = tf.tensor(rng.normalArray(v.size, 0.02), v.shape);
    v.assign(tf.add(v, delta));
    delta.dispose();
  }
}

const maxDiff = (a: number[], b: number[]): number => Math.max(...a.map((v, i) => Math.abs(v - b[i])));

describe.each([
  ['llama', 'F32', 150_000],
  ['qwen2', undefined, undefined],
  ['mistral', 'F32', undefined],
] as const)('%s exported (dtype %s)', (name, dtype, maxShardBytes) => {
  it('loads in transformers with the same log-probs, and loads back here', async () => {
    await initTfBackend('tensorflow');
    const base = path.join(FIXTURES, name);
    const ref = JSON.parse(fs.readFileSync(path.join(base, 'reference.json'), 'utf8')) as { cases: ScoredCase[]; idCases: ScoredCase[] };
    const cases = [...ref.cases, ...ref.idCases].map((c: ScoredCase) => ({ promptTokenIds: c.promptTokenIds, responseTokenIds: c.responseTokenIds }));
    const hf = loadHfModel(base);
    const out = path.join(fs.mkdtempSync(path.join(os.tmpdir(), `srpo-export-${name}-`)), 'model');
    let back: HfModel | undefined;
    try {
      perturb(hf, 7);
      const ours = await scoreCases(hf.model, cases);
      // Moved far enough that a stale export (the base weights) could not pass.
      expect(Math.max(...ours.map((o, i) => maxDiff(o.logprobs, ref.cases.concat(ref.idCases)[i].logprobs)))).toBeGreaterThan(1e-2);
      await exportHfModel(hf.model, { baseDir: base, outDir: out, dtype, maxShardBytes });
      const config = JSON.parse(fs.readFileSync(path.join(out, 'config.json'), 'utf8')) as { dtype?: string; torch_dtype?: string };
      const stored = dtype ?? 'BF16';
      expect(config.dtype ?? config.torch_dtype).toBe({ F32: 'float32', BF16: 'bfloat16', F16: 'float16' }[stored]);
      if (maxShardBytes) expect(openHfWeights(out).files.length).toBeGreaterThan(1);
      back = loadHfModel(out);
      const reloaded = await scoreCases(back.model, cases);
      const theirs = transformersScores(out, cases);
      theirs.forEach((t, i) => expect(maxDiff(t, reloaded[i].logprobs)).toBeLessThan(1e-4));
      if (stored === 'F32') {
        // Float32 export is lossless: the reloaded model is the one we trained, bit for bit.
        for (const n of hf.model.weightNames())
          expect(Buffer.from((await back.model.weight(n).data()).buffer)).toEqual(Buffer.from((await hf.model.weight(n).data()).buffer));
        reloaded.forEach((r, i) => expect(r.logprobs).toEqual(ours[i].logprobs));
      }
      expect(fs.readFileSync(path.join(out, 'tokenizer.json'))).toEqual(fs.readFileSync(path.join(base, 'tokenizer.json')));
    } finally {
      hf.model.dispose();
      back?.model.dispose();
    }
  });
});

describe('exportHfModel refusals', () => {
  it('never writes into the base directory or over a non-empty directory', async () => {
    await initTfBackend('tensorflow');
    const base = path.join(FIXTURES, 'qwen2');
    const hf = loadHfModel(base);
    try {
      await expect(exportHfModel(hf.model, { baseDir: base, outDir: base })).rejects.toThrow(/is the base model directory/);
      const busy = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-busy-'));
      fs.writeFileSync(path.join(busy, 'x'), 'x');
      await expect(exportHfModel(hf.model, { baseDir: base, outDir: busy })).rejects.toThrow(/exists and is not empty/);
    } finally {
      hf.model.dispose();
    }
  });
});
