import { SeededRng } from '@srpo/policy';
import { DEFAULT_ARITHMETIC, type ArithmeticSettings } from '../envs/arithmetic.env';
import { digitValue, docIndex, Tok } from '../tokenizer';
import { ScriptedSampler, type Script } from '../testing/scripted-sampler';
import { createWorkflow, FixedWorkflow, JointWorkflow, RoutedWorkflow, SearchWorkflow } from '.';

const s: ArithmeticSettings = { ...DEFAULT_ARITHMETIC, modulus: 4, workers: 3, reverseLength: 2 };
const k = s.modulus;
const isDigit = (t: number) => (digitValue(t) ?? 99) < k;

/** Scripts that solve every role perfectly, reading only what each role sees. */
const perfect: Record<string, Script> = {
  solver: (ctx) =>
    ctx
      .slice(2, -1)
      .reverse()
      .map((t) => Tok.DIGIT0 + (((digitValue(t) as number) + k - 1) % k)),
  checker: (ctx) => [ctx.slice(2, -1).every(isDigit) ? Tok.YES : Tok.NO],
  worker: (ctx) => [ctx[3] === Tok.BLANK ? Tok.BLANK : Tok.DIGIT0 + (((digitValue(ctx[3]) as number) + 1) % k)],
  router: (ctx) => ctx.slice(2, -1).map((t) => (t === Tok.BLANK ? Tok.NO : Tok.YES)),
  aggregator: (ctx) => ctx.slice(2, -1),
  searcher: (ctx) => (ctx.length === 4 ? [ctx[2]] : [ctx[ctx.length - 1]]),
};

describe('fixed workflow', () => {
  it('plays G rollouts of one task: solver then checker, one output per set, rewards and success verified', async () => {
    const wf = new FixedWorkflow(s, new SeededRng(1));
    const r = await wf.play('t-1', 4, new ScriptedSampler(perfect));
    expect(r.episodes).toHaveLength(4);
    for (const ep of r.episodes) {
      expect(ep.steps.map((st) => [st.position, st.consumed.length, st.reward, st.done])).toEqual([
        ['solve', 1, 1, false],
        ['check', 1, 1, true],
      ]);
      expect(ep.outcome.success).toBe(true);
      expect(ep.outcome.reward).toBe(1);
      expect(ep.taskId).toMatch(/^fixed:/);
      expect(ep.steps[0].consumed[0].tokens).toHaveLength(2);
    }
    expect(new Set(r.episodes.map((e) => e.episodeId)).size).toBe(4);
  });

  it('a wrong answer that the checker accepts is no success; the checker is then wrong only if the answer was malformed', async () => {
    const wf = new FixedWorkflow(s, new SeededRng(1));
    const wrong: Record<string, Script> = { ...perfect, solver: () => [Tok.BLANK, Tok.DIGIT0], checker: () => [Tok.YES] };
    const ep = (await wf.play('t-2', 2, new ScriptedSampler(wrong))).episodes[0];
    expect(ep.outcome.success).toBe(false);
    expect(ep.steps[0].reward).toBeCloseTo(0.05, 12); // BLANK is malformed (0); digit 0 is in range but wrong for this seed's task (0.1): mean 0.05
    expect(ep.steps[1].reward).toBe(0.1); // accepted a malformed answer: wrong verdict, well-formed token
  });
});

describe('joint workflow', () => {
  it('one transition consumes all N worker outputs (K = N); the aggregator is a singleton', async () => {
    const wf = new JointWorkflow(s, new SeededRng(2));
    const sampler = new ScriptedSampler(perfect);
    const r = await wf.play('t-3', 5, sampler);
    for (const ep of r.episodes) {
      expect(ep.steps[0].consumed.map((o) => o.agentId)).toEqual(['worker-0', 'worker-1', 'worker-2']);
      expect(ep.steps[1].consumed).toHaveLength(1);
      expect(ep.outcome.success).toBe(true);
    }
    // All G·N workers sampled in one batch, then all G aggregators.
    expect(sampler.calls.map((c) => [c.role, c.contexts.length, c.maxNewTokens])).toEqual([
      ['worker', 15, 1],
      ['aggregator', 5, 3],
    ]);
  });

  it('the joint set has one reward: the mean over its workers', async () => {
    const wf = new JointWorkflow(s, new SeededRng(2));
    const oneWrong: Record<string, Script> = { ...perfect, worker: (ctx, row) => (row % 3 === 0 ? [Tok.YES] : perfect.worker(ctx, row)) };
    const ep = (await wf.play('t-4', 1, new ScriptedSampler(oneWrong))).episodes[0];
    expect(ep.steps[0].reward).toBeCloseTo(2 / 3, 12);
    expect(ep.outcome.success).toBe(false); // the aggregator copied a wrong worker answer
    expect(ep.steps[1].reward).toBe(1); // ... which is exactly its job
  });
});

