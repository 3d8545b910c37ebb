import { DEFAULT_EVENT_LIMITS, EventCodec, EventLimits, TopicCatalog } from '@srpo/events';

/** Settings of `ActiveSetProcessor` (its rules are described on the class). */
export interface ActiveSetProcessorOptions {
  topics: TopicCatalog;
  /** Decodes stored outputs when their set is emitted. */
  codec: EventCodec;
  /** Event-time budget for a set's members and reward to arrive (default 60 s). */
  setTtlMs: number;
  /** How long closed episodes' ids are kept to recognise late duplicates (default 10 min). */
  dedupeRetentionMs: number;
  /** Events this far ahead of stream time are refused as clock skew (default 1 h). */
  maxFutureSkewMs: number;
  /** Events this far behind stream time are refused as clock skew (default 24 h). */
  maxLatenessMs: number;
  /** Deadline scans run at most once per this much stream time (default 1 s). */
  scanIntervalMs: number;
  limits: EventLimits;
  /**
   * The newest version of a policy its learner has published (the PolicyVersion
   * topic), or undefined while none is known. An output sampled with a newer
   * version is dead-lettered as FUTURE_POLICY_VERSION: agents learn of versions
   * only from that topic, so no honest output can be ahead of it. Left out, the
   * check is off (replays, tools).
   */
  latestPolicyVersion?: (policyId: string) => number | undefined;
}

export const DEFAULT_ACTIVE_SET_OPTIONS: Omit<ActiveSetProcessorOptions, 'topics' | 'codec'> = {
  setTtlMs: 60_000,
  dedupeRetentionMs: 600_000,
  maxFutureSkewMs: 3_600_000,
  maxLatenessMs: 86_400_000,
  scanIntervalMs: 1_000,
  limits: DEFAULT_EVENT_LIMITS,
};
