import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { ValidationError } from '@srpo/core';
import { LLM_DEMO_DEFAULTS, loadLlmDemoConfig, type LlmDemoFlags } from './llm-demo-config';

const model = fs.mkdtempSync(path.join(os.tmpdir(), 'llm-demo-model-'));
fs.writeFileSync(path.join(model, 'config.json'), '{}');
const cwd = os.tmpdir();
const ENV = { PATH: '/usr/bin', SRPO_DEMO_LLM_DIR: '/tmp/llm-run', KAFKA_BROKERS: 'b1:9092,b2:9092' };
const load = (flags: LlmDemoFlags, env: Record<string, string> = ENV) => loadLlmDemoConfig({ model, ...flags }, env, cwd, 'r1');

/** The error a load throws: a ValidationError whose message starts with the flag. */
function errorOf(flags: LlmDemoFlags, env: Record<string, string> = ENV): ValidationError {
  try {
    loadLlmDemoConfig(flags, env, cwd, 'r1');
  } catch (e) {
    expect(e).toBeInstanceOf(ValidationError);
    return e as ValidationError;
  }
  throw new Error('no error');
}

const argAfter = (args: string[], flag: string) => args[args.indexOf(flag) + 1];

describe('loadLlmDemoConfig', () => {
  it('plans one srpo up on the demo ports with LoRA, lr, policy, checkpoints and the audit store in the run directory', () => {
    const c = load({});
    expect(c.mode).toBe('run');
    expect(c.runDir).toBe('/tmp/llm-run');
    const args = c.topology!.args;
    expect(args[0]).toMatch(/bin\/srpo\.js$/);
    expect(args[1]).toBe('up');
    expect(argAfter(args, '--model')).toBe(model);
    expect(JSON.parse(argAfter(args, '--lora'))).toEqual({
      r: 16,
      alpha: 32,
      targetModules: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'],
    });
    expect(argAfter(args, '--lr')).toBe(LLM_DEMO_DEFAULTS.lr);
    expect(argAfter(args, '--policy')).toBe('smollm2-demo');
    expect([argAfter(args, '--port'), argAfter(args, '--serve-port'), argAfter(args, '--learner-port'), argAfter(args, '--materializer-port')]).toEqual([
      '8110',
      '8010',
      '3010',
      '3011',
    ]);
    expect(argAfter(args, '--checkpoints')).toBe('/tmp/llm-run/checkpoints');
    expect(argAfter(args, '--sqlite')).toBe('/tmp/llm-run/learner.sqlite');
    expect(c.topology!.logFile).toBe('/tmp/llm-run/topology.log');
    expect(c.gatewayUrl).toBe('http://127.0.0.1:8110/v1');
    expect(c.serveUrl).toBe('http://127.0.0.1:8010/v1');
    expect(c.learnerUrl).toBe('http://127.0.0.1:3010');
  });

  it("gives srpo up the learner settings and the run's own topics, consumer group and state, passing the rest of the environment", () => {
    const topology = load({}).topology!;
    expect(topology.env).toMatchObject({
      PATH: '/usr/bin',
      KAFKA_BROKERS: 'b1:9092,b2:9092',
      SRPO_CORRECTION: 'tis',
      SRPO_SETS_PER_UPDATE: '16',
      SRPO_TOPIC_PREFIX: 'srpo.demo-llm.r1.',
      SRPO_CONSUMER_GROUP: 'srpo.demo-llm.r1.learner',
      SRPO_STATE_DIR: '/tmp/llm-run/state',
    });
    expect(topology.broker).toEqual({ external: true, brokers: ['b1:9092', 'b2:9092'], local: { port: 9092, dir: undefined } });
  });

  it('the play defaults: add-10, G 8 at 0.8, solver only, 2 problems in flight, 200 held out every 240 s, at most 1800 s, until a gain', () => {
    const { run } = load({});
    expect(run).toMatchObject({ variant: 'add-10', heldOut: 200, concurrency: 2, evalEveryMs: 240_000, limitMs: 1_800_000, until: 'gain' });
    expect(run.play).toMatchObject({ runId: 'r1', groupSize: 8, temperature: 0.8, verifier: false, promptStyle: 'shots' });
    // 16 sets per update, 8 solver sets per problem: two problems per update, at most one update ahead.
    expect(run.pacing).toEqual({ tasksPerUpdate: 2, maxAhead: 1, timeoutMs: 180_000, pollMs: 500 });
  });

  it("pacing counts the verifier's sets and the sets per update; --max-ahead off turns it off", () => {
    expect(load({ verifier: true }).run.pacing?.tasksPerUpdate).toBe(1);
    expect(load({ setsPerUpdate: '32', maxAhead: '2' }).run.pacing).toMatchObject({ tasksPerUpdate: 4, maxAhead: 2 });
    expect(load({ maxAhead: 'off' }).run.pacing).toBeUndefined();
  });

  it('flags override: ports, lr, correction, sets per update, timing, verifier', () => {
    const c = load({
      port: '9110',
      servePort: '9010',
      learnerPort: '9020',
      materializerPort: '9021',
      lr: '2e-4',
      correction: 'mis',
      setsPerUpdate: '32',
      seconds: '120',
      heldOut: '16',
      evalEvery: '45',
      until: 'time',
      verifier: true,
    });
    expect(c.gatewayUrl).toBe('http://127.0.0.1:9110/v1');
    expect(argAfter(c.topology!.args, '--lr')).toBe('2e-4');
    expect(c.topology!.env).toMatchObject({ SRPO_CORRECTION: 'mis', SRPO_SETS_PER_UPDATE: '32' });
    expect(c.run).toMatchObject({ limitMs: 120_000, heldOut: 16, evalEveryMs: 45_000, until: 'time' });
    expect(c.run.play.verifier).toBe(true);
  });

  it('SRPO_CORRECTION and SRPO_SETS_PER_UPDATE are the defaults of their flags; a flag wins', () => {
    const env = { ...ENV, SRPO_CORRECTION: 'none', SRPO_SETS_PER_UPDATE: '8' };
    expect(load({}, env).topology!.env).toMatchObject({ SRPO_CORRECTION: 'none', SRPO_SETS_PER_UPDATE: '8' });
    expect(load({ correction: 'tis' }, env).topology!.env.SRPO_CORRECTION).toBe('tis');
  });

  it('without KAFKA_BROKERS the local broker is planned on SRPO_KAFKA_PORT', () => {
    const c = load({}, { SRPO_DEMO_LLM_DIR: '/tmp/llm-run', SRPO_KAFKA_PORT: '9192' });
    expect(c.topology!.broker).toEqual({ external: false, brokers: ['127.0.0.1:9192'], local: { port: 9192, dir: undefined } });
  });

  it.each<[LlmDemoFlags, RegExp]>([
    [{ heldOut: '0' }, /^--held-out: must be an integer in \[1, 10000\], got "0"$/],
    [{ seconds: 'soon' }, /^--seconds: must be an integer/],
    [{ evalEvery: '2' }, /^--eval-every: must be an integer in \[5, 86400\]/],
    [{ until: 'forever' }, /^--until: must be one of gain, time, got "forever"$/],
    [{ correction: 'xyz' }, /^--correction: must be one of none, tis, mis/],
    [{ setsPerUpdate: '0' }, /^--sets-per-update: must be an integer/],
    [{ lr: '-1' }, /^--lr: must be a number in \(0, 1\)/],
    [{ lr: 'fast' }, /^--lr: /],
    [{ temperature: '0' }, /^--temperature: must be in \(0, 2\]/],
    [{ variant: 'calculus' }, /^--variant: must be one of add-10, /],
    [{ groupSize: '1' }, /^--group-size: must be an integer in \[2, 64\]/],
    [{ concurrency: '0' }, /^--concurrency: /],
    [{ port: '70000' }, /^--port: must be an integer in \[1, 65535\]/],
    [{ servePort: '8110' }, /^--port: 8110 is also --serve-port's port/],
    [{ policy: 'a/b' }, /^--policy: must match/],
    [{ maxAhead: '-1' }, /^--max-ahead: must be an integer in \[0, 1000\]/],
    [{ gateway: 'http://x/v1' }, /^--gateway: only with --attach/],
  ])('%j fails naming the flag', (flags, message) => {
    expect(errorOf({ model, ...flags }).message).toMatch(message);
  });

  it('--model must be a Hugging Face directory; without it, SmolLM2 where the set-up puts it, or how to make it', () => {
    expect(errorOf({ model: '/nonexistent/dir' }).message).toMatch(/^--model: \/nonexistent\/dir is not a Hugging Face model directory \(no config\.json\)$/);
    const missing = errorOf({}, { ...ENV, SRPO_SMOLLM2_DIR: '/nonexistent/smollm2' }).message;
    expect(missing).toMatch(
      /^--model: SmolLM2-135M-Instruct is not ready \(\/nonexistent\/smollm2 does not exist\); python3 scripts\/models\/make-smollm2\.py/,
    );
  });

  describe('--attach', () => {
    const attach = { attach: true, gateway: 'http://127.0.0.1:8100/v1/', serveUrl: 'http://127.0.0.1:8000/v1', policy: 'actor' };

    it('runs only the agents against the given URLs: no topology', () => {
      const c = loadLlmDemoConfig(attach, ENV, cwd, 'r1');
      expect(c).toMatchObject({ mode: 'attach', policy: 'actor', gatewayUrl: 'http://127.0.0.1:8100/v1', serveUrl: 'http://127.0.0.1:8000/v1' });
      expect(c.topology).toBeUndefined();
      expect(c.learnerUrl).toBeUndefined();
      expect(loadLlmDemoConfig({ ...attach, learnerUrl: 'http://127.0.0.1:3000' }, ENV, cwd, 'r1').learnerUrl).toBe('http://127.0.0.1:3000');
      // The attached learner's sets per update still pace the agents.
      expect(loadLlmDemoConfig({ ...attach, setsPerUpdate: '64' }, ENV, cwd, 'r1').run.pacing?.tasksPerUpdate).toBe(8);
    });

    it('needs --gateway, --serve-url and --policy, and refuses the topology flags', () => {
      expect(errorOf({ ...attach, gateway: undefined }).message).toBe('--gateway: is required with --attach');
      expect(errorOf({ ...attach, serveUrl: undefined }).message).toBe('--serve-url: is required with --attach');
      expect(errorOf({ ...attach, policy: undefined }).message).toBe('--policy: is required with --attach');
      expect(errorOf({ ...attach, serveUrl: 'ftp://x' }).message).toMatch(/^--serve-url: must be an http\(s\) URL/);
      expect(errorOf({ ...attach, model }).message).toMatch(/^--model: configures the topology that --attach does not start/);
      expect(errorOf({ ...attach, learnerPort: '3000' }).message).toMatch(/^--learner-port: /);
    });
  });
});
