export * from './errors';
export * from './logger';
export * from './config';
export * from './tf-backend';
export * from './paths';
export * from './metrics';
export * from './shutdown';
export { runDoctor, systemDoctorHost, formatDoctorReport, formatDoctorJson, doctorExitCode, type DoctorHost, type DoctorLevel, type DoctorResult, type ProbeOutcome } from './doctor';
export * from './nest-logger';
