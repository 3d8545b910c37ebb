import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { repoRoot, SrpoError } from '@srpo/core';
import { HfTokenizer } from './hf-tokenizer';

const QWEN2 = path.join(repoRoot(), 'libs', 'hf', 'fixtures', 'qwen2');
type Json = Record<string, unknown>;
/** Backtracks exponentially on a run of letters that does not end the text. */
const BACKTRACKING = '^(\\p{L}+)+$';

/** The qwen2 fixture's directory with `edit` applied to its tokenizer.json (and `files` beside it). */
function modelDir(edit: (tokenizer: Json) => void, files: Record<string, string> = {}): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-tok-'));
  for (const f of ['tokenizer_config.json', 'chat_template.jinja']) fs.copyFileSync(path.join(QWEN2, f), path.join(dir, f));
  const tokenizer = JSON.parse(fs.readFileSync(path.join(QWEN2, 'tokenizer.json'), 'utf8')) as Json;
  edit(tokenizer);
  fs.writeFileSync(path.join(dir, 'tokenizer.json'), JSON.stringify(tokenizer));
  for (const [name, text] of Object.entries(files)) fs.writeFileSync(path.join(dir, name), text);
  return dir;
}

function refusal(f: () => unknown): SrpoError {
  try {
    f();
  } catch (e) {
    expect(e).toBeInstanceOf(SrpoError);
    return e as SrpoError;
  }
  throw new Error('no refusal');
}

/** A call's answer in at most 5 s: the 1 s bound and slack for a loaded machine, against the regex's hours. */
function timed<T>(f: () => T): T {
  const t0 = performance.now();
  try {
    return f();
  } finally {
    expect(performance.now() - t0).toBeLessThan(5_000);
  }
}

