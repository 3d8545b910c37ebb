import { sampleEvents, type ActiveSet, type AdvantageGroup } from '@srpo/events';
import { groupWithout } from './group-values';

function group(rewards: number[], objectiveConfig = '{"advantageStd":"sample","advantageEps":1e-6}'): AdvantageGroup {
  const base = sampleEvents(1).AdvantageGroup;
  const set0 = base.sets[0].set;
  const sets = rewards.map((reward, i) => {
    const set: ActiveSet = { ...set0, setId: `s${i}`, reward, progress: null, eventTimeMs: 1000 + i };
    return { set, advantage: 99, advantageFromProgress: false, setSource: { topic: 'srpo.active-sets', partition: 0, offset: i } };
  });
  return { ...base, groupId: 'g#1', expectedSize: rewards.length, sets, objectiveConfig };
}

describe('groupWithout', () => {
  it('renormalizes the sets left as the group stage would have (checked by hand)', () => {
    const g = groupWithout(group([1, 0, 0.5]), new Set(['s2']));
    // Left: rewards 1 and 0. Mean 0.5, sample std sqrt(0.5) = 0.70710678; A = ±0.5 / (0.70710678 + 1e-6).
    expect(g?.sets.map((s) => s.set.setId)).toEqual(['s0', 's1']);
    expect(g?.sets[0].advantage).toBeCloseTo(0.5 / (Math.SQRT1_2 + 1e-6), 12);
    expect(g?.sets[1].advantage).toBeCloseTo(-0.5 / (Math.SQRT1_2 + 1e-6), 12);
    expect(g?.rewardMean).toBe(0.5);
    expect(g?.rewardStd).toBeCloseTo(Math.SQRT1_2, 15);
    expect(g?.degenerate).toBe(false);
    expect(g?.groupId).toBe('g#1');
    expect(g?.eventTimeMs).toBe(1001);
    // The population std, when the group recorded it: sqrt(0.25) = 0.5, A = ±0.5 / (0.5 + 1e-6).
    const pop = groupWithout(group([1, 0, 0.5], '{"advantageStd":"population","advantageEps":1e-6}'), new Set(['s2']));
    expect(pop?.sets[0].advantage).toBeCloseTo(0.5 / 0.500001, 12);
  });

  it('leaves a group untouched when nothing is removed, is degenerate with one set left, and null with none', () => {
    const g = group([1, 0]);
    expect(groupWithout(g, new Set(['other']))).toBe(g);
    const one = groupWithout(g, new Set(['s1']));
    expect(one?.sets.map((s) => s.advantage)).toEqual([0]);
    expect(one?.degenerate).toBe(true);
    expect(groupWithout(g, new Set(['s0', 's1']))).toBeNull();
  });
});
