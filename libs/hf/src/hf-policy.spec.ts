import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import * as tf from '@tensorflow/tfjs';
import { ErrorCode, repoRoot } from '@srpo/core';
import { AdamOptimizer, loadCheckpoint, Policy, saveCheckpoint, SeededRng, TransformerModel, weightsHash } from '@srpo/policy';
import { nativeBackend } from './test/fixtures';
import { hfDirectoryHash, loadHfModel } from './hf-model-dir';
import { LlamaModel } from './llama-model';
import { attachLora, detachLora, loraOf } from './lora';
import { exportHfPolicy } from './hf-export';
import { isLlamaModel } from './llama-family';
import { openHfWeights, readHfTensor } from './hf-weights';
import { scoreCases } from './score';

const FIXTURES = path.join(repoRoot(), 'libs', 'hf', 'fixtures');

describe('Hugging Face policies in checkpoints', () => {
  beforeAll(nativeBackend);

  it('round-trips an HF policy: kind, base directory and hash, weights, optimizer state, log-probs', async () => {
    const dir = path.join(FIXTURES, 'qwen2');
    const hf = loadHfModel(dir);
    expect(hf.model.source).toEqual({ dir: path.resolve(dir), hash: hfDirectoryHash(dir) });
    const policy = new Policy('solver', hf.model, 3);
    const opt = new AdamOptimizer(hf.model);
    const ckpt = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-hf-ckpt-'));
    try {
      // Move the weights and the moments off their initial values, as an update would.
      const grads = new Map(hf.model.weightNames().map((n) => [n, tf.onesLike(hf.model.weight(n))]));
      opt.apply(grads, 1e-3, 0).dispose();
      tf.dispose([...grads.values()]);
      const manifest = await saveCheckpoint(ckpt, policy, opt);
      expect([manifest.modelKind, manifest.base?.hash, manifest.optimizerStep]).toEqual(['hf-llama', hfDirectoryHash(dir), 1]);
      const loaded = await loadCheckpoint(ckpt);
      try {
        expect(loaded.policy.model).toBeInstanceOf(LlamaModel);
        expect(isLlamaModel(loaded.policy.model)).toBe(true);
        expect(loaded.policy.version).toBe(3);
        expect((loaded.policy.model as LlamaModel).source).toEqual(hf.model.source);
        expect(await weightsHash(loaded.policy)).toBe(await weightsHash(policy));
        expect(loaded.optimizerState?.step).toBe(1);
        const cases = [{ promptTokenIds: [5, 9, 33], responseTokenIds: [40, 2, 17] }];
        expect((await scoreCases(loaded.policy.model, cases))[0].logprobs).toEqual((await scoreCases(hf.model, cases))[0].logprobs);
      } finally {
        loaded.policy.dispose();
      }
    } finally {
      opt.dispose();
      policy.dispose();
    }
  });

  it('refuses to checkpoint an HF model that does not know its source directory', async () => {
    const hf = loadHfModel(path.join(FIXTURES, 'llama'));
    hf.model.source = undefined;
    const policy = new Policy('p', hf.model);
    try {
      await expect(saveCheckpoint(fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-hf-ckpt-')), policy)).rejects.toMatchObject({
        code: ErrorCode.VALIDATION_FAILED,
        field: 'source',
      });
    } finally {
      policy.dispose();
    }
  });

  it('the directory hash changes with any model file and ignores unrelated files', () => {
    const src = path.join(FIXTURES, 'qwen2');
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-hf-hash-'));
    for (const f of fs.readdirSync(src)) fs.copyFileSync(path.join(src, f), path.join(dir, f));
    const h0 = hfDirectoryHash(dir);
    expect(h0).toBe(hfDirectoryHash(src));
    fs.writeFileSync(path.join(dir, 'README.md'), 'notes');
    expect(hfDirectoryHash(dir)).toBe(h0);
    const tok = path.join(dir, 'tokenizer_config.json');
    fs.writeFileSync(tok, fs.readFileSync(tok, 'utf8').replace('}', ' }'));
    expect(hfDirectoryHash(dir)).not.toBe(h0);
  });
});

