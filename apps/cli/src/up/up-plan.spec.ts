import { DIED_EXIT_CODE, defaultPolicyId, NOT_READY_EXIT_CODE, planUp, plannedPolicy, START_ORDER, STOP_ORDER, type UpOptions } from './up-plan';

const OPTIONS: UpOptions = {
  model: '/models/SmolLM2 135M',
  port: 8100,
  host: '127.0.0.1',
  servePort: 8000,
  learnerPort: 3000,
  materializerPort: 9100,
  readyTimeoutMs: 600_000,
};

describe('srpo up: the plan', () => {
  it('names the policy after the model directory (-lora for LoRA), characters outside [A-Za-z0-9._-] replaced', () => {
    expect(defaultPolicyId('/models/smollm2-135m-instruct', false)).toBe('smollm2-135m-instruct');
    expect(defaultPolicyId('/models/smollm2-135m-instruct/', true)).toBe('smollm2-135m-instruct-lora');
    expect(defaultPolicyId('/models/SmolLM2 135M', false)).toBe('SmolLM2-135M');
    expect(defaultPolicyId('/models/.hidden', false)).toBe('hidden');
  });

  it('starts materializer, learner, serve, gateway and stops them in the reverse order', () => {
    expect(planUp(OPTIONS, ['127.0.0.1:9092']).map((c) => c.role)).toEqual(START_ORDER);
    expect(STOP_ORDER).toEqual(['gateway', 'serve', 'learner', 'materializer']);
  });

  it('wires the children together: one policy, one broker list, serve upstream of the gateway, health on each port', () => {
    const plan = planUp({ ...OPTIONS, lora: '{}', lr: '2e-4', checkpoints: '/ck', backend: 'tensorflow' }, ['k1:9092', 'k2:9092']);
    const [materializer, learner, serve, gateway] = plan;
    expect(plannedPolicy(plan)).toBe('SmolLM2-135M-lora');
    for (const c of plan) expect(c.env.KAFKA_BROKERS).toBe('k1:9092,k2:9092');
    expect(materializer.env.SRPO_METRICS_PORT).toBe('9100');
    expect(learner.env).toMatchObject({
      SRPO_POLICY_ID: 'SmolLM2-135M-lora',
      SRPO_MODEL_DIR: '/models/SmolLM2 135M',
      SRPO_LORA: '{}',
      SRPO_LR: '2e-4',
      SRPO_CHECKPOINT_DIR: '/ck',
      SRPO_HTTP_PORT: '3000',
      SRPO_BACKEND: 'tensorflow',
    });
    expect(serve.env).toMatchObject({
      SRPO_SERVE_POLICIES: 'SmolLM2-135M-lora',
      SRPO_CHECKPOINT_DIR: '/ck',
      SRPO_SERVE_PORT: '8000',
      SRPO_SERVE_STARTUP_TIMEOUT_MS: '600000',
      SRPO_BACKEND: 'tensorflow',
    });
    expect(gateway.env).toMatchObject({ SRPO_GATEWAY_UPSTREAM: 'http://127.0.0.1:8000/v1', SRPO_GATEWAY_PORT: '8100', SRPO_GATEWAY_HOST: '127.0.0.1' });
    expect(plan.map((c) => c.health)).toEqual([
      'http://127.0.0.1:9100/health',
      'http://127.0.0.1:3000/health',
      'http://127.0.0.1:8000/health',
      'http://127.0.0.1:8100/health',
    ]);
    expect(gateway.url).toBe('http://127.0.0.1:8100/v1');
  });

  it('leaves what was not asked for to the environment (full weights: no SRPO_LORA, no SRPO_LR, no checkpoint dir)', () => {
    const [, learner, serve] = planUp({ ...OPTIONS, policy: 'actor' }, ['127.0.0.1:9092']);
    expect(learner.env.SRPO_POLICY_ID).toBe('actor');
    for (const v of ['SRPO_LORA', 'SRPO_LR', 'SRPO_CHECKPOINT_DIR', 'SRPO_SQLITE_PATH', 'SRPO_BACKEND', 'SRPO_SETS_PER_UPDATE'])
      expect(learner.env).not.toHaveProperty(v);
    expect(serve.env).not.toHaveProperty('SRPO_CHECKPOINT_DIR');
  });

  it('checks a gateway listening on every address at 127.0.0.1', () => {
    expect(planUp({ ...OPTIONS, host: '0.0.0.0' }, ['k:9092'])[3].health).toBe('http://127.0.0.1:8100/health');
  });

  it('gives each way of ending its own exit code', () => {
    const codes = [...Object.values(DIED_EXIT_CODE), NOT_READY_EXIT_CODE, 0, 1];
    expect(new Set(codes).size).toBe(codes.length);
  });
});
