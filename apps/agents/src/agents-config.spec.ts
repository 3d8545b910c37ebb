import * as path from 'path';
import { ConfigError, repoRoot } from '@srpo/core';
import { loadAgentsConfig, policiesInUse } from './agents-config';

const load = (env: Record<string, string>) => loadAgentsConfig(env, '/work');

describe('agents configuration', () => {
  it('has working defaults: three workflows, three policies, G = 16', () => {
    const c = load({});
    expect(c.workflows).toEqual(['fixed', 'joint', 'routed']);
    expect(policiesInUse(c)).toEqual(['actor', 'aggregator', 'judge']);
    expect(c.rolePolicies.searcher).toBeUndefined(); // search is not played by default
    expect(c.groupSize).toBe(16);
    expect(c.checkpointDir).toBe(path.resolve('/work', '.srpo/checkpoints'));
    expect(c.outcomeGate).toEqual({ enabled: true, groupId: 'srpo.materializer.sets', timeoutMs: 30_000 });
  });

  it('maps roles to policies from SRPO_AGENTS_POLICIES: one id for every role shares one policy', () => {
    const c = load({ SRPO_AGENTS_POLICIES: 'solver=shared,checker=shared,worker=shared,router=shared,aggregator=shared' });
    expect(policiesInUse(c)).toEqual(['shared']);
  });

  it('watches the materializer consumer group of SRPO_APP_ID, under the topic prefix by default', () => {
    expect(load({ SRPO_TOPIC_PREFIX: 'x.' }).outcomeGate.groupId).toBe('x.materializer.sets');
    expect(load({ SRPO_APP_ID: 'mat' }).outcomeGate.groupId).toBe('mat.sets');
  });

  it('takes SRPO_MODEL_DIR (a Hugging Face directory, resolved against the working directory) for the symbol binding', () => {
    const qwen2 = path.join(repoRoot(), 'libs', 'hf', 'fixtures', 'qwen2');
    expect(load({ SRPO_MODEL_DIR: qwen2 }).modelDir).toBe(qwen2);
    expect(load({}).modelDir).toBeUndefined();
  });

  it.each([
    [{ SRPO_MODEL_DIR: '/nonexistent/model' }, 'SRPO_MODEL_DIR', /not a directory/],
    [{ SRPO_MODEL_DIR: path.join(repoRoot(), 'libs', 'hf', 'fixtures') }, 'SRPO_MODEL_DIR', /config\.json: missing/],
    [{ SRPO_AGENTS_WORKFLOWS: 'fixed,chess' }, 'SRPO_AGENTS_WORKFLOWS', /unknown workflow "chess"/],
    [{ SRPO_AGENTS_WORKFLOWS: 'fixed,fixed' }, 'SRPO_AGENTS_WORKFLOWS', /twice/],
    [{ SRPO_AGENTS_POLICIES: 'solver' }, 'SRPO_AGENTS_POLICIES', /role=policyId/],
    [{ SRPO_AGENTS_POLICIES: 'pilot=a' }, 'SRPO_AGENTS_POLICIES', /unknown role "pilot"/],
    [{ SRPO_AGENTS_POLICIES: 'solver=a/b' }, 'SRPO_AGENTS_POLICIES', /must match/],
    [{ SRPO_AGENTS_GROUP_SIZE: '1' }, 'SRPO_AGENTS_GROUP_SIZE', />= 2/],
    [{ SRPO_AGENTS_MODULUS: 'ten' }, 'SRPO_AGENTS_MODULUS', /integer/],
    [{ SRPO_AGENTS_WORKERS: '5' }, 'SRPO_AGENTS_WORKERS', /<= 4/],
    [{ SRPO_AGENTS_TEMPERATURE: '0' }, 'SRPO_AGENTS_TEMPERATURE', />= 0.05/],
    [{ SRPO_AGENTS_RUN_ID: 'a b' }, 'SRPO_AGENTS_RUN_ID', /must match/],
    [{ SRPO_AGENTS_OUTCOME_GATE: 'maybe' }, 'SRPO_AGENTS_OUTCOME_GATE', /true or false/],
    [{ KAFKA_SASL_MECHANISM: 'plain' }, 'KAFKA_SASL_USERNAME', /required/],
  ])('fails fast naming the variable: %j', (env, variable, message) => {
    let error: unknown;
    try {
      load(env);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as ConfigError).field).toBe(variable);
    expect((error as Error).message).toMatch(message);
  });
});