describe('LoRA policies in checkpoints', () => {
  beforeAll(nativeBackend);

  it('save the adapter only, name the base by hash, and load back onto the base with the same log-probs', async () => {
    const dir = path.join(FIXTURES, 'llama');
    const hf = loadHfModel(dir);
    attachLora(hf.model, { r: 4, alpha: 8, targetModules: ['q_proj', 'v_proj', 'down_proj'] }, { seed: 3 });
    // B = 0 at init: give it values so the adapter changes the model.
    const rng = new SeededRng(5);
    for (const n of hf.model.weightNames())
      if (n.includes('lora_B')) hf.model.weight(n).assign(tf.tensor(rng.normalArray(hf.model.weight(n).size, 0.05), hf.model.weight(n).shape));
    const policy = new Policy('solver', hf.model, 2);
    const ckpt = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-lora-ckpt-'));
    try {
      const manifest = await saveCheckpoint(ckpt, policy);
      expect(manifest.lora).toMatchObject({ r: 4, alpha: 8, targetModules: ['q_proj', 'v_proj', 'down_proj'] });
      expect(manifest.base?.hash).toBe(hfDirectoryHash(dir));
      // 2 layers x 3 targets x (A, B): the base's weights are not in the checkpoint.
      const saved = (JSON.parse(fs.readFileSync(path.join(ckpt, 'model.json'), 'utf8')) as { weightsManifest: { weights: { name: string }[] }[] })
        .weightsManifest[0].weights;
      expect(saved.map((w) => w.name).every((n) => /\.lora_[AB]\.weight$/.test(n))).toBe(true);
      expect(saved).toHaveLength(12);
      const loaded = await loadCheckpoint(ckpt);
      try {
        const model = loaded.policy.model as LlamaModel;
        expect(loraOf(model)?.config.r).toBe(4);
        expect(await weightsHash(loaded.policy)).toBe(manifest.weightsHash);
        const cases = [{ promptTokenIds: [5, 9, 33, 2], responseTokenIds: [40, 2, 17, 300] }];
        const [got] = await scoreCases(model, cases);
        const [want] = await scoreCases(hf.model, cases);
        expect(got.logprobs).toEqual(want.logprobs);
        detachLora(hf.model);
        const [plain] = await scoreCases(hf.model, cases);
        expect(Math.max(...plain.logprobs.map((v, i) => Math.abs(v - want.logprobs[i])))).toBeGreaterThan(1e-3);
      } finally {
        loaded.policy.dispose();
      }
    } finally {
      policy.dispose();
    }
  });

  it('refuses an adapter whose base directory changed since', async () => {
    const src = path.join(FIXTURES, 'qwen2');
    const base = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-lora-base-'));
    for (const f of fs.readdirSync(src)) fs.copyFileSync(path.join(src, f), path.join(base, f));
    const hf = loadHfModel(base);
    attachLora(hf.model, {}, { seed: 1 });
    const policy = new Policy('p', hf.model);
    const ckpt = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-lora-ckpt-'));
    try {
      await saveCheckpoint(ckpt, policy);
      const gen = path.join(base, 'generation_config.json');
      fs.writeFileSync(gen, fs.readFileSync(gen, 'utf8') + ' ');
      await expect(loadCheckpoint(ckpt)).rejects.toThrow(/has changed since this adapter was trained/);
    } finally {
      policy.dispose();
    }
  });
});

describe('exportHfPolicy refusals', () => {
  beforeAll(nativeBackend);

  it("refuses the project's own transformer, and peft for a full-weight policy", async () => {
    const own = TransformerModel.create({ vocabSize: 16, dModel: 8, nLayers: 1, nHeads: 2, maxSeqLen: 8 }, 1);
    const hf = loadHfModel(path.join(FIXTURES, 'qwen2'));
    try {
      await expect(exportHfPolicy(own, { format: 'hf', outDir: fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-x-')) })).rejects.toThrow(
        /causal-transformer model, which has no Hugging Face form/,
      );
      await expect(exportHfPolicy(hf.model, { format: 'peft', outDir: fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-x-')) })).rejects.toThrow(
        /has no adapter: use --format hf/,
      );
    } finally {
      own.dispose();
      hf.model.dispose();
    }
  });
});

describe('LlamaModel.fromSource', () => {
  beforeAll(nativeBackend);

  it('reads one tensor at a time, in the spec order, and leaves nothing behind when a read fails', () => {
    const dir = path.join(FIXTURES, 'qwen2');
    const weights = openHfWeights(dir);
    const shapes = new Map([...weights.tensors].map(([n, t]) => [n, t.info.shape] as const));
    const config = loadHfModel(dir);
    config.model.dispose();
    const before = tf.memory().numTensors;
    const read: string[] = [];
    expect(() =>
      LlamaModel.fromSource(config.config, shapes, (name) => {
        if (read.length === 3) throw new Error('disk error');
        read.push(name);
        return readHfTensor(weights, name).data;
      }),
    ).toThrow('disk error');
    expect(read).toHaveLength(3);
    expect(tf.memory().numTensors).toBe(before);
  });
});
