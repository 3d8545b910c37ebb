import * as http from 'http';
import type { AddressInfo } from 'net';
import OpenAI from 'openai';
import type { NestExpressApplication } from '@nestjs/platform-express';
import { Logger } from '@srpo/core';
import { createKafka, ensureTopics, EventCodec, readTopicsToEnd, topicCatalog } from '@srpo/events';
import { ensureKafka, uniquePrefix } from '@srpo/testing';
import { bootstrap } from '../src/main';

/** Two teams' keys for the same policy, one for another policy only, and an admin key. */
const KEYS = {
  alpha: 'sk-gw-alpha-9f2c41d7e0b3',
  beta: 'sk-gw-beta-6a81d0c3f5e2',
  judge: 'sk-gw-judge-2b7e9c04a1f6',
  admin: 'sk-gw-admin-d4c8e2a0b617',
};
const KEY_FILE = JSON.stringify({ [KEYS.alpha]: ['actor'], [KEYS.beta]: ['actor'], [KEYS.judge]: ['judge'], [KEYS.admin]: ['*'] });
const UPSTREAM_SECRET = 'upstream-pass-5e1f';

/**
 * An upstream answering every completion with what the gateway records (token ids, log-probs,
 * a version), keeping the `authorization` header of each request.
 */
function recordableUpstream(): Promise<{ url: string; auth: (string | undefined)[]; close: () => Promise<void> }> {
  const auth: (string | undefined)[] = [];
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      auth.push(req.headers.authorization);
      res.setHeader('content-type', 'application/json');
      const logprobs = { tokens: ['o', 'k'], token_logprobs: [-0.5, -0.25] };
      res.end(
        JSON.stringify({
          id: 'c',
          object: 'text_completion',
          created: 0,
          model: 'actor',
          system_fingerprint: 'srpo-actor-v3',
          prompt_token_ids: [1, 2],
          choices: [{ index: 0, text: 'ok', token_ids: [5, 6], logprobs, finish_reason: 'stop' }],
        }),
      );
    });
  });
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () =>
      resolve({ url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`, auth, close: () => new Promise((r) => server.close(() => r())) }),
    ),
  );
}

/** A port nothing listens on. */
async function closedPort(): Promise<number> {
  const server = http.createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  await new Promise((r) => server.close(r));
  return port;
}

/**
 * The gateway app in this process, over real HTTP, recording to the real broker: what a key
 * may touch (its policies; the episodes it started), per-key rate budgets, and what reaches
 * clients and logs of keys and of the upstream's credentials.
 */
describe('srpo gateway: keys, episode ownership, per-key limits, secrets kept out of answers and logs', () => {
  const brokers = ensureKafka();
  const kafka = createKafka({ brokers, clientId: 'gateway-keys-test' });
  const codec = new EventCodec();
  const prefix = uniquePrefix('gwkeys');
  const catalog = topicCatalog({ prefix, rawPartitions: 1, derivedPartitions: 1 });
  const logLines: string[] = [];
  const apps: NestExpressApplication[] = [];
  const closers: (() => Promise<void>)[] = [];
  let up: Awaited<ReturnType<typeof recordableUpstream>>;

  /** A gateway booted as `srpo gateway` boots (config, producer connected, listening), on the test topics; its base URL. */
  const start = async (env: Record<string, string>): Promise<string> => {
    const app = await bootstrap({
      KAFKA_BROKERS: brokers.join(','),
      SRPO_TOPIC_PREFIX: prefix,
      SRPO_GATEWAY_API_KEYS: KEY_FILE,
      SRPO_GATEWAY_PORT: '0',
      ...env,
    });
    apps.push(app);
    return `http://127.0.0.1:${(app.getHttpServer().address() as AddressInfo).port}/v1`;
  };
  const client = (base: string, key: string, episode?: string, step = 0) =>
    new OpenAI({
      baseURL: base,
      apiKey: key,
      maxRetries: 0,
      defaultHeaders: episode ? { 'X-SRPO-Episode': episode, 'X-SRPO-Step': String(step), 'X-SRPO-Role': 'solver', 'X-SRPO-Agent': 'a' } : {},
    });
  const post = (base: string, route: 'transitions' | 'outcomes', key: string, body: unknown) =>
    fetch(`${base}/srpo/${route}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
  const transition = (episodeId: string, step: number) => ({
    transitionId: `${episodeId}.t${step}`,
    episodeId,
    step,
    preStateId: `s${step}`,
    taskId: 'task-1',
    position: 'solve',
    consumedOutputIds: [`${episodeId}.s${step}.a`],
    expectedCardinality: 1,
    workflowKind: 'FIXED',
    observationDigest: 'obs',
    done: false,
    eventTimeMs: Date.now(),
  });
  const outcome = (episodeId: string) => ({
    episodeId,
    taskId: 'task-1',
    outcomeReward: 1,
    success: true,
    verifier: 'test@1',
    turns: 2,
    eventTimeMs: Date.now(),
  });
  const written = async () => {
    const read = async (topic: string) => (await readTopicsToEnd(kafka, [topic])).map((r) => r.value);
    return {
      outputs: (await read(catalog.agentOutputs.name)).map((v) => codec.decodeAs('AgentOutput', v).outputId).sort(),
      transitions: (await read(catalog.transitions.name)).map((v) => codec.decodeAs('Transition', v).transitionId).sort(),
      outcomes: (await read(catalog.episodeOutcomes.name)).map((v) => codec.decodeAs('EpisodeOutcome', v).episodeId).sort(),
    };
  };

  beforeAll(async () => {
    Logger.configure({ level: 'debug', sink: { write: (line) => void logLines.push(line) } });
    const admin = kafka.admin();
    await admin.connect();
    await ensureTopics(admin, catalog.all());
    await admin.disconnect();
    up = await recordableUpstream();
    closers.push(() => up.close());
  });

  afterAll(async () => {
    for (const app of apps) await app.close();
    for (const close of closers) await close();
  });

  it('an episode belongs to the key that started it: the owner goes on turn after turn; any other key gets 403 on every endpoint and nothing is written', async () => {
    const base = await start({ SRPO_GATEWAY_UPSTREAM: up.url });
    // alpha starts ep-alpha; the judge key starts ep-judge on its own policy.
    await client(base, KEYS.alpha, 'ep-alpha', 0).completions.create({ model: 'actor', prompt: 'x' });
    expect((await post(base, 'transitions', KEYS.alpha, transition('ep-alpha', 0))).status).toBe(200);
    expect((await post(base, 'transitions', KEYS.judge, transition('ep-judge', 0))).status).toBe(200);
    const before = await written();

    const refusals: unknown[] = [];
    const shape = (e: unknown) => (e instanceof OpenAI.APIError ? [e.status, e.type, e.code, e.param] : String(e));
    // beta holds the same policy but not the episode: its output would collide with alpha's ep-alpha.s1.a.
    refusals.push(
      await client(base, KEYS.beta, 'ep-alpha', 1)
        .completions.create({ model: 'actor', prompt: 'x' })
        .then(() => 'ok', shape),
    );
    refusals.push(
      await client(base, KEYS.beta, 'ep-alpha', 1)
        .chat.completions.create({ model: 'actor', messages: [{ role: 'user', content: 'x' }], stream: true })
        .then(() => 'ok', shape),
    );
    // An admin key widens policies, not episodes.
    refusals.push(
      await client(base, KEYS.admin, 'ep-alpha', 1)
        .completions.create({ model: 'actor', prompt: 'x' })
        .then(() => 'ok', shape),
    );
    // The judge key may not use actor at all, in a new episode or in alpha's.
    refusals.push(
      await client(base, KEYS.judge, 'ep-new', 0)
        .completions.create({ model: 'actor', prompt: 'x' })
        .then(() => 'ok', shape),
    );
    const notOwned = [403, 'permission_error', 'episode_not_owned', 'X-SRPO-Episode'];
    expect(refusals).toEqual([notOwned, notOwned, notOwned, [403, 'permission_error', 'model_not_allowed', 'model']]);

    for (const [key, route, body] of [
      [KEYS.beta, 'transitions', transition('ep-alpha', 1)],
      [KEYS.judge, 'transitions', transition('ep-alpha', 1)],
      [KEYS.beta, 'outcomes', outcome('ep-alpha')],
      [KEYS.judge, 'outcomes', outcome('ep-alpha')],
      [KEYS.alpha, 'outcomes', outcome('ep-judge')],
    ] as const) {
      const res = await post(base, route, key, body);
      expect([route, body.episodeId, res.status, await res.json()]).toEqual([
        route,
        body.episodeId,
        403,
        {
          error: {
            message: `The episode '${body.episodeId}' belongs to another API key; an episode can only be continued with the key that started it.`,
            type: 'permission_error',
            param: 'episodeId',
            code: 'episode_not_owned',
          },
        },
      ]);
    }
    expect(await written()).toEqual(before);

    // The owner is not locked out: its next turn, transition and outcome go through.
    const next = await client(base, KEYS.alpha, 'ep-alpha', 1).completions.create({ model: 'actor', prompt: 'x' });
    expect((next as unknown as { srpo: { output_ids: string[] } }).srpo.output_ids).toEqual(['ep-alpha.s1.a']);
    expect((await post(base, 'transitions', KEYS.alpha, transition('ep-alpha', 1))).status).toBe(200);
    expect((await post(base, 'outcomes', KEYS.alpha, outcome('ep-alpha'))).status).toBe(200);
    expect(await written()).toEqual({
      outputs: ['ep-alpha.s0.a', 'ep-alpha.s1.a'],
      transitions: ['ep-alpha.t0', 'ep-alpha.t1', 'ep-judge.t0'],
      outcomes: ['ep-alpha'],
    });
  });

  it('limits each key to its own budget: a throttled key gets 429 with Retry-After while another key still gets through', async () => {
    const base = await start({ SRPO_GATEWAY_UPSTREAM: up.url, SRPO_GATEWAY_STRICT: 'false', SRPO_GATEWAY_KEY_RATE: '0.2', SRPO_GATEWAY_KEY_BURST: '2' });
    const alpha = client(base, KEYS.alpha);
    await alpha.completions.create({ model: 'actor', prompt: 'x' });
    await alpha.completions.create({ model: 'actor', prompt: 'x' });
    const refused = await alpha.completions.create({ model: 'actor', prompt: 'x' }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(refused).toBeInstanceOf(OpenAI.RateLimitError);
    const e = refused as InstanceType<typeof OpenAI.RateLimitError>;
    expect([e.status, e.code, e.type]).toEqual([429, 'rate_limit_exceeded', 'rate_limit_error']);
    // One token comes back every 5 s at 0.2/s.
    expect(e.headers?.get('retry-after')).toBe('5');
    // Its writes to /v1/srpo/* draw on the same budget.
    const t = await post(base, 'transitions', KEYS.alpha, transition('ep-rate', 0));
    expect([t.status, t.headers.get('retry-after')]).toEqual([429, '5']);
    // beta has a budget of its own.
    const ok = await client(base, KEYS.beta).completions.create({ model: 'actor', prompt: 'x' });
    expect(ok.choices[0].text).toBe('ok');
  });

  it("never shows the upstream URL's credentials: the client's 502 and the log name neither; a reachable upstream gets them as Basic auth", async () => {
    const port = await closedPort();
    const from = logLines.length;
    const base = await start({ SRPO_GATEWAY_UPSTREAM: `http://srpo:${UPSTREAM_SECRET}@127.0.0.1:${port}/v1`, SRPO_GATEWAY_STRICT: 'false' });
    // The start line names the upstream without its credentials, and the keys by id.
    const listening = logLines.slice(from).find((l) => l.includes('gateway listening'));
    expect(JSON.parse(listening ?? '{}')).toMatchObject({
      upstream: `http://127.0.0.1:${port}/v1`,
      keys: [expect.stringMatching(/^key-[0-9a-f]{8}$/), expect.any(String), expect.any(String), expect.any(String)],
    });
    const failure = await client(base, KEYS.alpha)
      .completions.create({ model: 'actor', prompt: 'x' })
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    expect(failure).toBeInstanceOf(OpenAI.APIError);
    const err = failure as InstanceType<typeof OpenAI.APIError>;
    expect([err.status, err.code, err.message]).toEqual([502, 'upstream_unreachable', '502 the upstream could not be reached (ECONNREFUSED)']);
    expect(JSON.stringify(err.error)).not.toMatch(new RegExp(`${UPSTREAM_SECRET}|srpo:|127\\.0\\.0\\.1`));
    const models = await fetch(`${base}/models`, { headers: { authorization: `Bearer ${KEYS.alpha}` } });
    expect(models.status).toBe(502);
    expect(await models.text()).not.toContain(UPSTREAM_SECRET);
    const lines = logLines.slice(from).join('\n');
    expect(lines).toMatch(/the upstream could not be reached/);
    expect(lines).not.toContain(UPSTREAM_SECRET);

    const withAuth = new URL(up.url);
    withAuth.username = 'srpo';
    withAuth.password = UPSTREAM_SECRET;
    const reachable = await start({ SRPO_GATEWAY_UPSTREAM: withAuth.toString(), SRPO_GATEWAY_STRICT: 'false' });
    const seen = up.auth.length;
    await client(reachable, KEYS.alpha).completions.create({ model: 'actor', prompt: 'x' });
    expect(up.auth.slice(seen)).toEqual([`Basic ${Buffer.from(`srpo:${UPSTREAM_SECRET}`).toString('base64')}`]);
  });

  it('logged no key and no upstream credentials, only key ids, and no error line', () => {
    const all = logLines.join('\n');
    expect(all).toMatch(/"keyId":"key-[0-9a-f]{8}"/);
    for (const key of Object.values(KEYS)) expect(all).not.toContain(key.slice(0, 10));
    expect(all).not.toContain(UPSTREAM_SECRET);
    expect(all).not.toMatch(/"level":"error"/);
  });
});
