import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { Partitioners, type Kafka } from 'kafkajs';
import {
  EventCodec,
  sealOutput,
  type ActiveSet,
  type AdvantageGroup,
  type AgentOutput,
  type ContentKey,
  type KafkaCoordinates,
  type SetMember,
} from '@srpo/events';
// Type only: the fixtures must not load TensorFlow into every test that imports @srpo/testing.
import type { TransformerConfig } from '@srpo/policy';

/*
 * Advantage groups as the materializer builds them, for the tests of the learner, audit and
 * replay (apps/learner, libs/audit, the CLI's audit and replay tests): one set of fixtures, so
 * the CLI's tests never import the learner app's.
 */

/** A model small enough that an update takes milliseconds. */
export const TINY_MODEL: TransformerConfig = { vocabSize: 16, dModel: 8, nLayers: 1, nHeads: 2, maxSeqLen: 16 };
export const TINY_MODEL_JSON = JSON.stringify(TINY_MODEL);
export const SEED = 7;

export function tempDir(label: string): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), `srpo-learner-${label}-`));
}

let nextOffset = 1000;

/** Fresh coordinates on `topic` (one counter for every fixture, so no two events share an offset). */
export function fixtureCoordinates(topic: string, partition = 0): KafkaCoordinates {
  return { topic, partition, offset: nextOffset++ };
}
const coords = fixtureCoordinates;

export interface MemberSpec {
  outputId: string;
  context?: number[];
  response?: number[];
  logpOld: number[];
  lossMask?: boolean[];
  policyId?: string;
  version?: number;
  temperature?: number;
  subjectId?: string;
  /** Seal the output's tokens under this content key (docs/erasure.md). */
  seal?: ContentKey;
}

const codec = new EventCodec();

/**
 * A set member as the materializer builds it: a summary plus the AgentOutput's bytes.
 * Log-probs go through Avro as float32, so tests compare against `Math.fround` values.
 */
export function member(spec: MemberSpec): SetMember {
  const response = spec.response ?? [4, 5, 6];
  const output: AgentOutput = {
    outputId: spec.outputId,
    episodeId: `ep-${spec.outputId}`,
    step: 0,
    agentId: `agent-${spec.outputId}`,
    role: 'solver',
    policyId: spec.policyId ?? 'solver',
    policyVersion: spec.version ?? 0,
    contextRef: 'ctx',
    contextTokenIds: spec.context ?? [1, 2, 3],
    responseTokenIds: response,
    behaviourLogProbs: spec.logpOld,
    lossMask: spec.lossMask ?? response.map(() => true),
    sampling: { temperature: spec.temperature ?? 1, topK: 0, maxNewTokens: response.length, seed: null, stopTokenIds: [] },
    startedAtMs: 1_767_225_600_000,
    eventTimeMs: 1_767_225_600_000,
    tokenIdOrigin: 'sampled',
    turn: 0,
    parentOutputId: null,
    tokenDrift: null,
    malformedToolCall: false,
    subjectId: spec.subjectId ?? null,
    sealed: null,
  };
  const written = spec.seal ? sealOutput(output, spec.seal) : output;
  return {
    outputId: output.outputId,
    agentId: output.agentId,
    role: output.role,
    policyId: output.policyId,
    policyVersion: output.policyVersion,
    temperature: output.sampling.temperature,
    output: codec.encode('AgentOutput', written),
    source: coords('srpo.agent-outputs', 1),
  };
}

export function activeSet(setId: string, members: SetMember[]): ActiveSet {
  return {
    setId,
    episodeId: `ep-${setId}`,
    taskId: 'task-1',
    step: 0,
    position: 'solve',
    workflowKind: 'JOINT',
    groupKey: 'task-1/solve',
    expectedGroupSize: null,
    policyId: 'solver',
    status: 'COMPLETE',
    invalidReason: null,
    missingOutputIds: [],
    members,
    reward: 1,
    rewardSource: 'OUTCOME',
    success: true,
    progress: null,
    transitionSource: coords('srpo.transitions', 1),
    outcomeSource: coords('srpo.episode-outcomes', 1),
    eventTimeMs: 1_767_225_600_000,
    correction: false,
    subjectIds: [],
  };
}

export function advantageGroup(groupId: string, sets: { set: ActiveSet; advantage: number }[], policyId = 'solver'): AdvantageGroup {
  return {
    groupId,
    groupKey: 'task-1/solve',
    policyId,
    closeReason: 'SIZE',
    expectedSize: sets.length,
    sets: sets.map((s) => ({ set: s.set, advantage: s.advantage, advantageFromProgress: false, setSource: coords('srpo.active-sets', 2) })),
    rewardMean: 0,
    rewardStd: 1,
    degenerate: false,
    objectiveConfig: '{"advantageStd":"sample","advantageEps":1e-6}',
    eventTimeMs: 1_767_225_600_000,
  };
}

/** Writes groups to a topic (idempotent producer, acks from all replicas, keyed by policy), as the materializer would. */
export async function produceGroups(kafka: Kafka, topic: string, groups: readonly AdvantageGroup[]): Promise<void> {
  const producer = kafka.producer({ idempotent: true, createPartitioner: Partitioners.DefaultPartitioner });
  await producer.connect();
  try {
    await producer.send({ topic, acks: -1, messages: groups.map((g) => ({ key: g.policyId, value: codec.encode('AdvantageGroup', g) })) });
  } finally {
    await producer.disconnect();
  }
}
