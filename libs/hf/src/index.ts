export * from './hf-config';
export * from './rope';
export * from './llama-model';
export * from './llama-decode';
export * from './llama-decode-batch';
export * from './hf-tokenizer';
export * from './hf-model-dir';
export * from './score';
export * from './safetensors';
export * from './hf-weights';
export * from './hf-export';
export * from './lora';
export * from './peft-adapter';
export * from './smollm2-dir';
// Registers the hf-llama family with @srpo/policy's checkpoint store when @srpo/hf loads.
export * from './llama-family';
