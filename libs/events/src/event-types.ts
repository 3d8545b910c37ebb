/**
 * TypeScript shapes of the events in `schemas/`. Field names and nullability
 * mirror the Avro schemas exactly; `event-types.spec.ts` checks every schema
 * field against a sample value so the two cannot drift silently.
 */
export type WorkflowKind = 'FIXED' | 'JOINT' | 'ROUTED' | 'MIXED' | 'SEARCH' | 'OTHER';
export const WORKFLOW_KINDS: readonly WorkflowKind[] = ['FIXED', 'JOINT', 'ROUTED', 'MIXED', 'SEARCH', 'OTHER'];

export interface KafkaCoordinates {
  topic: string;
  partition: number;
  offset: number;
}

export interface SamplingParams {
  temperature: number;
  topK: number;
  maxNewTokens: number;
  seed: number | null;
  stopTokenIds: number[];
}

export interface AgentOutput {
  outputId: string;
  episodeId: string;
  step: number;
  agentId: string;
  role: string;
  policyId: string;
  policyVersion: number;
  contextRef: string;
  contextTokenIds: number[];
  responseTokenIds: number[];
  behaviourLogProbs: number[];
  lossMask: boolean[];
  sampling: SamplingParams;
  startedAtMs: number;
  eventTimeMs: number;
  /** `sampled` (ids as the sampler produced them) or `retokenized` (srpo gateway re-tokenized an upstream's text). */
  tokenIdOrigin: TokenIdOrigin;
  /** Turn of a multi-turn conversation (0-based) among its agent's outputs at this step. */
  turn: number;
  /** The previous turn, whose answer this turn's prompt continues; null for a first turn. */
  parentOutputId: string | null;
  /** With a parent: whether the context lost the parent's sampled tokens (re-tokenized differently); null when not checked. */
  tokenDrift: boolean | null;
  /** Tool-call text that did not parse as calls; answered as text. */
  malformedToolCall: boolean;
  /** Opaque id of the data subject (end user) whose content the event holds, for erasure; null when none is said. */
  subjectId: string | null;
  /** The token ids, sealed under the subject's content key (then both id lists are empty here); null in the clear. */
  sealed: SealedContent | null;
}

/** User content encrypted for erasure by key deletion (`content-seal.ts`, docs/erasure.md). */
export interface SealedContent {
  /** `aes-256-gcm/v1`. */
  scheme: string;
  /** The content key's id in the store (never the key). */
  keyId: string;
  nonce: Buffer;
  /** The sealed token ids with GCM's 16-byte tag appended. */
  ciphertext: Buffer;
}

export const TOKEN_ID_ORIGINS = ['sampled', 'retokenized'] as const;
export type TokenIdOrigin = (typeof TOKEN_ID_ORIGINS)[number];

export interface RoutingDecision {
  routerOutputId: string | null;
  selectedAgentIds: string[];
}

export interface Transition {
  transitionId: string;
  episodeId: string;
  step: number;
  preStateId: string;
  taskId: string;
  position: string;
  consumedOutputIds: string[];
  expectedCardinality: number;
  workflowKind: WorkflowKind;
  routing: RoutingDecision | null;
  groupKey: string | null;
  expectedGroupSize: number | null;
  observationDigest: string;
  reward: number | null;
  done: boolean;
  eventTimeMs: number;
  /** The reward source whose outcome a set without an immediate reward waits for (its window: SRPO_REWARD_WINDOWS); null: the default window. */
  rewardSource: string | null;
  /** Opaque id of the data subject (end user) whose content the event holds, for erasure; null when none is said. */
  subjectId: string | null;
}

export interface EpisodeOutcome {
  episodeId: string;
  taskId: string;
  outcomeReward: number;
  success: boolean;
  verifier: string;
  verifierDetails: Record<string, string>;
  observationDigests: string[];
  turns: number;
  eventTimeMs: number;
  /** Kind of reward source (program, judge, human, ci, ...); '' when not said. */
  rewardSource: string;
  /** A higher revision supersedes the episode's earlier outcome (docs/rewards.md). */
  revision: number;
  /** Opaque id of the data subject (end user) whose content the event holds, for erasure; null when none is said. */
  subjectId: string | null;
}

/**
 * A member of an active set. Its content travels as the original AgentOutput
 * bytes (`output`); decode it with `decodeMemberOutput`.
 */
export interface SetMember {
  outputId: string;
  agentId: string;
  role: string;
  policyId: string;
  policyVersion: number;
  temperature: number;
  output: Buffer;
  source: KafkaCoordinates;
}

export type SetStatus = 'COMPLETE' | 'INVALID';
export type RewardSource = 'IMMEDIATE' | 'OUTCOME' | 'NONE';

