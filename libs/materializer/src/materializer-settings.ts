import { ConfigError, EnvReader } from '@srpo/core';
import { DEFAULT_EVENT_LIMITS, type EventLimits } from '@srpo/events';
import { resolveObjectiveConfig } from '@srpo/srpo';
import { DEFAULT_MAX_LATENESS_MS, defaultMaxBrokerSkewMs } from './active-set-options';
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
 * | SRPO_MAX_LATENESS_MS | 600000 | events further behind stream time are dead-lettered as CLOCK_SKEW |
 * | SRPO_MAX_BROKER_SKEW_MS | 10000 (at most a sixth of the shorter of SRPO_SET_TTL_MS and SRPO_GROUP_TTL_MS) | events further ahead of their record's Kafka timestamp (which the broker keeps within the raw topics' message.timestamp.after.max.ms of its clock) are dead-lettered as CLOCK_SKEW; must be below both windows |
 * | SRPO_DEDUPE_RETENTION_MS | SRPO_MAX_LATENESS_MS | how long ids of closed episodes and emitted sets are remembered; never less than SRPO_MAX_LATENESS_MS |
 * | SRPO_ADVANTAGE_STD, SRPO_ADVANTAGE_EPS, SRPO_PROGRESS_FALLBACK | sample, 1e-6, false | advantage settings |
 *
 * The dedupe window may not be shorter than the lateness allowance: a duplicate that arrives
 * after its episode was forgotten but inside the allowance would be taken as a new event and
 * processed a second time. The state this costs is in docs/materializer.md ("Dedupe window").
 * There is no allowance ahead of stream time: the record timestamp is the clock (a partition idle
 * for hours takes its next event as it is), and SRPO_MAX_FUTURE_SKEW_MS, which bounded event time
 * by stream time, is refused if set.
 * The broker skew must be shorter than both windows: stream time may run that far (plus the
 * record timestamps' own 10 s) ahead of the broker's clock, and each window loses that much for
 * honest events (docs/materializer.md, "Event time and the broker's clock").
 *
 * @throws ConfigError naming the first bad variable
 */
export function readMaterializerSettings(env: Readonly<Record<string, string | undefined>>): ReadMaterializerSettings {
  const r = new EnvReader(env);
  const setTtlMs = r.int('SRPO_SET_TTL_MS', 60_000, { min: 1 });
  const groupTtlMs = r.int('SRPO_GROUP_TTL_MS', 120_000, { min: 1 });
  if (env.SRPO_MAX_FUTURE_SKEW_MS !== undefined) {
    throw new ConfigError(
      'SRPO_MAX_FUTURE_SKEW_MS',
      'is no longer read: event time is bounded by its record timestamp (SRPO_MAX_BROKER_SKEW_MS), not by stream time, whose allowance refused every event after an idle hour; unset it',
    );
  }
  const windowMs = Math.min(setTtlMs, groupTtlMs);
  const maxBrokerSkewMs = r.int('SRPO_MAX_BROKER_SKEW_MS', defaultMaxBrokerSkewMs(windowMs), { min: 0 });
  if (maxBrokerSkewMs >= windowMs) {
    throw new ConfigError(
      'SRPO_MAX_BROKER_SKEW_MS',
      `must be < SRPO_SET_TTL_MS and SRPO_GROUP_TTL_MS (${windowMs}), got ${maxBrokerSkewMs}: one producer could move stream time that far ahead of the record timestamps and close every open set or group early`,
    );
  }
  const maxLatenessMs = r.int('SRPO_MAX_LATENESS_MS', DEFAULT_MAX_LATENESS_MS, { min: 0 });
  const dedupeRetentionMs = r.int('SRPO_DEDUPE_RETENTION_MS', maxLatenessMs, { min: 0 });
  if (dedupeRetentionMs < maxLatenessMs) {
    throw new ConfigError(
      'SRPO_DEDUPE_RETENTION_MS',
      `must be >= SRPO_MAX_LATENESS_MS (${maxLatenessMs}), got ${dedupeRetentionMs}: a duplicate arriving after its episode was forgotten but inside the lateness allowance would be processed twice; raise it, or lower SRPO_MAX_LATENESS_MS (later events are then dead-lettered as CLOCK_SKEW)`,
    );
  }
  return {
    setTtlMs,
    groupTtlMs,
    dedupeRetentionMs,
    maxBrokerSkewMs,
    maxLatenessMs,
    // Each variable is range-checked above, so the resolver cannot fail on what it is given.
    objective: resolveObjectiveConfig({
      advantageStd: r.oneOf('SRPO_ADVANTAGE_STD', ['sample', 'population'] as const, 'sample'),
      advantageEps: r.num('SRPO_ADVANTAGE_EPS', 1e-6, { min: 0 }),
      progress: { enabled: r.bool('SRPO_PROGRESS_FALLBACK', false) },
    }),
    limits: DEFAULT_EVENT_LIMITS,
  };
}
