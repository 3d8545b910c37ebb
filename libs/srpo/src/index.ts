/**
 * SRPO objective library: pure math on TensorFlow.js (no I/O, no framework).
 *
 * Host side (float64): config, group advantages, ProGPO progress.
 * Device side (float32 tensors): padded batches, ratios, clipped surrogates, loss.
 */
export * from './config';
export * from './advantages';
export * from './padded-batch';
export * from './set-ratio';
export * from './surrogate';
export * from './objective';
export * from './diagnostics';
export * from './objective-request';
export * from './behaviour-correction';
