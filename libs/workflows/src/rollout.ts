import type { WorkflowKind } from '@srpo/events';

/** The workflows the agents can play; `mixed` in the demo interleaves several of them. */
export type WorkflowName = 'fixed' | 'joint' | 'routed' | 'search';
export const WORKFLOW_NAMES: readonly WorkflowName[] = ['fixed', 'joint', 'routed', 'search'];

export type Role = 'solver' | 'checker' | 'worker' | 'router' | 'aggregator' | 'searcher';
export const ROLES: readonly Role[] = ['solver', 'checker', 'worker', 'router', 'aggregator', 'searcher'];

/** One sampled response, before it becomes an AgentOutput. */
export interface Draw {
  policyId: string;
  /** Version of the weights that sampled it. */
  policyVersion: number;
  /** The context actually conditioned on (after left-truncation). */
  contextTokens: number[];
  tokens: number[];
  /** Behaviour log-probs at `temperature`, one per token. */
  logProbs: number[];
  temperature: number;
  maxNewTokens: number;
  startedAtMs: number;
  finishedAtMs: number;
}

/**
 * Samples responses for a role with whatever policy (and version) the role uses
 * now. The agents' implementation samples with weights announced on Kafka; the
 * in-process benchmark samples with the weights it trains.
 */
export interface RoleSampler {
  sample(role: Role, contexts: readonly (readonly number[])[], maxNewTokens: number): Promise<Draw[]>;
}

/** A draw with its identity in the episode. */
export interface SampledOutput extends Draw {
  outputId: string;
  agentId: string;
  role: Role;
  step: number;
}

export interface StepTrace {
  step: number;
  /** Workflow position; with the task instance it forms the declared group key. */
  position: string;
  preStateId: string;
  /** The active set: every output this transition consumed (K = length). */
  consumed: SampledOutput[];
  /** Immediate reward of the set, or null to take the episode's outcome reward. */
  reward: number | null;
  observationDigest: string;
  routing: { routerOutputId: string; selectedAgentIds: string[] } | null;
  done: boolean;
}

export interface EpisodeOutcomeTrace {
  reward: number;
  success: boolean;
  details: Record<string, string>;
  observationDigests: string[];
  turns: number;
}

export interface EpisodeTrace {
  episodeId: string;
  taskId: string;
  workflow: WorkflowName;
  kind: WorkflowKind;
  steps: StepTrace[];
  outcome: EpisodeOutcomeTrace;
}

/** G rollouts of one task instance: the sets at each position form one advantage group of size G. */
export interface TaskRollouts {
  taskInstanceId: string;
  workflow: WorkflowName;
  groupSize: number;
  episodes: EpisodeTrace[];
}

/** A workflow: plays G rollouts of a fresh task with the given sampler. */
export interface Workflow {
  readonly name: WorkflowName;
  readonly kind: WorkflowKind;
  /** Roles that act in this workflow (each must be mapped to a policy). */
  readonly roles: readonly Role[];
  play(taskInstanceId: string, groupSize: number, sampler: RoleSampler): Promise<TaskRollouts>;
}

/** The group key an agent declares: one group per task instance and position. */
export function groupKeyOf(taskInstanceId: string, position: string): string {
  return `${taskInstanceId}/${position}`;
}

export function episodeIdOf(taskInstanceId: string, rollout: number): string {
  return `${taskInstanceId}.r${rollout}`;
}

export function outputIdOf(episodeId: string, step: number, agentId: string): string {
  return `${episodeId}.s${step}.${agentId}`;
}

export function transitionIdOf(episodeId: string, step: number): string {
  return `${episodeId}.t${step}`;
}

/** Gives each draw its identity. */
export function toOutput(draw: Draw, episodeId: string, step: number, role: Role, agentId: string): SampledOutput {
  return { ...draw, outputId: outputIdOf(episodeId, step, agentId), agentId, role, step };
}
