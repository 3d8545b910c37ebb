import { ErrorCode, SrpoError } from '@srpo/core';
import { registerModelFamily, type CausalLm, type CheckpointManifest, type CheckpointTensor, type ModelFamily } from '@srpo/policy';
import type { HfModelConfig } from './hf-config';
import { loadHfModel } from './hf-model-dir';
import { LlamaModel, type HfModelSource } from './llama-model';
import { LoraAdapter, loraOf, resolveLoraConfig } from './lora';

/** Narrows a policy's model to a Hugging Face Llama-family model (Llama, Qwen2, Mistral). */
export function isLlamaModel(model: CausalLm): model is LlamaModel {
  return model instanceof LlamaModel;
}

/**
 * Hugging Face Llama-family models in @srpo/policy's checkpoints. The topology is
 * `{ kind, config, base, lora? }`: `base` is the directory of version 0 (tokenizer, config.json)
 * and its hash, which export and the agents need beside the weights; `lora`, for a LoRA policy,
 * the adapter's settings: the checkpoint then holds the adapter's factors only, and the frozen
 * base weights are loaded from `base`, whose hash must not have changed.
 */
export const llamaFamily: ModelFamily = {
  kind: 'hf-llama',
  topology(model, dir) {
    if (!isLlamaModel(model)) throw new TypeError(`a ${model.kind} model is not an hf-llama model`);
    // The weights alone do not make a usable model: export and the agents need its tokenizer and config.json.
    if (!model.source)
      throw new SrpoError(ErrorCode.VALIDATION_FAILED, `checkpoint ${dir}: a Hugging Face model needs its source directory (load it with loadHfModel)`, {
        field: 'source',
      });
    const lora = loraOf(model);
    return { kind: model.kind, config: model.config, base: model.source, ...(lora ? { lora: lora.config } : {}) };
  },
  checkManifest(manifest) {
    if (!manifest.base) throw new Error('unsupported model kind hf-llama without its base directory');
  },
  restore(manifest, tensors, dir) {
    const model = manifest.lora ? loraPolicyModel(dir, manifest, tensors) : LlamaModel.fromTensors(manifest.config as HfModelConfig, tensors);
    model.source = manifest.base;
    return model;
  },
};

/**
 * A LoRA checkpoint's model: the base directory loaded (its hash must still be the one
 * recorded, or the adapter would sit on other weights) with the checkpoint's factors attached.
 */
function loraPolicyModel(dir: string, manifest: CheckpointManifest, tensors: ReadonlyMap<string, CheckpointTensor>): LlamaModel {
  const base = manifest.base as HfModelSource;
  const llama = loadHfModel(base.dir).model;
  try {
    const hash = llama.source?.hash;
    if (hash !== base.hash) {
      throw new SrpoError(
        ErrorCode.INTEGRITY_FAILED,
        `checkpoint ${dir}: the base model ${base.dir} has changed since this adapter was trained (hash ${hash}, recorded ${base.hash})`,
        { details: { dir } },
      );
    }
    const config = resolveLoraConfig(manifest.lora, llama.config.architecture, 'manifest.lora');
    llama.setAdapter(LoraAdapter.fromTensors(llama.config, config, tensors, { field: 'weights' }));
  } catch (e) {
    llama.dispose();
    throw e;
  }
  return llama;
}

registerModelFamily(llamaFamily);
