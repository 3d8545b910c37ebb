export * from './text-codec';
export * from './incremental-text';
export * from './policy-pool';
export * from './served-models';
export * from './generation-engine';
export * from './openai-protocol';
export * from './completion.service';