export interface ActiveSet {
  setId: string;
  episodeId: string;
  taskId: string;
  step: number;
  position: string;
  workflowKind: WorkflowKind;
  groupKey: string;
  expectedGroupSize: number | null;
  policyId: string;
  status: SetStatus;
  invalidReason: string | null;
  missingOutputIds: string[];
  members: SetMember[];
  reward: number;
  rewardSource: RewardSource;
  success: boolean | null;
  progress: number | null;
  transitionSource: KafkaCoordinates;
  outcomeSource: KafkaCoordinates | null;
  eventTimeMs: number;
  /** A set emitted again for a revised outcome (same `setId`): it replaces the earlier copy in an open group. */
  correction: boolean;
  /** The distinct, sorted subjects of the set's members, transition and (when its reward came from it) outcome. */
  subjectIds: string[];
}

export type GroupCloseReason = 'SIZE' | 'DEADLINE';

export interface GroupedSet {
  set: ActiveSet;
  advantage: number;
  advantageFromProgress: boolean;
  setSource: KafkaCoordinates;
}

export interface AdvantageGroup {
  groupId: string;
  groupKey: string;
  policyId: string;
  closeReason: GroupCloseReason;
  expectedSize: number | null;
  sets: GroupedSet[];
  rewardMean: number;
  rewardStd: number;
  degenerate: boolean;
  objectiveConfig: string;
  eventTimeMs: number;
}

export interface PolicyUpdate {
  updateId: string;
  policyId: string;
  versionBefore: number;
  versionAfter: number;
  weightsHashBefore: string;
  weightsHashAfter: string;
  groupIds: string[];
  groupSources: KafkaCoordinates[];
  objective: string;
  loss: number;
  gradNorm: number;
  diagnostics: Record<string, number>;
  checkpointUri: string;
  backend: string;
  eventTimeMs: number;
}

export interface PolicyVersion {
  policyId: string;
  version: number;
  weightsHash: string;
  checkpointUri: string;
  updateId: string | null;
  eventTimeMs: number;
}

export interface DeadLetter {
  originalKey: Buffer | null;
  originalValue: Buffer | null;
  source: KafkaCoordinates;
  reasonCode: string;
  reason: string;
  processor: string;
  details: Record<string, string>;
  deadLetteredAtMs: number;
}

/**
 * An erasure (docs/erasure.md): the content keys `keyIds` of a subject or an episode were
 * deleted, so content sealed under them is unreadable. Readers leave it out and count it.
 */
export interface Erasure {
  erasureId: string;
  scope: 'subject' | 'episode';
  /** The subject id or episode id erased. */
  target: string;
  /** Ids of the content keys deleted; never keys. */
  keyIds: string[];
  eventTimeMs: number;
}

/** AgentBrew offline training: the instruction a raw trajectory is inferred to have fulfilled. */
export interface InferredTask {
  runId: string;
  episodeId: string;
  originalTaskId: string;
  inferrer: string;
  usable: boolean;
  excludedReason: string | null;
  instructionTokenIds: number[];
  label: string;
  successfulSteps: number;
  failedSteps: number;
  scorerPolicyId: string;
  scorerVersion: number;
  sources: KafkaCoordinates[];
  eventTimeMs: number;
}

/** AgentBrew offline training: the PMI credit and training weight of one action. */
export interface ActionCredit {
  runId: string;
  episodeId: string;
  outputId: string;
  step: number;
  role: string;
  creditMode: string;
  successful: boolean;
  prefixIndex: number | null;
  nllBefore: number | null;
  nllAfter: number | null;
  credit: number;
  weight: number;
  source: KafkaCoordinates;
  eventTimeMs: number;
}

export interface EventMap {
  AgentOutput: AgentOutput;
  Transition: Transition;
  EpisodeOutcome: EpisodeOutcome;
  ActiveSet: ActiveSet;
  AdvantageGroup: AdvantageGroup;
  PolicyUpdate: PolicyUpdate;
  PolicyVersion: PolicyVersion;
  DeadLetter: DeadLetter;
  InferredTask: InferredTask;
  ActionCredit: ActionCredit;
  Erasure: Erasure;
}

export type EventType = keyof EventMap;
export const EVENT_TYPES: readonly EventType[] = [
  'AgentOutput',
  'Transition',
  'EpisodeOutcome',
  'ActiveSet',
  'AdvantageGroup',
  'PolicyUpdate',
  'PolicyVersion',
  'DeadLetter',
  'InferredTask',
  'ActionCredit',
  'Erasure',
];

/** A decoded event of any type, discriminated by `type`. */
export type AnyEvent = { [T in EventType]: { type: T; value: EventMap[T] } }[EventType];
