import type { AgentEvent, AgentOutput, EpisodeOutcome, Transition } from '@srpo/events';
import { outcome, output, transition } from '@srpo/testing';

/**
 * The valid stream the corpus is interleaved with. Event times are offsets from
 * `CORPUS_T`; the materializer runs with SRPO_SET_TTL_MS = SRPO_GROUP_TTL_MS = 5000.
 *
 * Groups it must produce, in both a clean run and the corpus run:
 * - `worker|g1` (declared size 3, SIZE): v1, v2, v3 with outcome rewards 1, 0, 1.
 * - `worker|g2` (declared size 2, SIZE): v4 with immediate reward 1, and v5 whose
 *   outcome (0.25) only arrives in phase 3, 5 s of event time after phase 1's last
 *   event, while its set waits: a refused event that moved stream time would
 *   expire that set (REWARD_MISSING_AT_TTL) instead.
 * - `worker|task-d/solve` (undeclared, DEADLINE): d1 (reward 1), d2 (reward 0).
 * - `worker|task-clock/solve` (DEADLINE): c1 at +20 s and c2 at +40 s, which move
 *   the watermark past every deadline (sets, groups, the orphan outcome).
 *
 * Outputs are sampled with version 0 of policy `worker`, which the run announces
 * on the PolicyVersion topic before anything else (as a learner's initial
 * weights); the learner under test then trains version 0 onwards.
 */
export const CORPUS_T = 1_700_000_000_000;
export const PUBLISHED_POLICY_VERSION = 0;

export type Phase = 'outputs' | 'transitions' | 'late' | 'clock' | 'clock2';
/**
 * c1 and c2 are separate phases: the materializer reads the outputs and transitions topics
 * independently, so with c2's events already produced it could see c2's output (+40 s)
 * before c1's transition and expire c1's output at the set TTL (seen once in CI under load).
 */
export const PHASES: readonly Phase[] = ['outputs', 'transitions', 'late', 'clock', 'clock2'];

const at = (ms: number) => ({ eventTimeMs: CORPUS_T + ms, startedAtMs: CORPUS_T + ms });

function o(episodeId: string, n: number, ms: number, patch: Partial<AgentOutput> = {}): AgentEvent {
  return { type: 'AgentOutput', value: output(episodeId, n, { ...at(ms), policyVersion: PUBLISHED_POLICY_VERSION, ...patch }) };
}
function t(episodeId: string, outputs: number[], ms: number, patch: Partial<Transition> = {}): AgentEvent {
  return { type: 'Transition', value: transition(episodeId, outputs, { eventTimeMs: CORPUS_T + ms, ...patch }) };
}
function r(episodeId: string, reward: number, ms: number, patch: Partial<EpisodeOutcome> = {}): AgentEvent {
  return { type: 'EpisodeOutcome', value: outcome(episodeId, reward, { eventTimeMs: CORPUS_T + ms, ...patch }) };
}

const g1 = { groupKey: 'g1', expectedGroupSize: 3 };
const g2 = { groupKey: 'g2', expectedGroupSize: 2 };

/** The valid events of each phase, in the order they are produced. */
export function validStream(): Record<Phase, AgentEvent[]> {
  return {
    outputs: [
      o('v1', 0, 10),
      o('v1', 1, 11),
      // Revision 1: the corpus's revision 0 of it comes later and is refused as SUPERSEDED_OUTCOME.
      r('v1', 1, 12, { revision: 1 }),
      o('v2', 0, 20),
      o('v2', 1, 21),
      r('v2', 0, 22),
      o('v3', 0, 30),
      o('v3', 1, 31),
      r('v3', 1, 32),
      o('v4', 0, 40),
      o('v5', 0, 50),
      o('d1', 0, 100),
      o('d2', 0, 200),
    ],
    transitions: [
      t('v1', [0, 1], 13, g1),
      t('v2', [0, 1], 23, g1),
      t('v3', [0, 1], 33, g1),
      t('v4', [0], 41, { ...g2, reward: 1 }),
      t('v5', [0], 51, g2),
      t('d1', [0], 101, { taskId: 'task-d', reward: 1 }),
      t('d2', [0], 201, { taskId: 'task-d', reward: 0 }),
    ],
    late: [r('v5', 0.25, 52)],
    clock: [o('c1', 0, 20_000), t('c1', [0], 20_000, { taskId: 'task-clock', reward: 1 })],
    clock2: [o('c2', 0, 40_000), t('c2', [0], 40_000, { taskId: 'task-clock', reward: 1 })],
  };
}

/** Set ids of the valid stream, each of which must land in exactly one group. */
export const VALID_SET_IDS = ['v1/t0', 'v2/t0', 'v3/t0', 'v4/t0', 'v5/t0', 'd1/t0', 'd2/t0', 'c1/t0', 'c2/t0'];