describe('routed workflow', () => {
  it('the router decides which workers act: K follows the decision, routing is recorded', async () => {
    const wf = new RoutedWorkflow({ ...s, blankProbability: 0.5 }, new SeededRng(3));
    const r = await wf.play('t-5', 3, new ScriptedSampler(perfect));
    for (const ep of r.episodes) {
      const [route, work, agg] = ep.steps;
      const nonEmpty = route.consumed[0].contextTokens.slice(2, -1).flatMap((t, i) => (t === Tok.BLANK ? [] : [`worker-${i}`]));
      expect(work.consumed.map((o) => o.agentId)).toEqual(nonEmpty);
      expect(work.routing).toEqual({ routerOutputId: route.consumed[0].outputId, selectedAgentIds: nonEmpty });
      expect(agg.consumed).toHaveLength(1);
      expect(ep.outcome.success).toBe(true);
    }
  });

  it('K varies between rollouts of the same task when the router does', async () => {
    const wf = new RoutedWorkflow({ ...s, blankProbability: 0 }, new SeededRng(4));
    const routers: Script[] = [() => [Tok.YES, Tok.NO, Tok.NO], () => [Tok.YES, Tok.YES, Tok.YES], () => [Tok.NO, Tok.NO, Tok.NO]];
    const sampler = new ScriptedSampler({ ...perfect, router: (ctx, row) => routers[row](ctx, row) });
    const r = await wf.play('t-6', 3, sampler);
    expect(r.episodes.map((e) => e.steps[1].consumed.length)).toEqual([1, 3, 1]);
    expect(r.episodes[2].outcome.details.routingFallback).toBe('true');
    // Skipping non-empty slots loses their digits: only the full routing succeeds.
    expect(r.episodes.map((e) => e.outcome.success)).toEqual([false, true, false]);
  });
});

describe('search workflow', () => {
  it('follows the chain over its turns; every turn is a singleton set rewarded by the outcome', async () => {
    const wf = new SearchWorkflow({ modulus: 4, docs: 4, turns: 3 }, new SeededRng(5));
    const r = await wf.play('t-7', 2, new ScriptedSampler(perfect));
    for (const ep of r.episodes) {
      expect(ep.steps.map((st) => [st.position, st.reward, st.done])).toEqual([
        ['turn0', null, false],
        ['turn1', null, false],
        ['turn2', null, true],
      ]);
      expect(ep.outcome.success).toBe(true);
      expect(ep.outcome.observationDigests).toHaveLength(4);
      expect(ep.outcome.turns).toBe(3);
      expect(docIndex(ep.steps[0].consumed[0].tokens[0])).toBeDefined();
    }
  });

  it('an agent that never reads fails and records repeated observations (no coverage)', async () => {
    const wf = new SearchWorkflow({ modulus: 4, docs: 4, turns: 3 }, new SeededRng(5));
    const ep = (await wf.play('t-8', 1, new ScriptedSampler({ searcher: () => [Tok.YES] }))).episodes[0];
    expect(ep.outcome.success).toBe(false);
    expect(new Set(ep.outcome.observationDigests).size).toBe(3); // start, "nothing" twice, answered
  });
});

it('createWorkflow gives each workflow its own task stream: same seed, same tasks', async () => {
  const a = await createWorkflow('fixed', { arithmetic: s, search: { modulus: 4, docs: 4, turns: 3 } }, 9).play('x', 1, new ScriptedSampler(perfect));
  const b = await createWorkflow('fixed', { arithmetic: s, search: { modulus: 4, docs: 4, turns: 3 } }, 9).play('x', 1, new ScriptedSampler(perfect));
  expect(a.episodes[0].taskId).toBe(b.episodes[0].taskId);
});
