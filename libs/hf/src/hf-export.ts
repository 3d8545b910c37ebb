import * as fs from 'fs';
import * as path from 'path';
import { ErrorCode, SrpoError } from '@srpo/core';
import { saveHfWeights } from './hf-weights';
import type { CausalLm } from '@srpo/policy';
import { hfWeightSpecs, LlamaModel } from './llama-model';
import { loraOf, mergeLora } from './lora';
import { saveLoraAdapter } from './peft-adapter';
import type { SafetensorsDtype } from './safetensors';

/** Files of the base model directory an export carries over unchanged: the tokenizer, chat template and generation settings. */
export const HF_SIDE_FILES = ['tokenizer.json', 'tokenizer_config.json', 'special_tokens_map.json', 'chat_template.jinja', 'generation_config.json'] as const;

const TORCH_DTYPE: Record<SafetensorsDtype, string> = { F32: 'float32', F16: 'float16', BF16: 'bfloat16' };

export interface HfExportOptions {
  /** The directory the model was loaded from: its config.json and tokenizer files are carried over. */
  baseDir: string;
  outDir: string;
  /** Stored dtype of the weights; default the base checkpoint's (BF16 rounds to nearest even). */
  dtype?: SafetensorsDtype;
  /** Shard size limit in bytes (transformers' `max_shard_size`); default 5 GB. */
  maxShardBytes?: number;
}

/**
 * Writes a model as a Hugging Face directory that transformers (and so vLLM, SGLang)
 * loads: the base model's config.json with its dtype field set to the stored dtype (the
 * style of the file, transformers 4 `torch_dtype` or 5 `dtype`, is kept), the current
 * weights under transformers' names (sharded with an index above `maxShardBytes`), and the
 * base directory's tokenizer, chat template and generation config. `outDir` must not be
 * the base directory, and an existing non-empty `outDir` is refused: an export never
 * overwrites a model. Returns the files written.
 */
export async function exportHfModel(model: LlamaModel, options: HfExportOptions): Promise<string[]> {
  const { baseDir, outDir } = options;
  if (path.resolve(baseDir) === path.resolve(outDir))
    throw new SrpoError(ErrorCode.CONFLICT, `--out ${outDir}: is the base model directory; export to a new directory`, { field: 'out' });
  if (fs.existsSync(outDir) && fs.readdirSync(outDir).length > 0)
    throw new SrpoError(ErrorCode.CONFLICT, `--out ${outDir}: exists and is not empty; export to a new directory`, { field: 'out' });
  const raw = JSON.parse(fs.readFileSync(path.join(baseDir, 'config.json'), 'utf8')) as Record<string, unknown>;
  const dtype = options.dtype ?? (Object.entries(TORCH_DTYPE).find(([, v]) => v === model.config.dtype)?.[0] as SafetensorsDtype | undefined) ?? 'F32';
  const dtypeKey = 'dtype' in raw ? 'dtype' : 'torch_dtype';
  const config = { ...raw, [dtypeKey]: TORCH_DTYPE[dtype] };
  const tensors = [];
  for (const spec of hfWeightSpecs(model.config)) {
    tensors.push({ name: spec.name, shape: spec.shape, data: (await model.weight(spec.name).data()) as Float32Array, dtype });
  }
  fs.mkdirSync(outDir, { recursive: true });
  const written = saveHfWeights(outDir, tensors, { maxShardBytes: options.maxShardBytes });
  for (const f of HF_SIDE_FILES) {
    if (fs.existsSync(path.join(baseDir, f))) {
      fs.copyFileSync(path.join(baseDir, f), path.join(outDir, f));
      written.push(path.join(outDir, f));
    }
  }
  // config.json last: a directory without it is visibly incomplete to every loader.
  fs.writeFileSync(path.join(outDir, 'config.json'), JSON.stringify(config, null, 2) + '\n');
  written.push(path.join(outDir, 'config.json'));
  return written;
}

/**
 * Writes a Hugging Face policy for an inference server:
 * - `hf`: a full model directory ({@link exportHfModel}); a LoRA policy is merged into its
 *   base weights first (W + (α/r)·B·A, as peft's `merge_and_unload`);
 * - `peft`: the adapter alone in the PEFT layout (`adapter_config.json` +
 *   `adapter_model.safetensors`), naming the base directory, for servers that load LoRA
 *   adapters (vLLM `--enable-lora`). Only a LoRA policy has one.
 * The project's own transformer has no Hugging Face form and is refused. Merging changes
 * the model in place: pass a policy loaded for the export (a checkpoint), not a live one.
 */
export async function exportHfPolicy(model: CausalLm, options: { format: 'hf' | 'peft'; outDir: string; dtype?: SafetensorsDtype }): Promise<string[]> {
  if (!(model instanceof LlamaModel))
    throw new SrpoError(
      ErrorCode.VALIDATION_FAILED,
      `the policy is the project's ${model.kind} model, which has no Hugging Face form; only policies trained from SRPO_MODEL_DIR export`,
      { field: 'policy' },
    );
  const base = model.source;
  if (!base) throw new SrpoError(ErrorCode.VALIDATION_FAILED, 'the model does not know its base directory', { field: 'policy' });
  const lora = loraOf(model);
  if (options.format === 'peft') {
    if (!lora) throw new SrpoError(ErrorCode.VALIDATION_FAILED, 'the policy trains full weights and has no adapter: use --format hf', { field: 'format' });
    if (fs.existsSync(options.outDir) && fs.readdirSync(options.outDir).length > 0)
      throw new SrpoError(ErrorCode.CONFLICT, `--out ${options.outDir}: exists and is not empty; export to a new directory`, { field: 'out' });
    return saveLoraAdapter(model, options.outDir, { baseModelNameOrPath: base.dir });
  }
  if (lora) mergeLora(model);
  return exportHfModel(model, { baseDir: base.dir, outDir: options.outDir, dtype: options.dtype });
}
