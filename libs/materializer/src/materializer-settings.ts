import { EnvReader } from '@srpo/core';
import { DEFAULT_EVENT_LIMITS, type EventLimits } from '@srpo/events';
import { resolveObjectiveConfig } from '@srpo/srpo';
import type { MaterializerSettings } from './topology';

/** {@link MaterializerSettings} as read from variables: the limits always set. */
export type ReadMaterializerSettings = MaterializerSettings & { limits: EventLimits };

/**
 * The settings that decide sets and groups, parsed from an environment-like map. The
 * materializer app's config module and the CLI's (for `replay --rematerialize`) both call it,
 * so a re-materialization reads the same variables with the same defaults as the live run.
 * It reads only `env`, never `process.env`: the callers are the config modules.
 *
 * | variable | default | meaning |
 * | --- | --- | --- |
 * | SRPO_SET_TTL_MS | 60000 | event time for a set's members and reward to arrive |
 * | SRPO_GROUP_TTL_MS | 120000 | event time for an undeclared group to fill |
 * | SRPO_DEDUPE_RETENTION_MS | 600000 | how long ids of closed episodes are remembered |
 * | SRPO_MAX_FUTURE_SKEW_MS / SRPO_MAX_LATENESS_MS | 3600000 / 86400000 | clock-skew limits |
 * | SRPO_ADVANTAGE_STD, SRPO_ADVANTAGE_EPS, SRPO_PROGRESS_FALLBACK | sample, 1e-6, false | advantage settings |
 *
 * @throws ConfigError naming the first bad variable
 */
export function readMaterializerSettings(env: Readonly<Record<string, string | undefined>>): ReadMaterializerSettings {
  const r = new EnvReader(env);
  return {
    setTtlMs: r.int('SRPO_SET_TTL_MS', 60_000, { min: 1 }),
    groupTtlMs: r.int('SRPO_GROUP_TTL_MS', 120_000, { min: 1 }),
    dedupeRetentionMs: r.int('SRPO_DEDUPE_RETENTION_MS', 600_000, { min: 0 }),
    maxFutureSkewMs: r.int('SRPO_MAX_FUTURE_SKEW_MS', 3_600_000, { min: 0 }),
    maxLatenessMs: r.int('SRPO_MAX_LATENESS_MS', 86_400_000, { min: 0 }),
    // Each variable is range-checked above, so the resolver cannot fail on what it is given.
    objective: resolveObjectiveConfig({
      advantageStd: r.oneOf('SRPO_ADVANTAGE_STD', ['sample', 'population'] as const, 'sample'),
      advantageEps: r.num('SRPO_ADVANTAGE_EPS', 1e-6, { min: 0 }),
      progress: { enabled: r.bool('SRPO_PROGRESS_FALLBACK', false) },
    }),
    limits: DEFAULT_EVENT_LIMITS,
  };
}
