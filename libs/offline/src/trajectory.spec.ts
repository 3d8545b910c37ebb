import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { Logger } from '@srpo/core';
import { sampleEvents, sealOutput, type AgentOutput, type EpisodeOutcome, type Transition } from '@srpo/events';
import { KeyStore } from '@srpo/store';
import { assembleTrajectories, exclusionOf, fetchContentKeys, stepSucceeded, type RawEpisodeEvents } from './trajectory';

Logger.configure({ level: 'warn' });

const T0 = 1_767_225_600_000;

const base = sampleEvents(0);
const at = (topic: string, offset: number) => ({ topic, partition: 0, offset });

function output(episodeId: string, step: number, agentId: string, role: string, tokens: number[]): AgentOutput {
  return {
    ...base.AgentOutput,
    outputId: `${episodeId}.s${step}.${agentId}`,
    episodeId,
    step,
    agentId,
    role,
    responseTokenIds: tokens,
    behaviourLogProbs: tokens.map(() => -1),
    lossMask: tokens.map(() => true),
  };
}
function transition(episodeId: string, step: number, consumed: string[], reward: number | null): Transition {
  return {
    ...base.Transition,
    transitionId: `${episodeId}.t${step}`,
    episodeId,
    step,
    consumedOutputIds: consumed,
    expectedCardinality: consumed.length,
    reward,
    taskId: 'task-a',
    position: `p${step}`,
  };
}
function outcome(episodeId: string, reward: number, turns: number): EpisodeOutcome {
  return { ...base.EpisodeOutcome, episodeId, taskId: 'task-a', outcomeReward: reward, success: reward > 0, turns };
}

