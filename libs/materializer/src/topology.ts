import { DEFAULT_EVENT_LIMITS, type EventCodec, type EventLimits, type TopicCatalog } from '@srpo/events';
import type { ObjectiveConfig } from '@srpo/srpo';
import { ActiveSetProcessor } from './active-set.processor';
import { AdvantageGroupProcessor } from './advantage-group.processor';
import type { ErasedContent } from './erased-content';

/** The settings that decide sets and groups: the live materializer and a faithful re-materialization use the same values. */
export interface MaterializerSettings {
  setTtlMs: number;
  groupTtlMs: number;
  /** Per reward source, how long a set whose members are all there waits for its outcome (SRPO_REWARD_WINDOWS); others wait `setTtlMs`. */
  rewardWindows?: Readonly<Record<string, number>>;
  dedupeRetentionMs: number;
  /** How far an event may be ahead of its record's Kafka timestamp (see `ActiveSetProcessorOptions`). */
  maxBrokerSkewMs: number;
  maxLatenessMs: number;
  objective: ObjectiveConfig;
  limits?: EventLimits;
}

/** One stage of the graph: its processor, what it reads, and its partition count (one task per partition). */
export interface Stage<P> {
  processor: P;
  inputTopics: string[];
  partitions: number;
}

/**
 * The materializer's processing graph, built once for every runtime that runs it: the live
 * consumer runners (apps/materializer) and the in-process re-materialization (replay).
 * - sets: agent-outputs, transitions and episode-outcomes → active-sets (one task per raw partition);
 * - groups: active-sets → advantage-groups (one task per active-sets partition).
 *
 * `latestPolicyVersion` feeds the live set processor's staleness view, `erased` both stages'
 * view of erased content keys (the erasures topic); a re-materialization leaves them out.
 */
export function materializerTopology(
  topics: TopicCatalog,
  codec: EventCodec,
  settings: MaterializerSettings,
  options: { latestPolicyVersion?: (policyId: string) => number | undefined; erased?: ErasedContent } = {},
): { sets: Stage<ActiveSetProcessor>; groups: Stage<AdvantageGroupProcessor> } {
  return {
    sets: {
      processor: new ActiveSetProcessor({
        topics,
        codec,
        setTtlMs: settings.setTtlMs,
        rewardWindows: settings.rewardWindows ?? {},
        dedupeRetentionMs: settings.dedupeRetentionMs,
        maxBrokerSkewMs: settings.maxBrokerSkewMs,
        maxLatenessMs: settings.maxLatenessMs,
        limits: settings.limits ?? DEFAULT_EVENT_LIMITS,
        ...(options.latestPolicyVersion ? { latestPolicyVersion: options.latestPolicyVersion } : {}),
        ...(options.erased ? { erased: options.erased } : {}),
      }),
      inputTopics: [topics.agentOutputs.name, topics.transitions.name, topics.episodeOutcomes.name],
      partitions: topics.agentOutputs.partitions,
    },
    groups: {
      processor: new AdvantageGroupProcessor({
        topics,
        codec,
        objective: settings.objective,
        groupTtlMs: settings.groupTtlMs,
        dedupeRetentionMs: settings.dedupeRetentionMs,
        ...(options.erased ? { erased: options.erased } : {}),
      }),
      inputTopics: [topics.activeSets.name],
      partitions: topics.activeSets.partitions,
    },
  };
}
