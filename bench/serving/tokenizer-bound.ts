/**
 * What bounding a model directory's code costs (not a timed test): the same calls with and
 * without the time bound of `@srpo/hf`'s `runBounded`, in one run, on one tokenizer.
 *
 * - encode: `HfTokenizer.encode` (always bounded) against `@huggingface/tokenizers`' `encode` on the
 *   same tokenizer.json;
 * - chat template: `HfTokenizer.applyChatTemplate` (bounded) against `@huggingface/jinja` in process;
 * - decode: `HfTokenizer.decode`, bounded only where tokenizer.json's decoder holds a regex (not for
 *   the Llama/Qwen2 ByteLevel decoders), against the library's `decode`.
 *
 *   npm run build:bench && node dist-bench/bench/serving/tokenizer-bound.js [--model DIR] [--calls 5000]
 *
 * Default model: SmolLM2-135M-Instruct where `scripts/setup.sh` made it, else the qwen2 fixture.
 */
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { Template } from '@huggingface/jinja';
import { Tokenizer } from '@huggingface/tokenizers';
import { repoRoot } from '@srpo/core';
import { HfTokenizer } from '@srpo/hf';
import { cpuDescription } from '../cpu';

function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && process.argv[i + 1] !== undefined ? process.argv[i + 1] : fallback;
}

/** Median over 5 rounds of the mean time per call, in microseconds. */
function perCallUs(calls: number, f: () => unknown): number {
  for (let i = 0; i < Math.min(200, calls); i++) f();
  const rounds: number[] = [];
  for (let r = 0; r < 5; r++) {
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < calls; i++) f();
    rounds.push(Number(process.hrtime.bigint() - t0) / calls / 1000);
  }
  return rounds.sort((a, b) => a - b)[2];
}

function main(): void {
  const smollm2 = path.join(os.homedir(), '.cache', 'srpo', 'models', 'smollm2-135m-instruct');
  const dir = arg('model', fs.existsSync(path.join(smollm2, 'tokenizer.json')) ? smollm2 : path.join(repoRoot(), 'libs', 'hf', 'fixtures', 'qwen2'));
  const calls = Number(arg('calls', '5000'));
  const json = (f: string) => JSON.parse(fs.readFileSync(path.join(dir, f), 'utf8')) as Record<string, unknown>;
  const library = new Tokenizer(json('tokenizer.json'), json('tokenizer_config.json'));
  const tok = HfTokenizer.fromDirectory(dir);
  const prompt = 'What is 17 + 25? Answer with the number only, then explain your steps briefly.';
  const messages = [
    { role: 'system', content: 'You are a careful solver.' },
    { role: 'user', content: prompt },
  ];
  const ids = tok.encode(prompt.repeat(4));
  const template = tok.chatTemplate === undefined ? undefined : new Template(tok.chatTemplate);
  const rows: { call: string; unboundedUs: number; srpoUs: number }[] = [
    {
      call: `encode (${prompt.length} chars)`,
      unboundedUs: perCallUs(calls, () => library.encode(prompt)),
      srpoUs: perCallUs(calls, () => tok.encode(prompt)),
    },
    {
      call: `decode (${ids.length} ids)`,
      unboundedUs: perCallUs(calls, () => library.decode(ids, { skip_special_tokens: true })),
      srpoUs: perCallUs(calls, () => tok.decode(ids, { skipSpecialTokens: true })),
    },
  ];
  if (template) {
    const context = { messages, add_generation_prompt: true, bos_token: tok.bosToken, eos_token: tok.eosToken };
    rows.push({
      call: 'chat template (2 messages)',
      unboundedUs: perCallUs(calls, () => template.render(context)),
      srpoUs: perCallUs(calls, () => tok.applyChatTemplate(messages, { addGenerationPrompt: true })),
    });
  }
  const out = { cpu: cpuDescription(), model: dir, calls, rows };
  console.log(JSON.stringify(out, null, 2));
}

main();
