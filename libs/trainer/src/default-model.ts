import type { TransformerConfig } from '@srpo/policy';

/**
 * Shape of the project transformer's version 0 when nothing else is configured
 * (SRPO_MODEL_CONFIG unset). Audit and replay build their trainers with it too:
 * a loaded checkpoint carries its own shape, so this only has to be a valid one.
 */
export const DEFAULT_MODEL: Readonly<TransformerConfig> = Object.freeze({ vocabSize: 256, dModel: 64, nLayers: 2, nHeads: 4, maxSeqLen: 128 });
