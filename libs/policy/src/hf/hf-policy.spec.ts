import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import * as tf from '@tensorflow/tfjs';
import { ErrorCode, repoRoot } from '@srpo/core';
import { AdamOptimizer } from '../adam-optimizer';
import { loadCheckpoint, saveCheckpoint, weightsHash } from '../checkpoint-store';
import { Policy } from '../policy';
import { nativeBackend } from '../test/fixtures';
import { hfDirectoryHash, loadHfModel } from './hf-model-dir';
import { LlamaModel } from './llama-model';
import { scoreCases } from './score';

const FIXTURES = path.join(repoRoot(), 'libs', 'policy', 'fixtures', 'hf');

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
      await expect(saveCheckpoint(fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-hf-ckpt-')), policy)).rejects.toMatchObject({ code: ErrorCode.VALIDATION_FAILED, field: 'source' });
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
