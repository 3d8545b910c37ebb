import { SeededRng } from '@srpo/policy';
import { Tok } from '@srpo/workflows';
import { DEFAULT_MIX, inferredInstruction, logAgentCalls, steps, weightsOf } from './brew-study';
import { applyCall, checkKvSettings, DEFAULT_KV, kvContext, neededCalls, Op, parseState, runCalls, type KvTask } from './kv.env';

const S = { keys: 3, modulus: 4, turns: 5, fillProbability: 0.5 };
const d = (x: number) => Tok.DIGIT0 + x;
const k = (i: number) => Tok.SLOT0 + i;
const put = (i: number, v: number) => [Op.PUT, k(i), d(v)];
const get = (i: number) => [Op.GET, k(i), Tok.NOTHING];
const del = (i: number) => [Op.DEL, k(i), Tok.NOTHING];
// Initial {0: 2, 1: –, 2: 1}; target {0: 3, 1: –, 2: –}.
const TASK: KvTask = { initial: [2, null, 1], target: [3, null, null] };

describe('key-value tool-use environment (AgentBrew study)', () => {
  it('calls and observations by hand', () => {
    expect(applyCall([2, null, 1], put(1, 3), S)).toEqual({ state: [2, 3, 1], observation: Tok.YES, changed: true, error: false });
    expect(applyCall([2, null, 1], get(0), S)).toEqual({ state: [2, null, 1], observation: d(2), changed: false, error: false });
    // Reading or deleting an empty key is an error; so is a malformed call.
    expect(applyCall([2, null, 1], get(1), S).error).toBe(true);
    expect(applyCall([2, null, 1], del(1), S).error).toBe(true);
    expect(applyCall([2, null, 1], [Op.DEL, k(0), d(1)], S)).toEqual({ state: [2, null, 1], observation: Tok.NO, changed: false, error: true });
    expect(applyCall([2, null, 1], [Op.PUT, k(3), d(1)], S).error).toBe(true);
    expect(applyCall([2, null, 1], [Op.PUT, k(0), d(4)], S).error).toBe(true);
    expect(applyCall([2, null, 1], [Op.PUT, k(0)], S).error).toBe(true);
  });

  it('labels every call from the whole episode: effective, redundant, erroneous', () => {
    // put(0,1) is overwritten by put(0,3) → redundant; put(0,3) builds the end state → effective;
    // get(1) errors; del(2) empties key 2 for good → effective; get(0) reads → redundant.
    const e = runCalls(TASK, [put(0, 1), get(1), put(0, 3), del(2), get(0)], S);
    expect(e.kinds).toEqual(['redundant', 'erroneous', 'effective', 'effective', 'redundant']);
    expect(e.observations).toEqual([Tok.YES, Tok.NO, Tok.YES, Tok.YES, d(3)]);
    expect(e.end).toEqual([3, null, null]);
    expect(e.success).toBe(true);
    // Writing the value a key already holds, and a DEL undone later, change nothing lasting.
    const f = runCalls(TASK, [put(2, 1), del(0), put(0, 2), get(2), get(2)], S);
    expect(f.kinds).toEqual(['redundant', 'redundant', 'redundant', 'redundant', 'redundant']);
    expect(f.success).toBe(false);
    expect(inferredInstruction(f)).toEqual([d(2), Tok.BLANK, d(1)]);
  });

  it('needed calls reach the target; contexts put the instruction first', () => {
    expect(neededCalls(TASK)).toEqual([put(0, 3), del(2)]);
    expect(runCalls(TASK, [...neededCalls(TASK), get(0), get(0), get(0)], S).success).toBe(true);
    expect(kvContext([d(3), Tok.BLANK, Tok.BLANK], TASK.initial, [[...put(0, 3), Tok.YES]])).toEqual([
      Tok.BOS,
      d(3),
      Tok.BLANK,
      Tok.BLANK,
      Tok.SEP,
      d(2),
      Tok.BLANK,
      d(1),
      Tok.SEP,
      Op.PUT,
      k(0),
      d(3),
      Tok.YES,
    ]);
    expect(parseState([d(3), Tok.BLANK, d(0)], S)).toEqual([3, null, 0]);
    expect(parseState([d(3), Tok.YES, d(0)], S)).toBeNull();
    expect(() => checkKvSettings({ ...DEFAULT_KV, keys: 0 })).toThrow('keys: must be an integer in [1, 4], got 0');
  });

  it('the logging agent is deterministic per seed and mixes the three kinds', () => {
    const calls = (seed: number) => logAgentCalls(TASK, new SeededRng(seed), DEFAULT_MIX, S);
    expect(calls(3)).toEqual(calls(3));
    const kinds = { effective: 0, redundant: 0, erroneous: 0 };
    for (let s = 0; s < 200; s++) for (const x of runCalls(TASK, calls(s), S).kinds) kinds[x]++;
    expect(kinds.effective).toBeGreaterThan(100);
    expect(kinds.redundant).toBeGreaterThan(100);
    expect(kinds.erroneous).toBeGreaterThan(100);
    expect(steps(runCalls(TASK, [get(0)], S))).toEqual([[...get(0), d(2)]]);
  });

  it('weightings by hand', () => {
    const credits = [0.4, -0.2, 0.1, 0.8];
    const kinds = ['effective', 'erroneous', 'redundant', 'effective'] as const;
    expect(weightsOf('released', credits, kinds, 2, 0.1)).toEqual([0.4, -0.2, 0.1, 0.8]);
    // Clip at 0, drop the erroneous call, divide by the trajectory's largest (0.8).
    expect(weightsOf('clip-max', credits, kinds, 2, 0.1)).toEqual([0.5, 0, 0.125, 1]);
    expect(weightsOf('clip-max-floor', [0.4, -0.2, -0.1, 0.8], kinds, 2, 0.1)).toEqual([0.5, 0, 0.1, 1]);
    // Divide by the dataset's largest (2) instead.
    expect(weightsOf('dataset', credits, kinds, 2, 0.1)).toEqual([0.2, 0, 0.05, 0.4]);
  });
});
