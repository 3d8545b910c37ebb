import { createHash } from 'crypto';
import * as fs from 'fs';
import * as http from 'http';
import type { AddressInfo } from 'net';
import * as os from 'os';
import * as path from 'path';
import { ConfigError } from '@srpo/core';
import { JudgeFailure } from './judge-errors';
import type { RewardInput } from './judge-input';
import { HttpReward, loadRewardModule, ModuleReward } from './reward-plugins';

const INPUT: RewardInput = {
  mode: 'output',
  episodeId: 'e1',
  taskId: 't1',
  outputs: [{ outputId: 'o1', step: 0, role: 'solver', agentId: 'a', policyId: 'actor', policyVersion: 3, prompt: '2+3?', response: '5' }],
};

const reasonOf = async (p: Promise<unknown>): Promise<string> => {
  try {
    await p;
  } catch (e) {
    if (e instanceof JudgeFailure) return e.reason;
    throw e;
  }
  return 'resolved';
};

describe('reward modules', () => {
  let dir: string;
  beforeAll(() => (dir = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-reward-'))));
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));
  const write = (name: string, text: string) => {
    const file = path.join(dir, name);
    fs.writeFileSync(file, text);
    return file;
  };

  it('loads a CommonJS function and records the file and its hash', async () => {
    const file = write('exact.js', "module.exports = (input) => (input.outputs[0].response.trim() === '5' ? 1 : 0);\n");
    const scorer = ModuleReward.fromFile(file);
    expect(scorer.verifier).toBe('module:exact.js');
    expect(scorer.details).toEqual({ rewardModule: 'exact.js', moduleSha256: createHash('sha256').update(fs.readFileSync(file)).digest('hex') });
    await expect(scorer.score(INPUT)).resolves.toEqual({ reward: 1, rawScore: 1, details: {} });
  });

  it('loads a TypeScript module with a named async export', async () => {
    const file = write(
      'typed.ts',
      'interface In { outputs: { response: string }[] }\nexport async function reward(input: In): Promise<number> { return input.outputs[0].response.length / 10; }\n',
    );
    await expect(ModuleReward.fromFile(file).score(INPUT)).resolves.toMatchObject({ reward: 0.1 });
  });

  it('takes a default export', () => {
    const file = write('def.js', 'exports.default = () => 0.5;\n');
    expect(typeof loadRewardModule(file).fn).toBe('function');
  });

  it('refuses a module without a function, naming the variable', () => {
    const file = write('none.js', 'module.exports = { answer: 42 };\n');
    expect(() => loadRewardModule(file)).toThrow(ConfigError);
    expect(() => loadRewardModule(file)).toThrow(/SRPO_JUDGE_REWARD_MODULE: .*exports no function/);
    expect(() => loadRewardModule(path.join(dir, 'missing.js'))).toThrow(/cannot read/);
  });

  it('calls a throw plugin and a non-number garbage', async () => {
    expect(await reasonOf(new ModuleReward(() => Promise.reject(new Error('boom')), 'x.js', 'h').score(INPUT))).toBe('plugin');
    expect(await reasonOf(new ModuleReward(() => NaN, 'x.js', 'h').score(INPUT))).toBe('garbage');
    expect(await reasonOf(new ModuleReward((() => '1') as unknown as () => number, 'x.js', 'h').score(INPUT))).toBe('garbage');
  });
});

describe('reward endpoints (a local HTTP server)', () => {
  let server: http.Server;
  let url: string;
  const bodies: unknown[] = [];
  beforeAll(async () => {
    server = http.createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        bodies.push(JSON.parse(Buffer.concat(chunks).toString('utf8')));
        if (req.url === '/hang') return;
        if (req.url === '/error') res.statusCode = 500;
        res.end(req.url === '/garbage' ? 'not json' : req.url === '/nan' ? '{"reward": "high"}' : '{"reward": 0.75}');
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  });

  it('posts the input as JSON and reads {reward}', async () => {
    const scorer = new HttpReward(`${url}/reward`, 1_000);
    expect(scorer.verifier).toBe(`http:${new URL(url).host}`);
    await expect(scorer.score(INPUT)).resolves.toEqual({ reward: 0.75, rawScore: 0.75, details: {} });
    expect(bodies.at(-1)).toEqual(INPUT);
  });

  it.each([
    ['/hang', 'timeout'],
    ['/error', 'http'],
    ['/garbage', 'garbage'],
    ['/nan', 'garbage'],
  ])('%s fails as %s', async (route, reason) => {
    expect(await reasonOf(new HttpReward(`${url}${route}`, 300).score(INPUT))).toBe(reason);
  });
});
