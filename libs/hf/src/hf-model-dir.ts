import { createHash } from 'crypto';
import * as fs from 'fs';
import * as path from 'path';
import { ErrorCode, SrpoError } from '@srpo/core';
import { parseHfConfig, type HfModelConfig } from './hf-config';
import { openHfWeights, readHfTensor } from './hf-weights';
import { HF_SIDE_FILES } from './hf-export';
import { HfTokenizer } from './hf-tokenizer';
import { LlamaModel } from './llama-model';

/** A Hugging Face model directory, loaded: the resolved config, the model and its tokenizer. */
export interface HfModel {
  dir: string;
  config: HfModelConfig;
  model: LlamaModel;
  tokenizer: HfTokenizer;
  /** `generation_config.json` as written, or undefined when the directory has none. */
  generationConfig?: Record<string, unknown>;
}

/**
 * SHA-256 naming a Hugging Face directory's model: over `config.json`, the tokenizer,
 * chat-template and generation files present, and the weight files with their index,
 * each framed as `name\nbyteLength\n` + bytes, in that fixed order. Other files (a
 * README, a stray adapter) do not change it. Reads every weight byte once (about a
 * second per GB); callers compute it once per load.
 */
export function hfDirectoryHash(dir: string): string {
  const h = createHash('sha256');
  const weights = fs
    .readdirSync(dir)
    .filter((f) => /^model(-\d{5}-of-\d{5})?\.safetensors$/.test(f) || f === 'model.safetensors.index.json')
    .sort();
  for (const f of ['config.json', ...HF_SIDE_FILES, ...weights]) {
    const file = path.join(dir, f);
    if (!fs.existsSync(file)) continue;
    const size = fs.statSync(file).size;
    h.update(`${f}\n${size}\n`, 'utf8');
    const fd = fs.openSync(file, 'r');
    try {
      const buf = Buffer.allocUnsafe(Math.min(size, 8 << 20));
      for (let pos = 0; pos < size;) {
        const n = fs.readSync(fd, buf, 0, Math.min(buf.length, size - pos), pos);
        if (n <= 0) throw new SrpoError(ErrorCode.INTEGRITY_FAILED, `${file}: changed while being hashed`, { field: f });
        h.update(buf.subarray(0, n));
        pos += n;
      }
    } finally {
      fs.closeSync(fd);
    }
  }
  return h.digest('hex');
}

/** Reads and resolves `DIR/config.json` (no weights). Errors name the file and the field. */
export function readHfConfig(dir: string): HfModelConfig {
  const file = path.join(dir, 'config.json');
  if (!fs.existsSync(dir) || !fs.statSync(dir).isDirectory())
    throw new SrpoError(ErrorCode.NOT_FOUND, `${dir}: not a directory (expected a Hugging Face model directory)`, { field: 'model' });
  if (!fs.existsSync(file))
    throw new SrpoError(ErrorCode.NOT_FOUND, `${file}: missing (a Hugging Face model directory holds config.json)`, { field: 'config.json' });
  let raw: unknown;
  try {
    raw = JSON.parse(fs.readFileSync(file, 'utf8'));
  } catch (e) {
    throw new SrpoError(ErrorCode.VALIDATION_FAILED, `${file}: not valid JSON (${(e as Error).message})`, { field: 'config.json' });
  }
  return parseHfConfig(raw);
}

/**
 * Loads the model of a Hugging Face directory: config, weights (single file or shards;
 * F32, F16 and BF16 widened to float32), tokenizer and chat template. Checks that every id
 * the tokenizer can produce has an embedding row (a larger, padded embedding is normal).
 */
export function loadHfModel(dir: string): HfModel {
  const config = readHfConfig(dir);
  const tokenizer = HfTokenizer.fromDirectory(dir);
  if (tokenizer.idCount > config.vocabSize) {
    throw new SrpoError(
      ErrorCode.VALIDATION_FAILED,
      `${dir}: tokenizer.json has ids up to ${tokenizer.idCount - 1}, beyond config.json vocab_size ${config.vocabSize}`,
      { field: 'vocab_size' },
    );
  }
  const weights = openHfWeights(dir);
  // Shapes from the headers first (every name checked), then one tensor read at a time.
  const shapes = new Map([...weights.tensors].map(([name, t]) => [name, t.info.shape] as const));
  const model = LlamaModel.fromSource(config, shapes, (name) => readHfTensor(weights, name).data);
  model.source = { dir: path.resolve(dir), hash: hfDirectoryHash(dir) };
  const genFile = path.join(dir, 'generation_config.json');
  let generationConfig: Record<string, unknown> | undefined;
  if (fs.existsSync(genFile)) {
    try {
      generationConfig = JSON.parse(fs.readFileSync(genFile, 'utf8')) as Record<string, unknown>;
    } catch (e) {
      model.dispose();
      throw new SrpoError(ErrorCode.VALIDATION_FAILED, `${genFile}: not valid JSON (${(e as Error).message})`, { field: 'generation_config.json' });
    }
  }
  return { dir, config, model, tokenizer, generationConfig };
}
