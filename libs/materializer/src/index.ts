export * from './active-set.processor';
export * from './advantage-group.processor';
export * from './topology';
export * from './rematerialize';
export * from './outcome-revisions';
export * from './materializer-settings';
export * from './group-values';
export * from './erased-content';
