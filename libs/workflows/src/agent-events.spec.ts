import { SeededRng } from '@srpo/policy';
import {
  completeAgentOutput,
  completeEpisodeOutcome,
  completeTransition,
  EventCodec,
  validateAgentOutput,
  validateEpisodeOutcome,
  validateTransition,
  type EpisodeOutcomeInit,
} from '@srpo/events';
import { contextRefOf, eventsOf, setsPerPolicy, verifierOf } from './agent-events';
import { DEFAULT_ARITHMETIC } from './envs/arithmetic.env';
import { digitValue, Tok } from './tokenizer';
import { ScriptedSampler, type Script } from './testing/scripted-sampler';
import { RoutedWorkflow, SearchWorkflow } from './workflows';

const s = { ...DEFAULT_ARITHMETIC, workers: 3 };
const scripts: Record<string, Script> = {
  router: (_ctx, row) =>
    [
      [Tok.YES, Tok.NO, Tok.YES],
      [Tok.NO, Tok.NO, Tok.NO],
      [Tok.YES, Tok.YES, Tok.YES],
    ][row % 3],
  worker: (ctx) => [ctx[3] === Tok.BLANK ? Tok.BLANK : Tok.DIGIT0 + (((digitValue(ctx[3]) as number) + 1) % 4)],
  aggregator: (ctx) => ctx.slice(2, -1),
  searcher: (ctx) => [ctx[ctx.length - 1]],
};
const codec = new EventCodec();

async function routedEvents() {
  const r = await new RoutedWorkflow(s, new SeededRng(3)).play(
    'run1-routed-0',
    3,
    new ScriptedSampler(scripts, (role) => (role === 'worker' ? 'actor' : 'judge')),
  );
  return { r, ...eventsOf(r, 1_700_000_000_100) };
}

describe('agent event construction', () => {
  it('every event passes the SDK validators and encodes strictly against schemas/*.avsc', async () => {
    const { body, outcomes } = await routedEvents();
    expect(body.length).toBeGreaterThan(0);
    for (const e of [...body, ...outcomes]) {
      if (e.type === 'AgentOutput') {
        const v = completeAgentOutput(e.value);
        validateAgentOutput(v);
        expect(codec.decodeAs('AgentOutput', codec.encode('AgentOutput', v, { strict: true })).outputId).toBe(v.outputId);
      } else if (e.type === 'Transition') {
        const v = completeTransition(e.value);
        validateTransition(v);
        codec.encode('Transition', v, { strict: true });
      } else {
        const v = completeEpisodeOutcome(e.value);
        validateEpisodeOutcome(v);
        codec.encode('EpisodeOutcome', v, { strict: true });
      }
    }
  });

  it('outcomes travel in their own batch, after every output and transition', async () => {
    const { body, outcomes } = await routedEvents();
    expect(body.every((e) => e.type !== 'EpisodeOutcome')).toBe(true);
    expect(outcomes.map((e) => e.type)).toEqual(['EpisodeOutcome', 'EpisodeOutcome', 'EpisodeOutcome']);
  });

  it('transitions declare the group (task instance + position, size G) and list outputs of their own episode', async () => {
    const { body } = await routedEvents();
    const outputs = new Map(body.filter((e) => e.type === 'AgentOutput').map((e) => [e.value.outputId, e.value]));
    const transitions = body.filter((e) => e.type === 'Transition').map((e) => e.value);
    expect(transitions).toHaveLength(9);
    for (const t of transitions) {
      expect(t.groupKey).toBe(`run1-routed-0/${t.position}`);
      expect(t.expectedGroupSize).toBe(3);
      expect(t.expectedCardinality).toBe(t.consumedOutputIds.length);
      expect(t.workflowKind).toBe('ROUTED');
      for (const id of t.consumedOutputIds) expect(outputs.get(id)?.episodeId).toBe(t.episodeId);
    }
    // K follows the router: 2, 1 (nobody selected: worker 0 by default), 3.
    expect(transitions.filter((t) => t.position === 'work').map((t) => t.expectedCardinality)).toEqual([2, 1, 3]);
    expect(transitions.filter((t) => t.position === 'work').every((t) => t.routing?.routerOutputId?.endsWith('.s0.router-0'))).toBe(true);
    expect(transitions.filter((t) => t.done).map((t) => t.position)).toEqual(['aggregate', 'aggregate', 'aggregate']);
  });

  it('outputs are stamped with the policy and version that sampled them, with the tokens actually conditioned on', async () => {
    const { body } = await routedEvents();
    const out = body.filter((e) => e.type === 'AgentOutput').map((e) => e.value);
    expect(new Set(out.map((o) => `${o.role}:${o.policyId}`))).toEqual(new Set(['router:judge', 'worker:actor', 'aggregator:judge']));
    for (const o of out) {
      expect(o.policyVersion).toBe(3);
      expect(o.contextRef).toBe(contextRefOf(o.contextTokenIds ?? []));
      expect(o.lossMask).toEqual(o.responseTokenIds.map(() => true));
      expect(o.sampling.temperature).toBe(1);
    }
  });

  it('outcomes carry the verifier, its details and the observation digests', async () => {
    const r = await new SearchWorkflow({ modulus: 4, docs: 4, turns: 3 }, new SeededRng(1)).play('run1-search-0', 2, new ScriptedSampler(scripts));
    const { body, outcomes } = eventsOf(r, 1_700_000_000_100);
    const o = outcomes[0].value as EpisodeOutcomeInit;
    expect(o.verifier).toBe(verifierOf('search'));
    expect(o.verifierDetails?.workflow).toBe('search');
    expect(o.observationDigests).toHaveLength(4);
    expect(o.turns).toBe(3);
    const ts = body.filter((e) => e.type === 'Transition').map((e) => e.value);
    expect(ts.every((t) => t.reward === null)).toBe(true); // outcome-rewarded
    expect(ts.filter((t) => t.episodeId === o.episodeId).map((t) => t.observationDigest)).toEqual(o.observationDigests?.slice(1));
  });

  it('counts sets per policy for flow control', async () => {
    const { r } = await routedEvents();
    expect(Object.fromEntries(setsPerPolicy(r))).toEqual({ judge: 6, actor: 3 });
  });
});
