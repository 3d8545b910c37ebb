import type { RecentErasures } from '@srpo/store';

/** One erasure as the dashboard shows it: what was erased, when, and how many content keys went (never the keys, nor their ids). */
export interface ErasureRow {
  erasureId: string;
  scope: 'subject' | 'episode';
  /** The subject id or episode id erased. */
  target: string;
  erasedAtMs: number;
  /** `erasedAtMs` as ISO 8601 (UTC). */
  erasedAt: string;
  keysDeleted: number;
}

/** What this learner process left out because of erasures, since it started (its Prometheus counters). */
export interface LearnerErasureCounts {
  policyId: string;
  /** `learner_sets_erased_total`: sets left out of their group because a member's content key was deleted. */
  setsErased: number;
  /** `learner_groups_skipped_total{reason="erased"}`: groups with no set left, skipped as `erased`. */
  groupsSkippedErased: number;
}

/** `GET /erasures`: the store's newest erasures (newest first) and how many it holds, with the learner's counts. */
export interface ErasuresView {
  erasures: ErasureRow[];
  /** Erasures in the store, all of them (the list holds at most `limit`). */
  total: number;
  learner: LearnerErasureCounts;
}

/** The view of a page of the erasure log: key ids are counted, not copied. */
export function erasuresView(recent: RecentErasures, learner: LearnerErasureCounts): ErasuresView {
  return {
    erasures: recent.erasures.map((e) => ({
      erasureId: e.erasureId,
      scope: e.scope,
      target: e.target,
      erasedAtMs: e.erasedAtMs,
      erasedAt: new Date(e.erasedAtMs).toISOString(),
      keysDeleted: e.keyIds.length,
    })),
    total: recent.total,
    learner,
  };
}
