import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import fc from 'fast-check';
import { repoRoot, SrpoError } from '@srpo/core';
import { HfTokenizer } from '@srpo/hf';
import { checkCase, FuzzTally, fuzzParameters, mutatedJson, mutatedText, type Json } from './fuzz';

const FIXTURES = path.join(repoRoot(), 'libs', 'hf', 'fixtures');
/** Loading parses JSON and builds the tokenizer (a few ms for these fixtures); rendering is faster. */
const BOUND_MS = 1_000;
const isTyped = (e: unknown): boolean => e instanceof SrpoError;

const read = (model: string, file: string) => fs.readFileSync(path.join(FIXTURES, model, file), 'utf8');

/** Loads a model directory holding `files`, then uses it as a server would: encode, decode, render a chat. */
function loadAndUse(dir: string, files: Record<string, string>): void {
  for (const f of fs.readdirSync(dir)) fs.rmSync(path.join(dir, f));
  for (const [name, text] of Object.entries(files)) fs.writeFileSync(path.join(dir, name), text);
  const tok = HfTokenizer.fromDirectory(dir);
  const ids = tok.encode('Hello, world! 12+30=42', { addSpecialTokens: true });
  tok.decode(ids);
  if (tok.chatTemplate !== undefined)
    tok.applyChatTemplate(
      [
        { role: 'user', content: 'Hi' },
        { role: 'assistant', content: 'Hello' },
      ],
      { addGenerationPrompt: true },
    );
}

describe('fuzz: tokenizer and chat-template loading from a model directory', () => {
  let dir: string;
  let warn: jest.SpyInstance;
  beforeAll(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-fuzz-tok-'));
    // The tokenizer library warns on the console about parts it skips (an unknown pattern type); thousands of lines otherwise.
    warn = jest.spyOn(console, 'warn').mockImplementation(() => undefined);
  });
  afterAll(() => {
    warn.mockRestore();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  const qwen = { 'tokenizer.json': read('qwen2', 'tokenizer.json'), 'tokenizer_config.json': read('qwen2', 'tokenizer_config.json') };
  const template = read('qwen2', 'chat_template.jinja');

  // What this fuzzer found (2026-12-07), kept as regressions: both were plain Errors out of the libraries.
  it('regressions: a template that does not parse, a tokenizer.json it builds but cannot run', () => {
    const refusal = (files: Record<string, string>): SrpoError => {
      try {
        loadAndUse(dir, files);
      } catch (e) {
        expect(e).toBeInstanceOf(SrpoError);
        return e as SrpoError;
      }
      throw new Error('accepted');
    };
    const badTemplate = refusal({ ...qwen, 'chat_template.jinja': 'z' + template.slice(1) });
    expect([badTemplate.field, badTemplate.message]).toEqual([
      'chat_template',
      expect.stringMatching(/^chat_template: does not parse: Unknown statement type: endfor/),
    ]);
    // Llama's post-processor adds the BOS, an added token whose id became `false`.
    const tokenizer = JSON.parse(read('llama', 'tokenizer.json')) as { added_tokens: { id: unknown }[] };
    tokenizer.added_tokens[0].id = false;
    const badTokenizer = refusal({ 'tokenizer.json': JSON.stringify(tokenizer), 'tokenizer_config.json': read('llama', 'tokenizer_config.json') });
    expect([badTokenizer.field, badTokenizer.message]).toEqual([
      'tokenizer.json',
      expect.stringMatching(/^tokenizer.json: cannot (en|de)code \(token_ids must be/),
    ]);
  });

  it('3,000 mutated chat templates: rendered or an SrpoError, each within 1 s', () => {
    const tally = new FuzzTally();
    fc.assert(
      fc.property(mutatedText([template]), (t) => {
        tally.add(
          checkCase(
            () => loadAndUse(dir, { ...qwen, 'chat_template.jinja': t }),
            isTyped,
            BOUND_MS,
            () => t,
          ),
        );
      }),
      fuzzParameters(3_000),
    );
    expect(tally.values).toBeGreaterThan(50);
    expect(tally.errors).toBeGreaterThan(100);
  });

  it.each(['llama', 'qwen2'])('%s: 1,000 structural mutations of tokenizer.json or tokenizer_config.json', (model) => {
    const tokenizer = JSON.parse(read(model, 'tokenizer.json')) as Json;
    const config = JSON.parse(read(model, 'tokenizer_config.json')) as Json;
    const tally = new FuzzTally();
    fc.assert(
      fc.property(fc.boolean(), mutatedJson([tokenizer]), mutatedJson([config]), (which, t, c) => {
        const files = which
          ? { 'tokenizer.json': JSON.stringify(t), 'tokenizer_config.json': JSON.stringify(config) }
          : { 'tokenizer.json': JSON.stringify(tokenizer), 'tokenizer_config.json': JSON.stringify(c) };
        tally.add(
          checkCase(
            () => loadAndUse(dir, files),
            isTyped,
            BOUND_MS,
            () => (which ? 'tokenizer.json mutation' : c),
          ),
        );
      }),
      fuzzParameters(1_000),
    );
    expect(tally.values).toBeGreaterThan(50);
    expect(tally.errors).toBeGreaterThan(10);
  });
});
