import { SeededRng } from '@srpo/policy';
import { ScriptedSampler, Tok } from '@srpo/workflows';
import {
  chosenSlots,
  checkTeamSettings,
  DEFAULT_TEAM,
  idealRoute,
  idealWork,
  playTeamTask,
  routerContext,
  sampleTeamTask,
  workerContext,
  workSetReward,
  type TeamTask,
} from './team.env';
import { setsOf } from './train';
import { resolveObjectiveConfig } from '@srpo/srpo';

const S = { slots: 4, length: 3, modulus: 4, requestProbability: 0.5 };
const d = (x: number) => Tok.DIGIT0 + x;
// Slots 0 and 2 requested.
const TASK: TeamTask = {
  slots: [
    [3, 0, 1],
    [2, 2, 2],
    [0, 1, 2],
    [1, 3, 3],
  ],
  requested: [true, false, true, false],
};

describe('team environment (SRPO study)', () => {
  it('contexts and right answers by hand', () => {
    expect(routerContext(TASK)).toEqual([Tok.BOS, Tok.ROUTE, d(3), Tok.BLANK, d(0), Tok.BLANK, Tok.SEP]);
    expect(workerContext(TASK, 1)).toEqual([Tok.BOS, Tok.WORK, Tok.SLOT0 + 1, d(2), d(2), d(2), Tok.SEP]);
    expect(idealRoute(TASK)).toEqual([Tok.YES, Tok.NO, Tok.YES, Tok.NO]);
    // (d + 1) mod 4: 3 → 0, 0 → 1, 1 → 2
    expect(idealWork(TASK, 0, S)).toEqual([d(0), d(1), d(2)]);
    expect(idealWork(TASK, 3, S)).toEqual([d(2), d(0), d(0)]);
  });

  it('the router chooses K = its YES count; nobody chosen falls back to slot 0', () => {
    expect(chosenSlots([Tok.YES, Tok.NO, Tok.YES, Tok.YES], 4)).toEqual([0, 2, 3]);
    expect(chosenSlots([Tok.NO, Tok.NO, Tok.NO, Tok.NO], 4)).toEqual([0]);
    expect(chosenSlots([Tok.NO, Tok.SEP, Tok.YES, Tok.BLANK], 4)).toEqual([2]);
  });

  it('the work set earns 1 only when every chosen worker is right (not additive)', () => {
    const right0 = [d(0), d(1), d(2)];
    const right2 = [d(1), d(2), d(3)];
    expect(workSetReward(TASK, [0, 2], [right0, right2], S)).toBe(1);
    // One token wrong in one worker voids the set: 0, not 1/2 or 5/6.
    expect(workSetReward(TASK, [0, 2], [right0, [d(1), d(2), d(0)]], S)).toBe(0);
    expect(workSetReward(TASK, [1], [[d(3), d(3), d(3)]], S)).toBe(1);
    expect(() => workSetReward(TASK, [0, 2], [right0], S)).toThrow('answers: expected one answer per chosen slot (2), got 1');
  });

  it('tasks: at least one slot requested, deterministic per seed', () => {
    const a = new SeededRng(5);
    const b = new SeededRng(5);
    for (let i = 0; i < 50; i++) {
      const t = sampleTeamTask(a, { ...DEFAULT_TEAM, requestProbability: 0.1 });
      expect(t.requested.some(Boolean)).toBe(true);
      expect(t.slots.every((s) => s.length === DEFAULT_TEAM.length && s.every((x) => x >= 0 && x < DEFAULT_TEAM.modulus))).toBe(true);
      expect(sampleTeamTask(b, { ...DEFAULT_TEAM, requestProbability: 0.1 })).toEqual(t);
    }
    expect(() => checkTeamSettings({ ...DEFAULT_TEAM, slots: 5 })).toThrow('slots: must be an integer in [1, 4], got 5');
    expect(() => checkTeamSettings({ ...DEFAULT_TEAM, requestProbability: 0 })).toThrow('requestProbability');
  });

  it('plays G rollouts: K varies with the router, rewards and success per rollout, one group per position', async () => {
    // Rollout 0: right routing, both workers right → success. Rollout 1: an extra YES (K = 3), all right
    // → work set right, routing wrong. Rollout 2: right routing, worker 2 wrong → both 0 for the work set.
    const routes = [
      [Tok.YES, Tok.NO, Tok.YES, Tok.NO],
      [Tok.YES, Tok.YES, Tok.YES, Tok.NO],
      [Tok.YES, Tok.NO, Tok.YES, Tok.NO],
    ];
    const work = [
      idealWork(TASK, 0, S),
      idealWork(TASK, 2, S),
      idealWork(TASK, 0, S),
      idealWork(TASK, 1, S),
      idealWork(TASK, 2, S),
      idealWork(TASK, 0, S),
      [d(0), d(0), d(0)],
    ];
    const sampler = new ScriptedSampler({ router: (_ctx, row) => routes[row], worker: (_ctx, row) => work[row] });
    const eps = await playTeamTask('t', TASK, 3, sampler, S);
    expect(eps.map((e) => e.chosen)).toEqual([
      [0, 2],
      [0, 1, 2],
      [0, 2],
    ]);
    expect(eps.map((e) => [e.routeReward, e.workReward, e.success])).toEqual([
      [1, 1, true],
      [0, 1, false],
      [1, 0, false],
    ]);
    const sets = setsOf(eps, resolveObjectiveConfig({}));
    expect(sets.worker.map((s) => s.k)).toEqual([2, 3, 2]);
    // Work rewards 1, 1, 0: mean 2/3, sample std √(1/3) → advantages ≈ +0.577, +0.577, −1.155.
    expect(sets.worker.map((s) => Number(s.advantage.toFixed(3)))).toEqual([0.577, 0.577, -1.155]);
    expect(sets.router.map((s) => Number(s.advantage.toFixed(3)))).toEqual([0.577, -1.155, 0.577]);
    expect(sets.worker[1].members.map((m) => m.outputId)).toEqual(['t.r1.w0', 't.r1.w1', 't.r1.w2']);
  });
});