describe('HfTokenizer: code from the model directory runs within a bound', () => {
  const dirs: string[] = [];
  const load = (dir: string) => {
    dirs.push(dir);
    return HfTokenizer.fromDirectory(dir);
  };
  afterAll(() => dirs.forEach((d) => fs.rmSync(d, { recursive: true, force: true })));

  it('stops a pre-tokenizer regex that backtracks, naming tokenizer.json; the tokenizer goes on encoding what it can', () => {
    const tok = load(
      modelDir((t) => {
        t.pre_tokenizer = { type: 'Split', pattern: { Regex: BACKTRACKING }, behavior: 'Isolated', invert: false };
      }),
    );
    const text = 'a'.repeat(40) + '1';
    const e = timed(() => refusal(() => tok.encode(text)));
    expect([e.field, e.message]).toEqual([
      'tokenizer.json',
      "tokenizer.json: encoding 41 characters took longer than 1000 ms; stopped (tokenizer.json is the model directory's)",
    ]);
    expect(tok.decode(tok.encode('abc'))).toBe('abc');
    expect(tok.decode([])).toBe('');
  });

  it('stops a normalizer regex that backtracks', () => {
    const tok = load(
      modelDir((t) => {
        t.normalizer = { type: 'Replace', pattern: { Regex: BACKTRACKING }, content: 'x' };
      }),
    );
    expect(timed(() => refusal(() => tok.encode('b'.repeat(40) + '2'))).field).toBe('tokenizer.json');
  });

  it("stops a decoder regex that backtracks on the model's own output", () => {
    const tok = load(
      modelDir((t) => {
        t.decoder = { type: 'Sequence', decoders: [t.decoder, { type: 'Replace', pattern: { Regex: BACKTRACKING }, content: 'x' }] };
      }),
    );
    const ids = tok.encode('c'.repeat(40) + '3');
    const e = timed(() => refusal(() => tok.decode(ids)));
    expect(e.message).toBe(`tokenizer.json: decoding ${ids.length} tokens took longer than 1000 ms; stopped (tokenizer.json is the model directory's)`);
  });

  it('stops a chat template that loops, naming chat_template, and renders again afterwards', () => {
    const tok = load(modelDir(() => undefined));
    const hostile = load(
      modelDir(() => undefined, { 'chat_template.jinja': '{% for i in range(10000) %}{% for j in range(10000) %}{% endfor %}{% endfor %}done' }),
    );
    const messages = [{ role: 'user', content: 'Hi' }];
    const e = timed(() => refusal(() => hostile.applyChatTemplate(messages)));
    expect([e.field, e.message]).toEqual([
      'chat_template',
      "chat_template: rendering took longer than 1000 ms; stopped (chat_template is the model directory's)",
    ]);
    expect(tok.applyChatTemplate(messages, { addGenerationPrompt: true })).toBe(
      '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n',
    );
  });

  it("reports a template's own error (raise_exception) as a refusal naming chat_template", () => {
    const tok = load(modelDir(() => undefined, { 'chat_template.jinja': "{{ raise_exception('no system role') }}" }));
    const e = refusal(() => tok.applyChatTemplate([{ role: 'user', content: 'Hi' }]));
    expect([e.field, e.message]).toEqual(['chat_template', 'chat_template: rendering failed: no system role']);
  });

  describe('tools', () => {
    /** A small Hermes-style template (the shape of Qwen2.5's): tools in the system turn, calls as <tool_call> blocks. */
    // Newlines after block tags are written as expressions: transformers renders with trim_blocks, which drops them.
    const TOOLS_TEMPLATE = [
      '{%- if tools %}<|im_start|>system\nTools:{% for t in tools %}{{ "\\n" }}{{ t | tojson }}{% endfor %}<|im_end|>\n{% endif %}',
      '{%- for m in messages %}<|im_start|>{{ m.role }}{{ "\\n" }}',
      '{%- if m.tool_calls %}{% for c in m.tool_calls %}<tool_call>{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}</tool_call>{% endfor %}',
      '{%- else %}{{ m.content }}{% endif %}<|im_end|>\n{% endfor %}',
      '{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}',
    ].join('');
    const tools = [{ type: 'function', function: { name: 'add', parameters: { type: 'object' } } }];

    it('renders the request tools and the calls of earlier turns as transformers passes them (tools, tool_calls with object arguments)', () => {
      const tok = load(modelDir(() => undefined, { 'chat_template.jinja': TOOLS_TEMPLATE }));
      expect(tok.rendersTools).toBe(true);
      const text = tok.applyChatTemplate(
        [
          { role: 'user', content: 'add 1 and 2' },
          { role: 'assistant', content: '', tool_calls: [{ type: 'function', function: { name: 'add', arguments: { a: 1, b: 2 } } }] },
          { role: 'tool', content: '3', tool_call_id: 'call_1', name: 'add' },
        ],
        { addGenerationPrompt: true, tools },
      );
      // Written out by hand: json.dumps' separators, the call's arguments as an object.
      expect(text).toBe(
        '<|im_start|>system\nTools:\n{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}<|im_end|>\n' +
          '<|im_start|>user\nadd 1 and 2<|im_end|>\n' +
          '<|im_start|>assistant\n<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call><|im_end|>\n' +
          '<|im_start|>tool\n3<|im_end|>\n' +
          '<|im_start|>assistant\n',
      );
      // Without tools the same template renders no tool turn.
      expect(tok.applyChatTemplate([{ role: 'user', content: 'hi' }], { addGenerationPrompt: true })).toBe(
        '<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n',
      );
    });

    it('refuses tools, naming them, for a template that never reads them (they would be dropped silently)', () => {
      const tok = load(modelDir(() => undefined));
      expect(tok.rendersTools).toBe(false);
      const e = refusal(() => tok.applyChatTemplate([{ role: 'user', content: 'hi' }], { tools }));
      expect([e.field, e.message]).toEqual(['tools', expect.stringMatching(/^tools: this model's chat template does not render tools/)]);
      // An empty list is no tools.
      expect(tok.applyChatTemplate([{ role: 'user', content: 'hi' }], { tools: [] })).toContain('hi');
    });
  });
});
