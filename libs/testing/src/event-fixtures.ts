import { AgentEvent, AgentOutput, EpisodeOutcome, Transition } from '@srpo/events';

/** Small, valid events for tests and benchmarks of the materializer (test fixtures: no product source imports them). */
export function output(episodeId: string, n: number, patch: Partial<AgentOutput> = {}): AgentOutput {
  return {
    outputId: `${episodeId}/o${n}`,
    episodeId,
    step: 0,
    agentId: `worker-${n}`,
    role: 'worker',
    policyId: 'worker',
    policyVersion: 1,
    contextRef: 'ctx',
    contextTokenIds: [1, 2],
    responseTokenIds: [3, 4],
    behaviourLogProbs: [-0.5, -0.25],
    lossMask: [true, true],
    sampling: { temperature: 1, topK: 0, maxNewTokens: 4, seed: null, stopTokenIds: [] },
    startedAtMs: 1000,
    eventTimeMs: 1000,
    tokenIdOrigin: 'sampled',
    turn: 0,
    parentOutputId: null,
    tokenDrift: null,
    malformedToolCall: false,
    subjectId: null,
    sealed: null,
    ...patch,
  };
}

export function transition(episodeId: string, outputs: number[], patch: Partial<Transition> = {}): Transition {
  return {
    transitionId: `${episodeId}/t0`,
    episodeId,
    step: 0,
    preStateId: `${episodeId}/s0`,
    taskId: 'task-1',
    position: 'solve',
    consumedOutputIds: outputs.map((n) => `${episodeId}/o${n}`),
    expectedCardinality: outputs.length,
    workflowKind: 'JOINT',
    routing: null,
    groupKey: null,
    expectedGroupSize: null,
    observationDigest: 'obs-a',
    reward: null,
    done: true,
    eventTimeMs: 1000,
    rewardSource: null,
    subjectId: null,
    ...patch,
  };
}

export function outcome(episodeId: string, reward: number, patch: Partial<EpisodeOutcome> = {}): EpisodeOutcome {
  return {
    episodeId,
    taskId: 'task-1',
    outcomeReward: reward,
    success: reward > 0,
    verifier: 'test',
    verifierDetails: {},
    observationDigests: ['obs-0', 'obs-a'],
    turns: 1,
    eventTimeMs: 1000,
    rewardSource: '',
    revision: 0,
    subjectId: null,
    ...patch,
  };
}

/**
 * The fault tests' workload: `episodes` one-output episodes `<idPrefix><e>`, each an output and a
 * transition with an immediate reward (e mod 2), in groups of `groupSize` sets by declared size;
 * with the set ids the verifier expects.
 */
export function groupedEpisodes(idPrefix: string, episodes: number, groupSize: number): { events: AgentEvent[]; setIds: string[] } {
  const events: AgentEvent[] = [];
  const setIds: string[] = [];
  for (let e = 0; e < episodes; e++) {
    const id = `${idPrefix}${e}`;
    const t = 1_700_000_000_000 + e * 10;
    events.push({ type: 'AgentOutput', value: output(id, 0, { policyVersion: 0, eventTimeMs: t, startedAtMs: t }) });
    events.push({
      type: 'Transition',
      value: transition(id, [0], { groupKey: `task-${Math.floor(e / groupSize)}`, expectedGroupSize: groupSize, reward: e % 2, eventTimeMs: t }),
    });
    setIds.push(`${id}/t0`);
  }
  return { events, setIds };
}
