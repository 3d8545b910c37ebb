import * as fs from 'fs';
import * as path from 'path';
import { ConfigError, initTfBackend, repoRoot } from '@srpo/core';
import { Policy, PolicyRegistry, tokenLogProbs } from '@srpo/policy';
import { HfTokenizer, loadHfModel } from '@srpo/hf';
import { eventsOf } from './agent-events';
import { DEFAULT_ARITHMETIC } from './envs/arithmetic.env';
import { DEFAULT_SEARCH } from './envs/doc-search.env';
import { PolicySampler } from './policy-sampler';
import { hfSymbolBinding, IDENTITY_BINDING, SYMBOL_TEXT } from './symbol-binding';
import { ScriptedSampler } from './testing/scripted-sampler';
import { Tok, VOCAB_SIZE } from './tokenizer';
import { createWorkflow } from './workflows';
import { WORKFLOW_NAMES } from './rollout';

const fixture = (arch: string) => path.join(repoRoot(), 'libs', 'hf', 'fixtures', arch);
/** The vocabulary as tokenizer.json writes it: the test's own reading, not the binding's. */
const vocabOf = (arch: string): Record<string, number> =>
  (JSON.parse(fs.readFileSync(path.join(fixture(arch), 'tokenizer.json'), 'utf8')) as { model: { vocab: Record<string, number> } }).model.vocab;

