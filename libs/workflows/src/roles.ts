import type { Role, WorkflowName } from './rollout';

/** Which roles each workflow needs a policy for. */
export const WORKFLOW_ROLES: Readonly<Record<WorkflowName, readonly Role[]>> = {
  fixed: ['solver', 'checker'],
  joint: ['worker', 'aggregator'],
  routed: ['router', 'worker', 'aggregator'],
  search: ['searcher'],
};

/**
 * Default policies: three, because every learner is a process with its own
 * TensorFlow. Roles that answer digit tasks share `actor`; the two roles that
 * judge (accept or reject, route or not) share `judge`; the aggregator, whose
 * job is copying several tokens in order, learns best alone (sharing it with
 * the workers or the judges made both collapse in our measurements).
 */
export const DEFAULT_ROLE_POLICIES: Readonly<Record<Role, string>> = {
  solver: 'actor',
  worker: 'actor',
  searcher: 'actor',
  checker: 'judge',
  router: 'judge',
  aggregator: 'aggregator',
};
