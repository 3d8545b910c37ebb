/**
 * The learner's training core, shared by the learner app, audit and replay
 * (libs/audit) and offline runs (libs/offline): the policy trainer, the
 * trainer's view of advantage groups, the learner-events publishers, the
 * run recorder with its typed hyperparameters, and the learner's update cycle
 * (UpdateCycle over the committed policy state, with its metrics and checkpoint
 * retention), framework-free.
 */
export * from './policy-trainer';
export * from './training-sets';
export * from './default-model';
export * from './events-publisher';
export * from './kafka-publisher';
export * from './update-hyperparameters';
export * from './run-recorder';
export * from './learner-metrics';
export * from './checkpoint-retention';
export * from './committed-policy-state';
export * from './update-cycle-ports';
export * from './update-triage';
export * from './update-cycle';
