import { SeededRng } from '@srpo/policy';
import type { ArithmeticSettings } from '../envs/arithmetic.env';
import type { SearchSettings } from '../envs/doc-search.env';
import type { Workflow, WorkflowName } from '../rollout';
import { FixedWorkflow } from './fixed.workflow';
import { JointWorkflow } from './joint.workflow';
import { RoutedWorkflow } from './routed.workflow';
import { SearchWorkflow } from './search.workflow';

export { FixedWorkflow, JointWorkflow, RoutedWorkflow, SearchWorkflow };

export interface WorkflowSettings {
  arithmetic: ArithmeticSettings;
  search: SearchSettings;
}

/** Builds a workflow; each gets its own task RNG derived from `seed`, so adding one does not change another's tasks. */
export function createWorkflow(name: WorkflowName, settings: WorkflowSettings, seed: number): Workflow {
  const offset = { fixed: 1, joint: 2, routed: 3, search: 4 }[name];
  const rng = new SeededRng((seed * 7919 + offset * 104729) >>> 0);
  switch (name) {
    case 'fixed':
      return new FixedWorkflow(settings.arithmetic, rng);
    case 'joint':
      return new JointWorkflow(settings.arithmetic, rng);
    case 'routed':
      return new RoutedWorkflow(settings.arithmetic, rng);
    case 'search':
      return new SearchWorkflow(settings.search, rng);
  }
}
