export * from './credits';
export * from './trajectory';
export * from './task-inferrer';
export * from './pmi-scorer';
export * from './credit-weighted-sft';
export * from './brew';
export * from './offline-job';