describe('trajectories', () => {
  it('a step fails when its reward (or, without one, the outcome reward) is at most 0', () => {
    expect(stepSucceeded(0, 1)).toBe(false);
    expect(stepSucceeded(0.1, 0)).toBe(true);
    expect(stepSucceeded(null, 1)).toBe(true);
    expect(stepSucceeded(null, 0)).toBe(false);
    expect(stepSucceeded(0.1, 1, { failedRewardAtMost: 0.1 })).toBe(false);
    // Per position: a format bonus of 0.1 fails at `check`, passes elsewhere.
    const rule = { failedRewardAtMost: 0, byPosition: { check: 0.1 } };
    expect(stepSucceeded(0.1, 0, rule, 'check')).toBe(false);
    expect(stepSucceeded(1, 0, rule, 'check')).toBe(true);
    expect(stepSucceeded(0.1, 0, rule, 'solve')).toBe(true);
  });

  it('excludes trajectories with no successful step or too high a failed share', () => {
    expect(exclusionOf([false, false], 0.5)).toBe('no-successful-step');
    // 2 failed of 3 = 0.667 > 0.5
    expect(exclusionOf([true, false, false], 0.5)).toBe('too-many-failed-steps');
    // 1 failed of 2 = 0.5, not above the limit: used
    expect(exclusionOf([true, false], 0.5)).toBeNull();
    expect(exclusionOf([true, false], 0.4)).toBe('too-many-failed-steps');
    expect(exclusionOf([true, true], 0)).toBeNull();
    expect(() => exclusionOf([true], 1.5)).toThrow(/maxFailedShare/);
  });

  it('joins outputs, transitions and outcomes per episode, in step order, and flags failed steps', () => {
    const e = 'ep-1';
    const o0a = output(e, 0, 'worker-0', 'worker', [3]);
    const o0b = output(e, 0, 'worker-1', 'worker', [4]);
    const o1 = output(e, 1, 'aggregator-0', 'aggregator', [3, 4]);
    const { trajectories, incomplete } = assembleTrajectories({
      // Out of order and with a duplicate (a producer retry).
      outputs: [
        { value: o1, source: at('out', 7) },
        { value: o0b, source: at('out', 6) },
        { value: o0a, source: at('out', 5) },
        { value: o0a, source: at('out', 8) },
      ],
      transitions: [
        { value: transition(e, 1, [o1.outputId], 1), source: at('tr', 2) },
        { value: transition(e, 0, [o0a.outputId, o0b.outputId], 0), source: at('tr', 1) },
      ],
      outcomes: [{ value: outcome(e, 1, 2), source: at('oc', 0) }],
    });
    expect(incomplete).toEqual([]);
    expect(trajectories).toHaveLength(1);
    const t = trajectories[0];
    expect(t.actions.map((a) => a.outputId)).toEqual([o0a.outputId, o0b.outputId, o1.outputId]);
    // Step 0 had reward 0: both worker actions failed; step 1 (reward 1) succeeded.
    expect(t.actions.map((a) => a.successful)).toEqual([false, false, true]);
    expect(t.actions[0].source).toEqual(at('out', 5));
    expect(t.actions[2].transitionSource).toEqual(at('tr', 2));
    expect(t.outcome.source).toEqual(at('oc', 0));
    expect(t.positions).toEqual(['p0', 'p1']);
    expect(t.sources).toHaveLength(6);
  });

  it('reports episodes cut by the range as incomplete', () => {
    const o = output('ep-2', 0, 'solver-0', 'solver', [3]);
    const r = assembleTrajectories({
      outputs: [],
      transitions: [
        { value: transition('ep-2', 0, [o.outputId], 1), source: at('tr', 0) },
        { value: transition('ep-3', 0, ['x'], 1), source: at('tr', 1) },
      ],
      outcomes: [{ value: outcome('ep-2', 1, 1), source: at('oc', 0) }],
    });
    expect(r.trajectories).toEqual([]);
    expect(r.incomplete.map((x) => [x.episodeId, x.why])).toEqual([
      ['ep-2', `outputs not in range: ${o.outputId}`],
      ['ep-3', 'no EpisodeOutcome in range'],
    ]);
  });

  describe('sealed outputs (docs/erasure.md)', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-offline-keys-'));
    let keys: KeyStore;
    beforeAll(async () => {
      keys = await KeyStore.open({ kind: 'sqlite', path: path.join(dir, 'keys.sqlite') }, { cacheMs: 0 });
    });
    afterAll(async () => {
      await keys.close();
      fs.rmSync(dir, { recursive: true, force: true });
    });

    /** A two-step episode: a solver output of `subject` at step 0, a checker output at step 1, in the clear unless sealed. */
    function episode(e: string, subject: string) {
      const o0 = { ...output(e, 0, 'solver-0', 'solver', [3, 5]), subjectId: subject, contextTokenIds: [1, 2] };
      const o1 = { ...output(e, 1, 'checker-0', 'checker', [7]), subjectId: subject, contextTokenIds: [1, 2, 3, 5] };
      const events = (outputs: AgentOutput[], n: number) => ({
        outputs: outputs.map((o, i) => ({ value: o, source: at('out', n + i) })),
        transitions: [
          { value: transition(e, 0, [o0.outputId], 0.1), source: at('tr', n) },
          { value: transition(e, 1, [o1.outputId], 1), source: at('tr', n + 1) },
        ],
        outcomes: [{ value: outcome(e, 1, 2), source: at('oc', n) }],
      });
      return { o0, o1, events };
    }
    const seal = async (o: AgentOutput) => sealOutput(o, await keys.keyFor(o.subjectId, o.episodeId, T0));
    const merge = (...parts: RawEpisodeEvents[]): RawEpisodeEvents => ({
      outputs: parts.flatMap((p) => p.outputs),
      transitions: parts.flatMap((p) => p.transitions),
      outcomes: parts.flatMap((p) => p.outcomes),
    });

    it('opens sealed outputs with their keys (one query for the range) into the same trajectory as in the clear', async () => {
      const { o0, o1, events } = episode('ep-s', 'alice');
      const inClear = assembleTrajectories(events([o0, o1], 0));
      expect(inClear.trajectories).toHaveLength(1);
      const sealedEvents = events([await seal(o0), await seal(o1)], 0);
      expect(sealedEvents.outputs.map((o) => o.value.responseTokenIds)).toEqual([[], []]);
      const spy = jest.spyOn(keys, 'keysById');
      const fetched = await fetchContentKeys(keys, sealedEvents.outputs);
      expect(spy).toHaveBeenCalledTimes(1);
      spy.mockRestore();
      expect(fetched?.size).toBe(1); // one key per (subject, episode): both outputs under it
      const opened = assembleTrajectories(sealedEvents, undefined, fetched);
      expect(opened).toEqual(inClear);
      expect(opened.trajectories[0].actions.map((a) => [a.contextTokens, a.responseTokens])).toEqual([
        [
          [1, 2],
          [3, 5],
        ],
        [[1, 2, 3, 5], [7]],
      ]);
      // Without a source, no keys: sealed outputs are left out as such, never read as empty tokens.
      expect(await fetchContentKeys(undefined, sealedEvents.outputs)).toBeUndefined();
      expect(assembleTrajectories(sealedEvents).unopened.map((u) => [u.episodeId, u.reason, u.outputIds])).toEqual([
        ['ep-s', 'sealed-content', [o0.outputId, o1.outputId]],
      ]);
    });

    it('leaves out an episode with an erased output as erased-content, and one with changed bytes as unopenable-content', async () => {
      const kept = episode('ep-kept', 'carol');
      const gone = episode('ep-gone', 'bob');
      const bad = episode('ep-bad', 'carol');
      const badSealed = await seal(bad.o1);
      const ciphertext = Buffer.from(badSealed.sealed?.ciphertext as Buffer);
      ciphertext[2] ^= 4;
      const tampered: AgentOutput = { ...badSealed, sealed: { ...(badSealed.sealed as NonNullable<AgentOutput['sealed']>), ciphertext } };
      const bobSealed = await seal(gone.o1);
      const events = merge(
        kept.events([await seal(kept.o0), kept.o1], 0),
        // Only bob's step-1 output is sealed (and erased): the episode still goes, whole.
        gone.events([gone.o0, bobSealed], 10),
        bad.events([await seal(bad.o0), tampered], 20),
      );
      expect((await keys.erase({ subjectId: 'bob' }, 'er-offline', T0 + 1)).erasure.keyIds).toEqual([bobSealed.sealed?.keyId]);

      const r = assembleTrajectories(events, undefined, await fetchContentKeys(keys, events.outputs));
      expect(r.trajectories.map((t) => t.episodeId)).toEqual(['ep-kept']);
      expect(r.trajectories[0].actions.map((a) => a.responseTokens)).toEqual([[3, 5], [7]]);
      expect(r.incomplete).toEqual([]);
      expect(r.unopened.map((u) => [u.episodeId, u.reason, u.outputIds, u.sources.length])).toEqual([
        ['ep-bad', 'unopenable-content', [bad.o1.outputId], 5],
        ['ep-gone', 'erased-content', [gone.o1.outputId], 5],
      ]);
      expect(r.unopened[1].why).toBe(`content keys erased of outputs ${gone.o1.outputId}`);
      expect(r.unopened[0].why).toMatch(/does not open with key/);
    });
  });
});
