import { errorMessage } from '@srpo/core';
import { registerModelFamily, type ModelFamily } from './model-family';
import { TransformerModel, resolveTransformerConfig, type ResolvedTransformerConfig } from './transformer';
import type { CausalLm } from './causal-lm';

/** Narrows a policy's model to the project's own transformer. */
export function isTransformerModel(model: CausalLm): model is TransformerModel {
  return model instanceof TransformerModel;
}

/**
 * The project's own transformer in checkpoints: topology `{ kind, config }`, the config
 * resolved (defaults filled, every field checked) before the weights are decoded. Checkpoints
 * written before other families existed have no `modelKind`: the store reads them as this kind.
 */
export const transformerFamily: ModelFamily = {
  kind: 'causal-transformer',
  topology(model) {
    if (!isTransformerModel(model)) throw new TypeError(`a ${model.kind} model is not a causal-transformer`);
    return { kind: model.kind, config: model.config };
  },
  checkManifest(manifest) {
    resolvedConfig(manifest.config);
  },
  restore(manifest, tensors) {
    return TransformerModel.fromValues(resolvedConfig(manifest.config), new Map([...tensors].map(([name, t]) => [name, t.data] as const)));
  },
};

function resolvedConfig(config: unknown): ResolvedTransformerConfig {
  try {
    return resolveTransformerConfig(config as ResolvedTransformerConfig);
  } catch (e) {
    throw new Error(`invalid model config: ${errorMessage(e)}`, { cause: e });
  }
}

registerModelFamily(transformerFamily);