describe('symbol binding', () => {
  it('identity: the project transformer speaks the symbols themselves, larger ids included', () => {
    expect(IDENTITY_BINDING.toModel([0, 13, 31, 200])).toEqual([0, 13, 31, 200]);
    expect(IDENTITY_BINDING.toSymbols([0, 13, 31, 200])).toEqual([0, 13, 31, 200]);
  });

  it.each(['llama', 'qwen2'])('%s (byte-level BPE): every symbol is the vocabulary entry of its one-character text', (arch) => {
    const vocab = vocabOf(arch);
    const b = hfSymbolBinding(HfTokenizer.fromDirectory(fixture(arch)), 512);
    const ids = b.toModel(Array.from({ length: VOCAB_SIZE }, (_, s) => s));
    const llamaBos = arch === 'llama' ? '<|begin_of_text|>' : undefined;
    ids.forEach((id, s) => {
      // Llama's tokenizer_config names a bos_token: BOS is that special token; Qwen2 has none.
      if (s === Tok.BOS && llamaBos) expect(id).toBe(tokenIdOf(arch, llamaBos));
      else expect(id).toBe(vocab[SYMBOL_TEXT[s]]);
    });
    expect(new Set(ids).size).toBe(VOCAB_SIZE);
    expect(b.toModel([Tok.DIGIT0 + 3])).toEqual([vocab['3']]);
  });

  it('mistral (SentencePiece-style, no "Y" or "^" in its vocabulary): missing texts fall back to free single tokens, all distinct', () => {
    const vocab = vocabOf('mistral');
    const tok = HfTokenizer.fromDirectory(fixture('mistral'));
    const b = hfSymbolBinding(tok, 512);
    const described = b.describe();
    const ids = Object.values(described).map((d) => d.id);
    expect(ids).toHaveLength(VOCAB_SIZE);
    expect(new Set(ids).size).toBe(VOCAB_SIZE);
    expect(described.YES.text).not.toBe('Y');
    expect(described['3']).toEqual({ id: vocab['3'], text: '3' });
    for (const d of Object.values(described))
      expect(tok.encode(d.text as string).length === 1 || vocab[d.text as string] === d.id || tok.tokenToId(d.text as string) === d.id).toBe(true);
  });

  it('is a bijection: unbound model ids become negative symbols and come back unchanged', () => {
    const b = hfSymbolBinding(HfTokenizer.fromDirectory(fixture('qwen2')), 448);
    const modelIds = Array.from({ length: 448 }, (_, i) => i);
    const symbols = b.toSymbols(modelIds);
    expect(b.toModel(symbols)).toEqual(modelIds);
    expect(symbols.filter((s) => s >= 0).sort((x, y) => x - y)).toEqual(Array.from({ length: VOCAB_SIZE }, (_, s) => s));
    expect(symbols.filter((s) => s < 0)).toHaveLength(448 - VOCAB_SIZE);
    expect(() => b.toModel([VOCAB_SIZE])).toThrow(/symbol.*\[0, 32\)/);
  });

  it('refuses, naming SRPO_MODEL_DIR, a vocabulary that cannot hold the symbols', () => {
    const tok = HfTokenizer.fromDirectory(fixture('qwen2'));
    let error: unknown;
    try {
      hfSymbolBinding(tok, 40);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ConfigError);
    expect(String((error as Error).message)).toMatch(/SRPO_MODEL_DIR.*outside the model's vocab_size 40/);
  });

  it('every workflow grades unbound (negative) symbols as wrong answers and never throws', async () => {
    const wrong = () => [-7, -300, -1, -2];
    const scripts = { solver: wrong, checker: wrong, worker: wrong, router: wrong, aggregator: wrong, searcher: wrong };
    for (const name of WORKFLOW_NAMES) {
      const wf = createWorkflow(name, { arithmetic: DEFAULT_ARITHMETIC, search: DEFAULT_SEARCH }, 3);
      const r = await wf.play(`t-${name}`, 4, new ScriptedSampler(scripts));
      for (const ep of r.episodes) expect(ep.outcome.success).toBe(false);
    }
  });
});

describe('sampling a Hugging Face policy through the binding', () => {
  const registry = new PolicyRegistry();
  beforeAll(async () => {
    await initTfBackend('tensorflow');
  });
  afterAll(() => registry.dispose());

  it('draws are symbols; their events carry model ids whose log-probs the model recomputes', async () => {
    const dir = fixture('qwen2');
    const { model } = loadHfModel(dir);
    registry.add(new Policy('actor', model, 0));
    registry.assignRole('solver', 'actor');
    registry.assignRole('checker', 'actor');
    const binding = hfSymbolBinding(HfTokenizer.fromDirectory(dir), model.config.vocabSize);
    const sampler = new PolicySampler(registry, { seed: 4, temperature: 1, binding });
    const wf = createWorkflow('fixed', { arithmetic: DEFAULT_ARITHMETIC, search: DEFAULT_SEARCH }, 1);
    const rollouts = await wf.play('t-hf', 4, sampler);
    const { body } = eventsOf(rollouts, 1_700_000_000_000, binding);
    const outputs = body.flatMap((e) => (e.type === 'AgentOutput' ? [e.value] : []));
    expect(outputs).toHaveLength(8);
    const vocab = vocabOf('qwen2');
    for (const o of outputs) {
      if (!o.contextTokenIds) throw new Error(`output ${o.outputId} has no context ids`);
      // The context starts with the BOS symbol, written as the tokenizer's id of "^".
      expect(o.contextTokenIds[0]).toBe(vocab['^']);
      expect(o.responseTokenIds.every((id) => Number.isInteger(id) && id >= 0 && id < 448)).toBe(true);
      const { logProbs, mask } = tokenLogProbs(model, [{ contextTokens: o.contextTokenIds, responseTokens: o.responseTokenIds }], { temperature: 1 });
      const again = Array.from(await logProbs.data()).slice(0, o.responseTokenIds.length);
      logProbs.dispose();
      mask.dispose();
      again.forEach((lp, j) => expect(Math.abs(lp - o.behaviourLogProbs[j])).toBeLessThan(1e-4));
    }
    // Draws stay in symbols: the checker's context holds the solver's answer as the workflow sees it.
    const ep = rollouts.episodes[0];
    expect(binding.toModel(ep.steps[1].consumed[0].contextTokens)).toEqual(
      outputs.find((o) => o.outputId === ep.steps[1].consumed[0].outputId)?.contextTokenIds,
    );
  });
});

function tokenIdOf(arch: string, token: string): number {
  const json = JSON.parse(fs.readFileSync(path.join(fixture(arch), 'tokenizer.json'), 'utf8')) as { added_tokens: { id: number; content: string }[] };
  return json.added_tokens.find((t) => t.content === token)?.id ?? -1;
}
