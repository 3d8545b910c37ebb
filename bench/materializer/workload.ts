import type { AgentEvent } from '@srpo/events';
import { output, transition } from '@srpo/testing';

/**
 * The materializer benchmarks' workload (bench/materializer, bench/replay): AgentOutputs of
 * ~870 B (64 context and 96 response tokens with log-probs and mask), sets of 1–4 members,
 * groups of 4 declared on the transitions.
 */
export function bigOutput(episodeId: string, j: number, time: number) {
  const n = 96;
  return output(episodeId, j, {
    contextTokenIds: Array.from({ length: 64 }, (_, i) => (i * 7) % 50_000),
    responseTokenIds: Array.from({ length: n }, (_, i) => (i * 13 + j) % 50_000),
    behaviourLogProbs: Array.from({ length: n }, (_, i) => -((i % 17) + 1) / 7),
    lossMask: Array.from({ length: n }, () => true),
    eventTimeMs: time,
    startedAtMs: time,
  });
}

/**
 * Episodes `first` .. `first + episodes - 1` of the workload: a run can make it chunk by chunk
 * (bench/materializer/scaling.ts) and get the same events as one call.
 */
export function workload(episodes: number, time0: number, first = 0): AgentEvent[] {
  const events: AgentEvent[] = [];
  for (let e = first; e < first + episodes; e++) {
    const id = `ep${e}`;
    const k = 1 + (e % 4);
    for (let j = 0; j < k; j++) events.push({ type: 'AgentOutput', value: bigOutput(id, j, time0 + e) });
    events.push({
      type: 'Transition',
      value: transition(id, [...Array(k).keys()], {
        groupKey: `task-${Math.floor(e / 4)}`,
        expectedGroupSize: 4,
        reward: e % 3 === 0 ? 1 : 0,
        eventTimeMs: time0 + e,
      }),
    });
  }
  return events;
}
