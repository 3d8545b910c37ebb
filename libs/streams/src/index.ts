export * from './key-value-store';
export * from './processor';
export * from './co-partition-assigner';
export * from './dead-letter';
export * from './consumer-runner';
export * from './in-memory-harness';
export * from './sink-runner';
