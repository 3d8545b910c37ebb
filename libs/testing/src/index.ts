export * from './infra';
export * from './eos-verifier';
export * from './processes';
export * from './fake-schema-registry';
export * from './learner-fixtures';
export * from './event-fixtures';
export * from './record-fixtures';
export * from './ready-groups';
