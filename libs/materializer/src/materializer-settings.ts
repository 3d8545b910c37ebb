import { ConfigError, EnvReader } from '@srpo/core';
import { DEFAULT_EVENT_LIMITS, type EventLimits, MAX_REWARD_SOURCE_LENGTH } from '@srpo/events';
import { resolveObjectiveConfig } from '@srpo/srpo';
import { DEFAULT_MAX_LATENESS_MS, defaultMaxBrokerSkewMs } from './active-set-options';
import type { MaterializerSettings } from './topology';

/** {@link MaterializerSettings} as read from variables: the limits always set. */
export type ReadMaterializerSettings = MaterializerSettings & { limits: EventLimits; rewardWindows: Record<string, number> };

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
 * | SRPO_REWARD_WINDOWS | unset | per reward source, how long (event time after its transition) a set whose members are all there waits for its outcome: `human=7d,ci=1h,judge=10m` (ms, or s/m/h/d); other sources wait SRPO_SET_TTL_MS (docs/rewards.md) |
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
  const rewardWindows = parseRewardWindows(env.SRPO_REWARD_WINDOWS);
  return {
    setTtlMs,
    groupTtlMs,
    rewardWindows,
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

/** Longest reward window (30 days): the set stage holds a waiting episode, output bytes included, that long. */
export const MAX_REWARD_WINDOW_MS = 30 * 86_400_000;
/** Most sources SRPO_REWARD_WINDOWS may name: they label metrics (`outcomes_late_total{source}`). */
export const MAX_REWARD_SOURCES = 32;

const UNIT_MS: Record<string, number> = { '': 1, ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/**
 * SRPO_REWARD_WINDOWS: `source=duration` pairs separated by commas (`human=7d,ci=1h,judge=10m`);
 * a duration is an integer with an optional unit (ms, s, m, h, d; none: ms), 1 ms to 30 days.
 * Names as `EpisodeOutcome.rewardSource` allows them (letters, digits, `.`, `_`, `-`, at most
 * 64 characters), each once, at most 32 of them. Unset or empty: no source has a window of its own.
 *
 * @throws ConfigError naming SRPO_REWARD_WINDOWS and the bad entry
 */
export function parseRewardWindows(value: string | undefined): Record<string, number> {
  const windows: Record<string, number> = {};
  if (value === undefined || value.trim() === '') return windows;
  const bad = (message: string) => new ConfigError('SRPO_REWARD_WINDOWS', `${message} (expected e.g. human=7d,ci=1h,judge=10m)`);
  const entries = value.split(',').map((e) => e.trim());
  if (entries.length > MAX_REWARD_SOURCES) throw bad(`names ${entries.length} sources; the limit is ${MAX_REWARD_SOURCES}`);
  for (const entry of entries) {
    const m = /^([^=\s]+)\s*=\s*(\d{1,15})\s*(ms|s|m|h|d)?$/.exec(entry);
    if (!m) throw bad(`entry ${JSON.stringify(entry)} is not source=duration`);
    const [, name, amount, unit = ''] = m;
    if (name.length > MAX_REWARD_SOURCE_LENGTH)
      throw bad(`source name ${JSON.stringify(name.slice(0, 16))}... is ${name.length} characters long; the limit is ${MAX_REWARD_SOURCE_LENGTH}`);
    if (!/^[A-Za-z0-9._-]+$/.test(name)) throw bad(`source name ${JSON.stringify(name)} must use only letters, digits, '.', '_' and '-'`);
    if (Object.prototype.hasOwnProperty.call(windows, name)) throw bad(`names source ${name} twice`);
    const ms = Number(amount) * UNIT_MS[unit];
    if (!Number.isSafeInteger(ms) || ms < 1 || ms > MAX_REWARD_WINDOW_MS) throw bad(`window of ${name} is ${amount}${unit}; it must be 1 ms to 30d`);
    windows[name] = ms;
  }
  return windows;
}
