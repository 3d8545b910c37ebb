export * from './errors';
export * from './logger';
export * from './config';
export * from './tf-backend';
export * from './paths';
export * from './metrics';
export * from './shutdown';
