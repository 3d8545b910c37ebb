import * as fs from 'fs';
import * as path from 'path';
import { repoRoot } from '@srpo/core';
import { nativeBackend } from './test/fixtures';
import { loadHfModel, type HfModel } from './hf-model-dir';
import { LlamaModel } from './llama-model';
import { scoreCases, tokenizeCases } from './score';
import { openHfWeights, readHfTensor } from './hf-weights';

/**
 * Agreement with transformers on tiny random checkpoints that
 * scripts/reference/make_hf_fixtures.py made with Python transformers/tokenizers: token ids
 * exactly equal, per-token log-probs within 1e-4. Nothing here compares our code with itself.
 */
const FIXTURES = path.join(repoRoot(), 'libs', 'hf', 'fixtures');
const TOLERANCE = 1e-4;

interface Reference {
  architecture: string;
  tokenization: { text: string; ids: number[] }[];
  tokenizationWithSpecial: { text: string; ids: number[] }[];
  cases: { prompt: string; response: string; promptTokenIds: number[]; responseTokenIds: number[]; logprobs: number[] }[];
  chatCases: {
    messages: { role: string; content: string }[];
    rendered: string;
    response: string;
    promptTokenIds: number[];
    responseTokenIds: number[];
    logprobs: number[];
  }[];
  idCases: { promptTokenIds: number[]; responseTokenIds: number[]; logprobs: number[] }[];
}

function maxAbsDiff(a: number[], b: number[]): number {
  expect(a).toHaveLength(b.length);
  return Math.max(...a.map((v, i) => Math.abs(v - b[i])));
}

const dirs = fs.existsSync(FIXTURES)
  ? fs
      .readdirSync(FIXTURES)
      .filter((d) => fs.existsSync(path.join(FIXTURES, d, 'reference.json')))
      .sort()
  : [];

describe('Hugging Face reference fixtures', () => {
  it('cover the three supported architectures', () => {
    const archs = dirs.map((d) => (JSON.parse(fs.readFileSync(path.join(FIXTURES, d, 'reference.json'), 'utf8')) as Reference).architecture);
    expect([...new Set(archs)].sort()).toEqual(['LlamaForCausalLM', 'MistralForCausalLM', 'Qwen2ForCausalLM']);
  });
});

describe.each(dirs)('%s against transformers', (name) => {
  const dir = path.join(FIXTURES, name);
  const ref = JSON.parse(fs.readFileSync(path.join(dir, 'reference.json'), 'utf8')) as Reference;
  let hf: HfModel;

  beforeAll(async () => {
    await nativeBackend();
    hf = loadHfModel(dir);
  });
  afterAll(() => hf?.model.dispose());

  it('tokenizes the corpus (unicode, emoji, code, numbers) to the same ids as Python tokenizers', () => {
    expect(ref.tokenization.length).toBeGreaterThanOrEqual(20);
    for (const { text, ids } of ref.tokenization) expect({ text, ids: hf.tokenizer.encode(text) }).toEqual({ text, ids });
  });

  it('adds the same special tokens when asked to', () => {
    for (const { text, ids } of ref.tokenizationWithSpecial) expect(hf.tokenizer.encode(text, { addSpecialTokens: true })).toEqual(ids);
  });

  it('renders the chat template as transformers does', () => {
    for (const c of ref.chatCases) expect(hf.tokenizer.applyChatTemplate(c.messages, { addGenerationPrompt: true })).toBe(c.rendered);
  });

  it('scores text cases within 1e-4 per token, from the same token ids', async () => {
    const cases = tokenizeCases(
      ref.cases.map((c) => ({ prompt: c.prompt, response: c.response })),
      hf.tokenizer,
    );
    cases.forEach((c, i) => expect(c).toEqual({ promptTokenIds: ref.cases[i].promptTokenIds, responseTokenIds: ref.cases[i].responseTokenIds }));
    const scored = await scoreCases(hf.model, cases);
    scored.forEach((s, i) => expect(maxAbsDiff(s.logprobs, ref.cases[i].logprobs)).toBeLessThan(TOLERANCE));
  });

  it('scores chat cases (template + generation prompt) within 1e-4 per token', async () => {
    const cases = tokenizeCases(
      ref.chatCases.map((c) => ({ prompt: c.messages, response: c.response })),
      hf.tokenizer,
      { chat: true },
    );
    cases.forEach((c, i) => expect(c).toEqual({ promptTokenIds: ref.chatCases[i].promptTokenIds, responseTokenIds: ref.chatCases[i].responseTokenIds }));
    (await scoreCases(hf.model, cases)).forEach((s, i) => expect(maxAbsDiff(s.logprobs, ref.chatCases[i].logprobs)).toBeLessThan(TOLERANCE));
  });

  it('scores token-id cases (including the highest id) within 1e-4 per token', async () => {
    const scored = await scoreCases(hf.model, ref.idCases);
    expect(ref.idCases.some((c) => [...c.promptTokenIds, ...c.responseTokenIds].includes(hf.config.vocabSize - 1))).toBe(true);
    scored.forEach((s, i) => expect(maxAbsDiff(s.logprobs, ref.idCases[i].logprobs)).toBeLessThan(TOLERANCE));
  });
});

describe('llama3 rope scaling matters', () => {
  const dir = path.join(FIXTURES, 'llama');
  const noScaling = path.join(dir, 'logprobs-noscaling.json');

  it('without the scaling the model gives the reference computed without it, and both differ', async () => {
    if (!fs.existsSync(noScaling)) throw new Error(`${noScaling} missing: run python3 scripts/reference/make_hf_fixtures.py`);
    await nativeBackend();
    const ref = JSON.parse(fs.readFileSync(path.join(dir, 'reference.json'), 'utf8')) as Reference;
    const want = JSON.parse(fs.readFileSync(noScaling, 'utf8')) as { logprobs: number[] };
    const hf = loadHfModel(dir);
    const weights = openHfWeights(dir);
    const tensors = new Map([...weights.tensors.keys()].map((n) => [n, readHfTensor(weights, n)] as const));
    const plain = LlamaModel.fromTensors({ ...hf.config, ropeScaling: { type: 'none' } }, tensors);
    try {
      const c = ref.cases[0];
      const [got] = await scoreCases(plain, [{ promptTokenIds: c.promptTokenIds, responseTokenIds: c.responseTokenIds }]);
      expect(maxAbsDiff(got.logprobs, want.logprobs)).toBeLessThan(TOLERANCE);
      expect(maxAbsDiff(want.logprobs, c.logprobs)).toBeGreaterThan(1e-3);
    } finally {
      plain.dispose();
      hf.model.dispose();
    }
  });
});
