import { EventCodec } from './event-codec';
import type {
  ActionCredit,
  ActiveSet,
  AdvantageGroup,
  AgentOutput,
  DeadLetter,
  EpisodeOutcome,
  EventMap,
  EventType,
  InferredTask,
  KafkaCoordinates,
  PolicyUpdate,
  PolicyVersion,
  Transition,
} from './event-types';

/**
 * One valid, fully populated example of every event type. Used by
 * `srpo events roundtrip`, by the contract tests, and as documentation of what a
 * well-formed event looks like. `n` varies ids so samples can be told apart.
 */
let sampleCodec: EventCodec | undefined;

export function sampleEvents(n = 0, timeMs = 1_767_225_600_000): { [T in EventType]: EventMap[T] } {
  sampleCodec ??= new EventCodec();
  const episodeId = `ep-${n}`;
  const coords = (topic: string, offset: number): KafkaCoordinates => ({ topic, partition: n % 3, offset });
  const output: AgentOutput = {
    outputId: `${episodeId}/out-0`,
    episodeId,
    step: 0,
    agentId: 'solver-0',
    role: 'solver',
    policyId: 'solver',
    policyVersion: 3,
    contextRef: `task-${n}/prompt`,
    contextTokenIds: [1, 5, 9],
    responseTokenIds: [12, 7, 2],
    behaviourLogProbs: [-0.5, -1.25, -0.125],
    lossMask: [true, true, false],
    sampling: { temperature: 1, topK: 0, maxNewTokens: 8, seed: 42, stopTokenIds: [2] },
    startedAtMs: timeMs,
    eventTimeMs: timeMs + 5,
    tokenIdOrigin: 'sampled',
  };
  const transition: Transition = {
    transitionId: `${episodeId}/tr-0`,
    episodeId,
    step: 0,
    preStateId: `${episodeId}/s-0`,
    taskId: `task-${n}`,
    position: 'solve',
    consumedOutputIds: [output.outputId],
    expectedCardinality: 1,
    workflowKind: 'FIXED',
    routing: { routerOutputId: null, selectedAgentIds: ['solver-0'] },
    groupKey: `task-${n}/solve`,
    expectedGroupSize: 4,
    observationDigest: 'obs-1',
    reward: null,
    done: true,
    eventTimeMs: timeMs + 6,
  };
  const outcome: EpisodeOutcome = {
    episodeId,
    taskId: `task-${n}`,
    outcomeReward: 1,
    success: true,
    verifier: 'exact-match@1',
    verifierDetails: { expected: '7' },
    observationDigests: ['obs-0', 'obs-1'],
    turns: 1,
    eventTimeMs: timeMs + 7,
  };
  const activeSet: ActiveSet = {
    setId: transition.transitionId,
    episodeId,
    taskId: transition.taskId,
    step: 0,
    position: 'solve',
    workflowKind: 'FIXED',
    groupKey: `task-${n}/solve`,
    expectedGroupSize: 4,
    policyId: 'solver',
    status: 'COMPLETE',
    invalidReason: null,
    missingOutputIds: [],
    members: [
      {
        outputId: output.outputId,
        agentId: output.agentId,
        role: output.role,
        policyId: output.policyId,
        policyVersion: output.policyVersion,
        temperature: 1,
        output: sampleCodec.encode('AgentOutput', output),
        source: coords('srpo.agent-outputs', 10 + n),
      },
    ],
    reward: 1,
    rewardSource: 'OUTCOME',
    success: true,
    progress: 0.5,
    transitionSource: coords('srpo.transitions', 20 + n),
    outcomeSource: coords('srpo.episode-outcomes', 30 + n),
    eventTimeMs: timeMs + 7,
  };
  const group: AdvantageGroup = {
    groupId: `task-${n}/solve#${activeSet.setId}`,
    groupKey: activeSet.groupKey,
    policyId: 'solver',
    closeReason: 'SIZE',
    expectedSize: 1,
    sets: [{ set: activeSet, advantage: 0, advantageFromProgress: false, setSource: coords('srpo.active-sets', 40 + n) }],
    rewardMean: 1,
    rewardStd: 0,
    degenerate: true,
    objectiveConfig: '{"advantageStd":"sample","advantageEps":1e-6}',
    eventTimeMs: timeMs + 8,
  };
  const update: PolicyUpdate = {
    updateId: `upd-${n}`,
    policyId: 'solver',
    versionBefore: 3,
    versionAfter: 4,
    weightsHashBefore: 'a'.repeat(64),
    weightsHashAfter: 'b'.repeat(64),
    groupIds: [group.groupId],
    groupSources: [coords('srpo.advantage-groups', 50 + n)],
    objective: 'srpo',
    loss: -0.25,
    gradNorm: 0.75,
    diagnostics: { 'losses/clip_frac_low': 0, 'ratio/mean': 1 },
    checkpointUri: `file:///tmp/checkpoints/solver/4`,
    backend: 'tensorflow',
    eventTimeMs: timeMs + 9,
  };
  const version: PolicyVersion = {
    policyId: 'solver',
    version: 4,
    weightsHash: 'b'.repeat(64),
    checkpointUri: update.checkpointUri,
    updateId: update.updateId,
    eventTimeMs: timeMs + 10,
  };
  const deadLetter: DeadLetter = {
    originalKey: Buffer.from(episodeId),
    originalValue: Buffer.from([0xde, 0xad, 0xbe, 0xef]),
    source: coords('srpo.agent-outputs', 60 + n),
    reasonCode: 'DECODE_BAD_MAGIC',
    reason: 'bad magic bytes dead; expected c301 (Avro single-object encoding)',
    processor: 'active-set-materializer',
    details: { field: 'header' },
    deadLetteredAtMs: timeMs + 11,
  };
  const inferredTask: InferredTask = {
    runId: 'offline-1',
    episodeId,
    originalTaskId: `task-${n}`,
    inferrer: 'demo-env@1',
    usable: true,
    excludedReason: null,
    instructionTokenIds: [0, 13, 5, 1],
    label: '[BOS SOLVE 3 SEP]',
    successfulSteps: 1,
    failedSteps: 0,
    scorerPolicyId: 'solver',
    scorerVersion: 3,
    sources: [coords('srpo.agent-outputs', 10 + n), coords('srpo.transitions', 20 + n), coords('srpo.episode-outcomes', 30 + n)],
    eventTimeMs: timeMs + 12,
  };
  const actionCredit: ActionCredit = {
    runId: 'offline-1',
    episodeId,
    outputId: output.outputId,
    step: 0,
    role: 'solver',
    creditMode: 'adjacent',
    successful: true,
    prefixIndex: 1,
    nllBefore: 2.5,
    nllAfter: 1.25,
    credit: 1.25,
    weight: 1,
    source: coords('srpo.agent-outputs', 10 + n),
    eventTimeMs: timeMs + 13,
  };
  return {
    AgentOutput: output,
    Transition: transition,
    EpisodeOutcome: outcome,
    ActiveSet: activeSet,
    AdvantageGroup: group,
    PolicyUpdate: update,
    PolicyVersion: version,
    DeadLetter: deadLetter,
    InferredTask: inferredTask,
    ActionCredit: actionCredit,
  };
}
