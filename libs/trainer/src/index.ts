/**
 * The learner's training core, shared by the learner app, audit and replay
 * (libs/audit) and offline runs (libs/offline): the policy trainer, the
 * trainer's view of advantage groups, the learner-events publishers, and the
 * run recorder with its typed hyperparameters.
 */
export * from './policy-trainer';
export * from './training-sets';
export * from './default-model';
export * from './events-publisher';
export * from './kafka-publisher';
export * from './update-hyperparameters';
export * from './run-recorder';
