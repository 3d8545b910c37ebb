import type { JsonValue } from './json-columns';

/** Where an event lives in the log (same shape as `KafkaCoordinates` of @srpo/events). */
export interface Coordinates {
  topic: string;
  partition: number;
  offset: number;
}

/** Source events of one active set, as recorded in the ledger. */
export interface SetSources {
  setId: string;
  /** The ActiveSet event on the repartition topic (`active-sets`). */
  set: Coordinates;
  transition: Coordinates;
  /** The EpisodeOutcome that supplied the reward; null for immediate rewards. */
  outcome: Coordinates | null;
  /** Every member's AgentOutput, in set order. */
  members: { outputId: string; source: Coordinates }[];
}

export interface PolicyRecord {
  policyId: string;
  roles: string[];
  currentVersion: number;
  createdAtMs: number;
}

export interface PolicyVersionRecord {
  policyId: string;
  version: number;
  weightsHash: string;
  checkpointUri: string;
  /** Null for the initial weights. */
  updateId: string | null;
  createdAtMs: number;
}

/** The initial weights registered by {@link AuditStore.ensurePolicy}. */
export interface InitialVersion {
  version: number;
  weightsHash: string;
  checkpointUri: string;
  createdAtMs: number;
}

/** Everything recorded about one update, supplied by the learner. */
export interface UpdateRecordInput {
  updateId: string;
  policyId: string;
  versionBefore: number;
  /** Must be versionBefore + 1. */
  versionAfter: number;
  weightsHashBefore: string;
  weightsHashAfter: string;
  /** Objective config, learning rate, epochs, ...: whatever is needed to redo the update. */
  hyperparameters: Record<string, JsonValue>;
  seed: number;
  backend: string;
  codeVersion: string;
  loss: number;
  gradNorm: number;
  diagnostics: Record<string, number>;
  wallTimeMs: number;
  checkpointUri: string;
  /** Epoch ms of the commit, chosen by the caller (replays pass the original value). */
  committedAtMs: number;
}

export interface UpdateRecord extends UpdateRecordInput {
  /** `committedAtMs` as ISO-8601 UTC. */
  createdAt: string;
}

/** One consumed advantage group, as the ledger keeps it. */
export interface GroupLedgerInput {
  groupId: string;
  groupKey: string;
  /** The AdvantageGroup event's own coordinates. */
  source: Coordinates;
  setIds: string[];
  /** One per set, in `setIds` order. */
  advantages: number[];
  sources: SetSources[];
  /** The group's advantage settings, verbatim. */
  objectiveConfig: string;
}

export interface GroupLedgerRecord extends GroupLedgerInput {
  policyId: string;
  updateId: string;
  /** Index within the update. */
  position: number;
  createdAtMs: number;
}

/** An update with the groups it consumed, in order. */
export interface UpdateDetail extends UpdateRecord {
  groups: GroupLedgerRecord[];
}

export interface SkippedGroupInput {
  policyId: string;
  groupId: string;
  reason: string;
  detail: string | null;
  lag: number | null;
  policyVersion: number;
  source: Coordinates;
  createdAtMs: number;
}

export type SkippedGroupRecord = SkippedGroupInput;

/** Filters of {@link AuditStore.listUpdates}: `from <= committedAtMs < to`, oldest first. */
export interface UpdateQuery {
  policyId?: string;
  /** Epoch ms, inclusive. */
  from?: number;
  /** Epoch ms, exclusive. */
  to?: number;
  /** Default 100, at most 1000. */
  limit?: number;
}

/**
 * Statistics of one trained group, recorded with its update (see
 * {@link groupStatsFromGroup}). Times are the events' own (epoch ms).
 */
export interface GroupStatsInput {
  groupId: string;
  /** The sets' workflow kind (`FIXED`, `JOINT`, ...); null when the sets disagree. */
  workflowKind: string | null;
  setCount: number;
  memberCount: number;
  /** Mean reward of the group's sets. */
  rewardMean: number;
  /** Sets with `success === true`. */
  successCount: number;
  /** Sets whose success flag is known (not null). */
  successKnown: number;
  /** Learner version at training minus the oldest member's behaviour policy version. */
  lagMax: number;
  /** Same, averaged over members. */
  lagMean: number;
  /** The group event's time minus the earliest set or member event time. */
  fillLatencyMs: number;
  groupEventTimeMs: number;
}

export interface GroupStatsRecord extends GroupStatsInput {
  policyId: string;
  updateId: string;
  versionAfter: number;
  /** The update's commit time. */
  createdAtMs: number;
}

/** Filters of {@link AuditStore.listGroupStats}: `from <= createdAtMs < to`, oldest first. */
export interface GroupStatsQuery {
  policyId?: string;
  from?: number;
  to?: number;
  /** Default 1000, at most {@link MAX_GROUP_STATS_LIMIT}. */
  limit?: number;
}
