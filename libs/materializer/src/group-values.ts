import { type ActiveSet, type AdvantageGroup, type KafkaCoordinates } from '@srpo/events';
import { groupAdvantages, groupMean, groupStd, resolveObjectiveConfig, type ObjectiveConfig } from '@srpo/srpo';

type GroupSets = readonly { set: ActiveSet; source: KafkaCoordinates }[];

/**
 * What the group stage computes over a group's sets (ordered by set id): each set's advantage
 * (`groupAdvantages`, progress fallback included), the reward statistics and the objective it
 * used. One function for the stage's emit and for {@link groupWithout}, so that a group rebuilt
 * without some sets is exactly the group the stage would have emitted from the others.
 */
export function groupValues(
  sets: GroupSets,
  objective: ObjectiveConfig,
): Pick<AdvantageGroup, 'sets' | 'rewardMean' | 'rewardStd' | 'degenerate' | 'objectiveConfig' | 'eventTimeMs'> {
  const results = groupAdvantages(
    sets.map(({ set }) => ({ setId: set.setId, groupKey: set.groupKey, reward: set.reward, ...(set.progress !== null ? { progress: set.progress } : {}) })),
    objective,
  );
  const fromProgress = results.some((r) => r.fromProgress);
  const values = sets.map(({ set }) => (fromProgress ? (set.progress as number) : set.reward));
  return {
    sets: sets.map(({ set, source }, i) => ({ set, advantage: results[i].advantage, advantageFromProgress: results[i].fromProgress, setSource: source })),
    rewardMean: groupMean(values),
    rewardStd: groupStd(values, objective.advantageStd),
    degenerate: results[0]?.degenerateGroup ?? true,
    objectiveConfig: JSON.stringify({ advantageStd: objective.advantageStd, advantageEps: objective.advantageEps, progress: objective.progress }),
    eventTimeMs: Math.max(...sets.map(({ set }) => set.eventTimeMs)),
  };
}

/**
 * `group` without the sets in `setIds` (erased ones, docs/erasure.md): the sets left, with the
 * advantages and statistics the group stage would have given them had the others never come,
 * under the group's own recorded objective. The group keeps its id (the learner's ledger is keyed
 * by it). null when no set is left.
 */
export function groupWithout(group: AdvantageGroup, setIds: ReadonlySet<string>): AdvantageGroup | null {
  const kept = group.sets.filter((gs) => !setIds.has(gs.set.setId));
  if (kept.length === group.sets.length) return group;
  if (kept.length === 0) return null;
  // The recorded advantage settings; the fields groupAdvantages does not read take their defaults.
  const objective = resolveObjectiveConfig(JSON.parse(group.objectiveConfig) as unknown, 'objectiveConfig');
  return {
    ...group,
    ...groupValues(
      kept.map((gs) => ({ set: gs.set, source: gs.setSource })),
      objective,
    ),
  };
}
