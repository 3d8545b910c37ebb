import { ConfigError } from '@srpo/core';
import { DEFAULT_EVENT_LIMITS } from '@srpo/events';
import { readMaterializerSettings } from './materializer-settings';

/** The ConfigError `env` is refused with (fails the test if it is accepted). */
function refusal(env: Readonly<Record<string, string | undefined>>): ConfigError {
  try {
    readMaterializerSettings(env);
  } catch (e) {
    expect(e).toBeInstanceOf(ConfigError);
    return e as ConfigError;
  }
  throw new Error(`accepted ${JSON.stringify(env)}`);
}

describe('readMaterializerSettings', () => {
  it('has the live materializer defaults', () => {
    const s = readMaterializerSettings({});
    expect(s).toMatchObject({
      setTtlMs: 60_000,
      groupTtlMs: 120_000,
      // The dedupe window follows the lateness allowance unless set.
      dedupeRetentionMs: 600_000,
      maxBrokerSkewMs: 10_000,
      maxLatenessMs: 600_000,
      limits: DEFAULT_EVENT_LIMITS,
    });
    expect(s.objective).toMatchObject({ advantageStd: 'sample', advantageEps: 1e-6, progress: { enabled: false } });
  });

  it('reads every variable', () => {
    const s = readMaterializerSettings({
      SRPO_SET_TTL_MS: '5',
      SRPO_GROUP_TTL_MS: '6',
      SRPO_DEDUPE_RETENTION_MS: '9',
      SRPO_MAX_BROKER_SKEW_MS: '4',
      SRPO_MAX_LATENESS_MS: '8',
      SRPO_ADVANTAGE_STD: 'population',
      SRPO_ADVANTAGE_EPS: '0.5',
      SRPO_PROGRESS_FALLBACK: 'true',
      // Not a setting that decides sets and groups: ignored here.
      SRPO_MATERIALIZER_ROLES: 'nonsense',
    });
    expect(s).toMatchObject({ setTtlMs: 5, groupTtlMs: 6, dedupeRetentionMs: 9, maxBrokerSkewMs: 4, maxLatenessMs: 8 });
    expect(s.objective).toMatchObject({ advantageStd: 'population', advantageEps: 0.5, progress: { enabled: true } });
  });

  it('derives the dedupe window from the lateness allowance, and accepts one as long or longer', () => {
    expect(readMaterializerSettings({ SRPO_MAX_LATENESS_MS: '3600000' })).toMatchObject({ dedupeRetentionMs: 3_600_000, maxLatenessMs: 3_600_000 });
    expect(readMaterializerSettings({ SRPO_DEDUPE_RETENTION_MS: '86400000' }).dedupeRetentionMs).toBe(86_400_000);
    expect(readMaterializerSettings({ SRPO_DEDUPE_RETENTION_MS: '100', SRPO_MAX_LATENESS_MS: '0' }).dedupeRetentionMs).toBe(100);
  });

  it('refuses a dedupe window shorter than the lateness allowance, naming SRPO_DEDUPE_RETENTION_MS', () => {
    // The old defaults: a 10 min window under a 24 h allowance, where late duplicates were processed twice.
    for (const env of [
      { SRPO_DEDUPE_RETENTION_MS: '600000', SRPO_MAX_LATENESS_MS: '86400000' },
      { SRPO_DEDUPE_RETENTION_MS: '599999' },
      { SRPO_DEDUPE_RETENTION_MS: '3599999', SRPO_MAX_LATENESS_MS: '3600000' },
    ]) {
      const error = refusal(env);
      expect(error.field).toBe('SRPO_DEDUPE_RETENTION_MS');
      expect(error.message).toMatch(/^invalid configuration SRPO_DEDUPE_RETENTION_MS: must be >= SRPO_MAX_LATENESS_MS/);
    }
  });

  it('keeps the broker skew below the set and group windows: a sixth of the shorter by default, at most 10 s; a longer one is refused', () => {
    expect(readMaterializerSettings({ SRPO_SET_TTL_MS: '6000' }).maxBrokerSkewMs).toBe(1_000);
    expect(readMaterializerSettings({ SRPO_GROUP_TTL_MS: '3000' }).maxBrokerSkewMs).toBe(500);
    expect(readMaterializerSettings({ SRPO_MAX_BROKER_SKEW_MS: '59999' }).maxBrokerSkewMs).toBe(59_999);
    for (const env of [{ SRPO_MAX_BROKER_SKEW_MS: '3000000' }, { SRPO_MAX_BROKER_SKEW_MS: '5000', SRPO_GROUP_TTL_MS: '5000' }]) {
      expect(refusal(env).field).toBe('SRPO_MAX_BROKER_SKEW_MS');
    }
  });

  it.each([
    ['SRPO_SET_TTL_MS', '0'],
    ['SRPO_MAX_BROKER_SKEW_MS', '-1'],
    ['SRPO_GROUP_TTL_MS', 'soon'],
    ['SRPO_MAX_LATENESS_MS', '-1'],
    ['SRPO_ADVANTAGE_STD', 'median'],
    ['SRPO_ADVANTAGE_EPS', 'x'],
    ['SRPO_PROGRESS_FALLBACK', 'maybe'],
    ['SRPO_MAX_FUTURE_SKEW_MS', '3600000'],
  ])('throws a ConfigError naming %s', (name, value) => {
    const error = refusal({ [name]: value });
    expect(error.field).toBe(name);
    expect(error.message).toContain(`invalid configuration ${name}:`);
  });
});

describe('readMaterializerSettings: SRPO_REWARD_WINDOWS', () => {
  it('reads per-source windows in ms or with s/m/h/d units; none by default', () => {
    expect(readMaterializerSettings({}).rewardWindows).toEqual({});
    expect(readMaterializerSettings({ SRPO_REWARD_WINDOWS: 'human=7d, ci=1h,judge=10m,fast=30s,raw=1500,x.y-z_1=2ms' }).rewardWindows).toEqual({
      human: 7 * 86_400_000,
      ci: 3_600_000,
      judge: 600_000,
      fast: 30_000,
      raw: 1500,
      'x.y-z_1': 2,
    });
  });

  it.each([
    ['human', /not source=duration/],
    ['human=7w', /not source=duration/],
    ['human=-1d', /not source=duration/],
    ['human=0', /must be 1 ms to 30d/],
    ['human=31d', /must be 1 ms to 30d/],
    ['ci=1h,ci=2h', /names source ci twice/],
    ['h$=1h', /only letters, digits/],
    [`${'s'.repeat(65)}=1h`, /65 characters long; the limit is 64/],
    [Array.from({ length: 33 }, (_, i) => `s${i}=1h`).join(','), /names 33 sources; the limit is 32/],
  ])('refuses %s, naming the variable', (value, message) => {
    expect(() => readMaterializerSettings({ SRPO_REWARD_WINDOWS: value })).toThrow(ConfigError);
    expect(() => readMaterializerSettings({ SRPO_REWARD_WINDOWS: value })).toThrow(/SRPO_REWARD_WINDOWS/);
    expect(() => readMaterializerSettings({ SRPO_REWARD_WINDOWS: value })).toThrow(message);
  });
});
