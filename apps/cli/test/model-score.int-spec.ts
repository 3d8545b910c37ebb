import { execFile } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { promisify } from 'util';

const run = promisify(execFile);
const root = path.resolve(__dirname, '..', '..', '..');
const bin = path.join(root, 'bin', 'srpo.js');
const FIXTURES = path.join(root, 'libs', 'hf', 'fixtures');

interface Scored {
  promptTokenIds: number[];
  responseTokenIds: number[];
  logprobs: number[];
}

/** What these tests read of a fixture's reference.json (transformers' ids and log-probs per case). */
interface Reference {
  cases: (Scored & { prompt: string; response: string })[];
  idCases: Scored[];
  chatCases: (Scored & { messages: unknown; response: string })[];
}

async function score(model: string, input: unknown, ...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-score-')), 'in.json');
  fs.writeFileSync(file, typeof input === 'string' ? input : JSON.stringify(input));
  try {
    const { stdout, stderr } = await run('node', [bin, 'model', 'score', '--model', model, '--in', file, ...args], {
      env: { ...process.env, SRPO_LOG_LEVEL: 'error' },
    });
    return { code: 0, stdout, stderr };
  } catch (e) {
    const err = e as { code: number; stdout: string; stderr: string };
    return { code: err.code, stdout: err.stdout, stderr: err.stderr };
  }
}

/** A copy of a fixture directory that a test may break. */
function copyFixture(name: string): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `srpo-hf-${name}-`));
  for (const f of fs.readdirSync(path.join(FIXTURES, name))) fs.copyFileSync(path.join(FIXTURES, name, f), path.join(dir, f));
  return dir;
}

const maxDiff = (a: number[], b: number[]): number => Math.max(...a.map((v, i) => Math.abs(v - b[i])));

describe('npx srpo model score', () => {
  it.each(['llama', 'qwen2', 'mistral'])("%s: text, chat and id cases give transformers' ids and log-probs (1e-4)", async (name) => {
    const ref = JSON.parse(fs.readFileSync(path.join(FIXTURES, name, 'reference.json'), 'utf8')) as Reference;
    const dir = path.join(FIXTURES, name);
    const text = await score(dir, [
      ...ref.cases.map((c: { prompt: string; response: string }) => ({ prompt: c.prompt, response: c.response })),
      ...ref.idCases.map((c: Scored) => ({ promptTokenIds: c.promptTokenIds, responseTokenIds: c.responseTokenIds })),
    ]);
    expect(text.stderr).not.toMatch(/^srpo:/m);
    expect(text.code).toBe(0);
    const out = JSON.parse(text.stdout) as Scored[];
    const want = [...ref.cases, ...ref.idCases] as Scored[];
    expect(out).toHaveLength(want.length);
    out.forEach((o, i) => {
      expect([o.promptTokenIds, o.responseTokenIds]).toEqual([want[i].promptTokenIds, want[i].responseTokenIds]);
      expect(maxDiff(o.logprobs, want[i].logprobs)).toBeLessThan(1e-4);
    });
    const chat = await score(
      dir,
      ref.chatCases.map((c: { messages: unknown; response: string }) => ({ prompt: c.messages, response: c.response })),
      '--chat',
    );
    expect(chat.code).toBe(0);
    (JSON.parse(chat.stdout) as Scored[]).forEach((o, i) => {
      expect(o.promptTokenIds).toEqual(ref.chatCases[i].promptTokenIds);
      expect(maxDiff(o.logprobs, ref.chatCases[i].logprobs)).toBeLessThan(1e-4);
    });
  });

  it('an unsupported config is refused in one line naming the field and value', async () => {
    const dir = copyFixture('mistral');
    const config = JSON.parse(fs.readFileSync(path.join(dir, 'config.json'), 'utf8')) as Record<string, unknown>;
    fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify({ ...config, sliding_window: 64 }));
    const r = await score(dir, [{ prompt: 'a', response: 'b' }]);
    expect(r.code).not.toBe(0);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(/config\.json sliding_window=64: sliding-window attention is not implemented/);
  });

  it('a missing file is named', async () => {
    const dir = copyFixture('qwen2');
    fs.unlinkSync(path.join(dir, 'tokenizer.json'));
    const r = await score(dir, [{ prompt: 'a', response: 'b' }]);
    expect(r.code).not.toBe(0);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toContain(`${path.join(dir, 'tokenizer.json')}: missing`);
  });

  it('a token id out of range is named with its case and position', async () => {
    const vocab = (JSON.parse(fs.readFileSync(path.join(FIXTURES, 'qwen2', 'config.json'), 'utf8')) as { vocab_size: number }).vocab_size;
    const r = await score(path.join(FIXTURES, 'qwen2'), [
      { promptTokenIds: [1, 2], responseTokenIds: [3] },
      { promptTokenIds: [1], responseTokenIds: [4, vocab] },
    ]);
    expect(r.code).not.toBe(0);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toContain(`cases[1].responseTokenIds[1]: token id ${vocab} is out of range (vocab_size ${vocab})`);
  });

  it('a truncated weights file is refused as corrupt, without a crash', async () => {
    const dir = copyFixture('qwen2');
    const file = path.join(dir, 'model.safetensors');
    const bytes = fs.readFileSync(file);
    fs.writeFileSync(file, bytes.subarray(0, bytes.length - 1000));
    const r = await score(dir, [{ prompt: 'a', response: 'b' }]);
    expect(r.code).toBe(1);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(/^srpo: \[INTEGRITY_FAILED\] .*model\.safetensors/);
  });
});
