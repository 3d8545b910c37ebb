import { ConfigError } from '@srpo/core';
import { DEFAULT_EVENT_LIMITS } from '@srpo/events';
import { readMaterializerSettings } from './materializer-settings';

describe('readMaterializerSettings', () => {
  it('has the live materializer defaults', () => {
    const s = readMaterializerSettings({});
    expect(s).toMatchObject({
      setTtlMs: 60_000,
      groupTtlMs: 120_000,
      dedupeRetentionMs: 600_000,
      maxFutureSkewMs: 3_600_000,
      maxLatenessMs: 86_400_000,
      limits: DEFAULT_EVENT_LIMITS,
    });
    expect(s.objective).toMatchObject({ advantageStd: 'sample', advantageEps: 1e-6, progress: { enabled: false } });
  });

  it('reads every variable', () => {
    const s = readMaterializerSettings({
      SRPO_SET_TTL_MS: '5',
      SRPO_GROUP_TTL_MS: '6',
      SRPO_DEDUPE_RETENTION_MS: '0',
      SRPO_MAX_FUTURE_SKEW_MS: '7',
      SRPO_MAX_LATENESS_MS: '8',
      SRPO_ADVANTAGE_STD: 'population',
      SRPO_ADVANTAGE_EPS: '0.5',
      SRPO_PROGRESS_FALLBACK: 'true',
      // Not a setting that decides sets and groups: ignored here.
      SRPO_MATERIALIZER_ROLES: 'nonsense',
    });
    expect(s).toMatchObject({ setTtlMs: 5, groupTtlMs: 6, dedupeRetentionMs: 0, maxFutureSkewMs: 7, maxLatenessMs: 8 });
    expect(s.objective).toMatchObject({ advantageStd: 'population', advantageEps: 0.5, progress: { enabled: true } });
  });

  it.each([
    ['SRPO_SET_TTL_MS', '0'],
    ['SRPO_GROUP_TTL_MS', 'soon'],
    ['SRPO_MAX_LATENESS_MS', '-1'],
    ['SRPO_ADVANTAGE_STD', 'median'],
    ['SRPO_ADVANTAGE_EPS', 'x'],
    ['SRPO_PROGRESS_FALLBACK', 'maybe'],
  ])('throws a ConfigError naming %s', (name, value) => {
    let error: unknown;
    try {
      readMaterializerSettings({ [name]: value });
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as ConfigError).message).toContain(`invalid configuration ${name}:`);
  });
});
