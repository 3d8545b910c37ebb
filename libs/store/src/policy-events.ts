import type { PolicyUpdate, PolicyVersion } from '@srpo/events';
import type { UpdateDetail } from './audit-types';

/**
 * The `PolicyUpdate` and `PolicyVersion` events of a committed update, rebuilt from its record
 * (so a republish after a restart sends the same content). `objectiveName` defaults to the
 * objective in the recorded hyperparameters (`srpo` when none is recorded); offline training
 * names its own (`agentbrew-<credit mode>`).
 */
export function eventsFor(detail: UpdateDetail, objectiveName: string = recordedObjective(detail)): { update: PolicyUpdate; version: PolicyVersion } {
  return {
    update: {
      updateId: detail.updateId,
      policyId: detail.policyId,
      versionBefore: detail.versionBefore,
      versionAfter: detail.versionAfter,
      weightsHashBefore: detail.weightsHashBefore,
      weightsHashAfter: detail.weightsHashAfter,
      groupIds: detail.groups.map((g) => g.groupId),
      groupSources: detail.groups.map((g) => ({ ...g.source })),
      objective: objectiveName,
      loss: detail.loss,
      gradNorm: detail.gradNorm,
      diagnostics: { ...detail.diagnostics },
      checkpointUri: detail.checkpointUri,
      backend: detail.backend,
      eventTimeMs: detail.committedAtMs,
    },
    version: {
      policyId: detail.policyId,
      version: detail.versionAfter,
      weightsHash: detail.weightsHashAfter,
      checkpointUri: detail.checkpointUri,
      updateId: detail.updateId,
      eventTimeMs: detail.committedAtMs,
    },
  };
}

function recordedObjective(detail: UpdateDetail): string {
  const objective = detail.hyperparameters.objective;
  return typeof objective === 'object' && objective !== null && !Array.isArray(objective) && typeof objective.objective === 'string'
    ? objective.objective
    : 'srpo';
}
