import { DEFAULT_EVENT_LIMITS, EventCodec, EventLimits, TopicCatalog } from '@srpo/events';
import type { ErasedContent } from './erased-content';

/** Settings of `ActiveSetProcessor` (its rules are described on the class). */
export interface ActiveSetProcessorOptions {
  topics: TopicCatalog;
  /** Decodes stored outputs when their set is emitted. */
  codec: EventCodec;
  /** Event-time budget for a set's members and reward to arrive (default 60 s). */
  setTtlMs: number;
  /**
   * Per reward source (`Transition.rewardSource`), the event time after its transition that a set
   * whose members all arrived waits for its episode's outcome (SRPO_REWARD_WINDOWS). A source not
   * named here, or none, waits `setTtlMs`. Members must arrive within `setTtlMs` whatever the source.
   */
  rewardWindows: Readonly<Record<string, number>>;
  /**
   * How long (event time after an episode's last event) its ids are kept to recognise late
   * duplicates. Left out, `maxLatenessMs`: a shorter window would forget an episode while a
   * duplicate of it could still be accepted, and process that duplicate as a new event.
   */
  dedupeRetentionMs: number;
  /**
   * Events this far ahead of their record's Kafka timestamp are refused as clock skew
   * (default 10 s, {@link DEFAULT_MAX_BROKER_SKEW_MS}). The broker refuses record timestamps
   * ahead of its clock on the raw topics, so stream time never runs further ahead of that
   * clock than both bounds, whatever a producer writes.
   */
  maxBrokerSkewMs: number;
  /** Events this far behind stream time are refused as clock skew (default 10 min, {@link DEFAULT_MAX_LATENESS_MS}). */
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
  /**
   * The content keys erased so far (the erasures topic, docs/erasure.md): outputs sealed under
   * them are counted and kept out of every set; a set holding one is settled as erased, never
   * emitted. Left out, nothing is erased here (the learner still leaves such sets out).
   */
  erased?: ErasedContent;
}

/**
 * The lateness allowance by default (10 min), and so the default dedupe window of both processors.
 * Not longer: an event that far behind stream time cannot join a set (60 s to complete) or a group
 * (120 s) any more, so accepting it only costs state, which grows with rate × window (a one-hour
 * window held about a million episodes, 6.9 GB on disk, in the soak; docs/materializer.md). Later
 * events are dead-lettered as CLOCK_SKEW, counted and kept.
 */
export const DEFAULT_MAX_LATENESS_MS = 600_000;

/**
 * How far an event may be ahead of its record's Kafka timestamp by default (10 s): room for the
 * clock differences of NTP-synced hosts (a gateway client's and the gateway's), and a sixth of
 * the 60 s a set has to complete (docs/materializer.md).
 */
export const DEFAULT_MAX_BROKER_SKEW_MS = 10_000;

/** The skew allowance when none is set: the default, but never more than a sixth of the shortest window (set or group). */
export function defaultMaxBrokerSkewMs(windowMs: number): number {
  return Math.min(DEFAULT_MAX_BROKER_SKEW_MS, Math.floor(windowMs / 6));
}

export const DEFAULT_ACTIVE_SET_OPTIONS: Omit<ActiveSetProcessorOptions, 'topics' | 'codec'> = {
  setTtlMs: 60_000,
  rewardWindows: {},
  dedupeRetentionMs: DEFAULT_MAX_LATENESS_MS,
  maxBrokerSkewMs: DEFAULT_MAX_BROKER_SKEW_MS,
  maxLatenessMs: DEFAULT_MAX_LATENESS_MS,
  scanIntervalMs: 1_000,
  limits: DEFAULT_EVENT_LIMITS,
};
