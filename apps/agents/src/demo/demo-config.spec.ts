import * as path from 'path';
import { ConfigError, repoRoot } from '@srpo/core';
import { loadDemoConfig } from './demo-config';

describe('demo configuration', () => {
  it('plans one learner per policy with its roles, ports and files, under a fresh topic prefix', () => {
    const c = loadDemoConfig({ SRPO_DEMO_RUN_ID: 'r1', SRPO_DEMO_DIR: '/tmp/demo-r1' }, {}, '/work');
    // At most 25 minutes; normally ended earlier by the target (every workflow ≥ 90 % over a minute).
    expect(c.seconds).toBe(1500);
    expect(c.target).toBe(0.9);
    expect(c.targetMinEpisodes).toBe(500);
    expect(c.updates).toBe(0);
    expect(c.topics.prefix).toBe('srpo.demo.r1.');
    expect(c.externalKafka).toBe(false);
    expect(c.learners.map((l) => [l.policyId, l.roles, l.httpPort])).toEqual([
      ['actor', ['solver', 'worker'], 3000],
      ['aggregator', ['aggregator'], 3001],
      ['judge', ['checker', 'router'], 3002],
    ]);
    const env = c.learnerEnv(c.learners[2]);
    expect(env).toMatchObject({
      SRPO_POLICY_ID: 'judge',
      SRPO_POLICY_ROLES: 'checker,router',
      SRPO_SQLITE_PATH: '/tmp/demo-r1/learner-judge.sqlite',
      SRPO_CHECKPOINT_DIR: '/tmp/demo-r1/checkpoints',
      SRPO_TOPIC_PREFIX: 'srpo.demo.r1.',
      SRPO_SETS_PER_UPDATE: '64',
      SRPO_CONSUMER_GROUP: 'srpo.demo.r1.learner.judge',
      SRPO_AGENTS_TEMPERATURE: '1.5',
    });
    expect(c.agents.temperature).toBe(1.5);
    // Agents and learners agree on the flow-control unit and the checkpoint root.
    expect(c.agents.setsPerUpdate).toBe(64);
    expect(c.agents.checkpointDir).toBe('/tmp/demo-r1/checkpoints');
    expect(c.agents.outcomeGate.groupId).toBe('srpo.demo.r1.materializer.sets');
    expect(c.endWindowMs).toBe(60_000);
  });

  it('--model gives learners and agents SRPO_MODEL_DIR instead of the default SRPO_MODEL_CONFIG; both at once are refused', () => {
    const qwen2 = path.join(repoRoot(), 'libs', 'hf', 'fixtures', 'qwen2');
    const c = loadDemoConfig({ SRPO_DEMO_DIR: '/tmp/x' }, { model: path.relative('/work', qwen2) }, '/work');
    const env = c.learnerEnv(c.learners[0]);
    expect(env.SRPO_MODEL_DIR).toBe(path.resolve('/work', path.relative('/work', qwen2)));
    expect(env.SRPO_MODEL_CONFIG).toBeUndefined();
    expect(c.agents.modelDir).toBe(qwen2);
    expect(loadDemoConfig({ SRPO_DEMO_DIR: '/tmp/x' }, {}, '/work').learnerEnv(c.learners[0]).SRPO_MODEL_CONFIG).toMatch(/"vocabSize":32/);
    expect(() => loadDemoConfig({ SRPO_DEMO_DIR: '/tmp/x', SRPO_MODEL_CONFIG: '{}' }, { model: qwen2 }, '/work')).toThrow(ConfigError);
    expect(() => loadDemoConfig({ SRPO_DEMO_DIR: '/tmp/x', SRPO_MODEL_CONFIG: '{}' }, { model: qwen2 }, '/work')).toThrow(/--model.*not both/);
    expect(() => loadDemoConfig({ SRPO_DEMO_DIR: '/tmp/x' }, { model: '/nonexistent' }, '/work')).toThrow(/SRPO_MODEL_DIR.*not a directory/);
  });

  it("--model leaves SRPO_LR and SRPO_SESSION_TIMEOUT_MS to the learner's defaults by model kind; the small transformer keeps the demo's", () => {
    const qwen2 = path.join(repoRoot(), 'libs', 'hf', 'fixtures', 'qwen2');
    const hf = loadDemoConfig({ SRPO_DEMO_DIR: '/tmp/x' }, { model: qwen2 }, '/work');
    const hfEnv = hf.learnerEnv(hf.learners[0]);
    expect(hfEnv.SRPO_LR).toBeUndefined();
    expect(hfEnv.SRPO_SESSION_TIMEOUT_MS).toBeUndefined();
    // What the user sets still reaches the learners.
    const set = loadDemoConfig({ SRPO_DEMO_DIR: '/tmp/x', SRPO_LR: '2e-5', SRPO_SESSION_TIMEOUT_MS: '45000' }, { model: qwen2 }, '/work');
    expect(set.learnerEnv(set.learners[0])).toMatchObject({ SRPO_LR: '2e-5', SRPO_SESSION_TIMEOUT_MS: '45000' });
    const toy = loadDemoConfig({ SRPO_DEMO_DIR: '/tmp/x' }, {}, '/work');
    expect(toy.learnerEnv(toy.learners[0])).toMatchObject({ SRPO_LR: '5e-4', SRPO_SESSION_TIMEOUT_MS: '10000' });
  });

  it('--seconds wins over SRPO_DEMO_SECONDS; a short run shortens the end window to half of it', () => {
    const c = loadDemoConfig({ SRPO_DEMO_SECONDS: '600', SRPO_DEMO_DIR: '/tmp/x' }, { seconds: 40 }, '/work');
    expect(c.seconds).toBe(40);
    expect(c.endWindowMs).toBe(20_000);
  });

  it('--target and --updates win over SRPO_DEMO_TARGET and SRPO_DEMO_UPDATES; 0 turns the early end off', () => {
    expect(loadDemoConfig({ SRPO_DEMO_TARGET: '0.5', SRPO_DEMO_UPDATES: '7', SRPO_DEMO_DIR: '/tmp/x' }, {}, '/work')).toMatchObject({
      target: 0.5,
      updates: 7,
    });
    expect(loadDemoConfig({ SRPO_DEMO_TARGET: '0.5', SRPO_DEMO_DIR: '/tmp/x' }, { target: 0, updates: 160 }, '/work')).toMatchObject({
      target: 0,
      updates: 160,
    });
  });

  it('uses KAFKA_BROKERS when set and passes other variables through to the children', () => {
    const c = loadDemoConfig({ KAFKA_BROKERS: 'k1:9092,k2:9092', SRPO_OBJECTIVE: 'gspo', SRPO_DEMO_DIR: '/tmp/x' }, {}, '/work');
    expect(c.externalKafka).toBe(true);
    expect(c.childEnv.KAFKA_BROKERS).toBe('k1:9092,k2:9092');
    expect(c.childEnv.SRPO_OBJECTIVE).toBe('gspo');
  });

  it('turns on the progress fallback when search is played', () => {
    expect(loadDemoConfig({ SRPO_AGENTS_WORKFLOWS: 'fixed,search', SRPO_DEMO_DIR: '/tmp/x' }, {}, '/work').childEnv.SRPO_PROGRESS_FALLBACK).toBe('true');
    expect(loadDemoConfig({ SRPO_DEMO_DIR: '/tmp/x' }, {}, '/work').childEnv.SRPO_PROGRESS_FALLBACK).toBeUndefined();
  });

  it.each([
    [{ SRPO_DEMO_SECONDS: '2' }, 'SRPO_DEMO_SECONDS'],
    [{ SRPO_DEMO_TARGET: '1.5' }, 'SRPO_DEMO_TARGET'],
    [{ SRPO_DEMO_UPDATES: '-1' }, 'SRPO_DEMO_UPDATES'],
    [{ SRPO_DEMO_RUN_ID: 'bad id' }, 'SRPO_DEMO_RUN_ID'],
    [{ SRPO_DEMO_HTTP_PORT: 'x' }, 'SRPO_DEMO_HTTP_PORT'],
    [{ SRPO_AGENTS_WORKFLOWS: 'poker' }, 'SRPO_AGENTS_WORKFLOWS'],
  ])('fails fast naming the variable: %j', (env, variable) => {
    expect(() => loadDemoConfig({ SRPO_DEMO_DIR: '/tmp/x', ...(env as Record<string, string>) }, {}, '/work')).toThrow(ConfigError);
    expect(() => loadDemoConfig({ SRPO_DEMO_DIR: '/tmp/x', ...(env as Record<string, string>) }, {}, '/work')).toThrow(variable);
  });
});
