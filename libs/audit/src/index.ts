/**
 * Audit and replay of recorded updates: show, trace and verify an update
 * against its source events and checkpoint ({@link AuditService}), and re-run
 * recorded updates into an isolated run ({@link ReplayService}). Used by the
 * learner's HTTP API and the `srpo audit` / `srpo replay` commands.
 */
export * from './audit.service';
export * from './episode-trace';
export * from './replay.service';
export * from './erasure-impact';
export * from './erasure-rebuild';
export * from './erasure-certificate';
export * from './erasure-announce';
export * from './lineage-adoption';
