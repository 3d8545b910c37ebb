import * as fs from 'fs';
import * as http from 'http';
import * as os from 'os';
import * as path from 'path';
import type { AddressInfo } from 'net';
import { AgentEventsProducer, createKafka } from '@srpo/events';
import { OpenAiError } from '../openai-protocol';
import { ApiKeys } from './api-keys';
import { CompletionGateway, type Responder } from './completion-gateway';
import { EventSpool } from './event-spool';

/** A real HTTP upstream that answers after `delayMs`, counting what it saw. */
function slowUpstream(delayMs: number): Promise<{ url: string; seen: Record<string, unknown>[]; close: () => Promise<void> }> {
  const seen: Record<string, unknown>[] = [];
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (d: Buffer) => (body += d.toString()));
    req.on('end', () => {
      seen.push(JSON.parse(body) as Record<string, unknown>);
      setTimeout(() => {
        res.setHeader('content-type', 'application/json');
        res.end(JSON.stringify({ id: 'x', object: 'text_completion', choices: [{ index: 0, text: 'ok', finish_reason: 'length' }] }));
      }, delayMs);
    });
  });
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () =>
      resolve({ url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`, seen, close: () => new Promise((r) => server.close(() => r())) }),
    ),
  );
}

const collect = (): Responder & { bodies: unknown[] } => {
  const bodies: unknown[] = [];
  return { bodies, json: (_s, b) => void bodies.push(b), startStream: () => undefined, write: async () => undefined, end: () => undefined };
};

describe('completion gateway (unrecorded pass-through, a slow upstream)', () => {
  // Never connected: these requests carry no episode fields, so nothing is written.
  const sdk = new AgentEventsProducer({ kafka: createKafka({ brokers: ['127.0.0.1:1'], clientId: 'unused' }) });

  it('bounds the requests in flight: past maxInFlight a request gets 429 at once instead of queueing without bound', async () => {
    const up = await slowUpstream(400);
    const gw = new CompletionGateway({
      upstreamUrl: up.url,
      upstreamTokenIds: true,
      strict: false,
      keys: ApiKeys.open(),
      sdk,
      upstreamTimeoutMs: 5000,
      maxInFlight: 2,
      recordTimeoutMs: 1000,
    });
    const out = collect();
    const calls = [0, 1, 2].map(() =>
      gw.complete('completions', {}, { model: 'm', prompt: 'x' }, out).then(
        () => 'ok',
        (e: unknown) => e,
      ),
    );
    const results = await Promise.all(calls);
    expect(results.filter((r) => r === 'ok')).toHaveLength(2);
    const refused = results.find((r) => r !== 'ok') as OpenAiError;
    expect([refused.status, refused.code, refused.headers]).toEqual([429, 'rate_limit_exceeded', { 'retry-after': '1' }]);
    expect(up.seen).toHaveLength(2);
    // Without episode fields in non-strict mode the request goes upstream as sent: no log-probs or ids added.
    expect(up.seen[0]).toEqual({ model: 'm', prompt: 'x' });
    await up.close();
  });

  it('gives up on an upstream slower than its timeout with 502, without naming its URL', async () => {
    const up = await slowUpstream(1500);
    const gw = new CompletionGateway({
      upstreamUrl: up.url,
      upstreamTokenIds: true,
      strict: false,
      keys: ApiKeys.open(),
      sdk,
      upstreamTimeoutMs: 200,
      maxInFlight: 4,
      recordTimeoutMs: 1000,
    });
    await expect(gw.complete('completions', {}, { model: 'm', prompt: 'x' }, collect())).rejects.toMatchObject({
      status: 502,
      code: 'upstream_unreachable',
      message: 'the upstream could not be reached (TimeoutError)',
    });
    await up.close();
  });
});

/**
 * A real HTTP upstream that holds each request open (streaming a chunk every 50 ms for `stream`
 * requests, answering nothing otherwise) and reports when the gateway closed the request.
 */
function holdingUpstream(): Promise<{ url: string; closed: Promise<void>; close: () => Promise<void> }> {
  let closedNow!: () => void;
  const closed = new Promise<void>((r) => (closedNow = r));
  const sockets = new Set<import('net').Socket>();
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (d: Buffer) => (body += d.toString()));
    req.on('end', () => {
      let timer: NodeJS.Timeout | undefined;
      if ((JSON.parse(body) as { stream?: boolean }).stream === true) {
        res.setHeader('content-type', 'text/event-stream');
        const chunk = { id: 'x', object: 'text_completion', choices: [{ index: 0, text: 'a', finish_reason: null }] };
        timer = setInterval(() => res.write(`data: ${JSON.stringify(chunk)}\n\n`), 50);
      }
      res.on('close', () => {
        clearInterval(timer);
        closedNow();
      });
    });
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () =>
      resolve({
        url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`,
        closed,
        close: () => {
          for (const s of sockets) s.destroy();
          return new Promise((r) => server.close(() => r()));
        },
      }),
    ),
  );
}

describe('completion gateway: a client that goes away cancels its upstream request', () => {
  const sdk = new AgentEventsProducer({ kafka: createKafka({ brokers: ['127.0.0.1:1'], clientId: 'unused' }) });
  const gateway = (url: string) =>
    new CompletionGateway({
      upstreamUrl: url,
      upstreamTokenIds: true,
      strict: false,
      keys: ApiKeys.open(),
      sdk,
      upstreamTimeoutMs: 30_000,
      maxInFlight: 4,
      recordTimeoutMs: 1000,
    });

  it.each([
    ['waiting for a non-streamed answer', false],
    ['in the middle of a stream', true],
  ])('%s: the upstream sees its request closed at once, and the gateway ends with 499', async (_, stream) => {
    const up = await holdingUpstream();
    try {
      const gone = new AbortController();
      const written: string[] = [];
      const out: Responder = { ...collect(), gone: gone.signal, write: async (d) => void written.push(d) };
      const t0 = Date.now();
      const done = gateway(up.url)
        .complete('completions', {}, { model: 'm', prompt: 'x', stream }, out)
        .then(
          () => undefined,
          (e: unknown) => e,
        );
      // The client leaves after its first chunk (streamed), or while it waits.
      if (stream) while (written.length === 0) await new Promise((r) => setTimeout(r, 10));
      else await new Promise((r) => setTimeout(r, 200));
      gone.abort();
      await up.closed;
      const e = (await done) as OpenAiError;
      expect([e.status, e.code]).toEqual([499, 'client_closed_request']);
      // Within the upstream timeout's 30 s by far: the cancellation, not the timeout, ended it.
      expect(Date.now() - t0).toBeLessThan(10_000);
    } finally {
      await up.close();
    }
  });
});

describe('completion gateway: GET /v1/models', () => {
  it('lists only the models the caller key may use; an admin key lists every one', async () => {
    const SCOPED = 'sk-scoped-0123456789';
    const ADMIN = 'sk-admin-01234567890';
    const gw = new CompletionGateway({
      upstreamUrl: 'http://127.0.0.1:1/v1',
      upstreamTokenIds: true,
      strict: false,
      keys: ApiKeys.parse(JSON.stringify({ [SCOPED]: ['actor'], [ADMIN]: ['*'] }), 'SRPO_GATEWAY_API_KEYS'),
      models: new Map([
        ['actor', 'up-actor'],
        ['judge', 'up-judge'],
      ]),
      sdk: new AgentEventsProducer({ kafka: createKafka({ brokers: ['127.0.0.1:1'], clientId: 'unused' }) }),
      upstreamTimeoutMs: 1000,
      maxInFlight: 4,
      recordTimeoutMs: 1000,
    });
    const ids = async (key: string) => ((await gw.models({ authorization: `Bearer ${key}` })).data as { id: string }[]).map((m) => m.id);
    expect(await ids(SCOPED)).toEqual(['actor']);
    expect(await ids(ADMIN)).toEqual(['actor', 'judge']);
  });
});

describe('completion gateway with a spool and Kafka out of reach', () => {
  it('spools what Kafka does not take, and answers 503 spool_full once the spool is at its budget (nothing recorded, nothing lost)', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'gw-spool-'));
    const sdk = new AgentEventsProducer({ kafka: createKafka({ brokers: ['127.0.0.1:1'], clientId: 'down' }) });
    // Kafka out of reach, at once (the real client would retry for seconds): validation stays the SDK's own.
    jest.spyOn(sdk, 'emitBatch').mockRejectedValue(new Error('Connection error: connect ECONNREFUSED 127.0.0.1:1'));
    const outcome = (id: string) => ({ episodeId: id, taskId: 't', outcomeReward: 1, success: true, verifier: 'v', turns: 1, eventTimeMs: 1 });
    const line = Buffer.byteLength(JSON.stringify([{ type: 'EpisodeOutcome', value: outcome('e-1') }])) + 1;
    const spool = new EventSpool(dir, () => Promise.reject(new Error('still down')), { retryMs: 60_000, maxBytes: line + line / 2 });
    spool.open();
    const gw = new CompletionGateway({
      upstreamUrl: 'http://127.0.0.1:1/v1',
      upstreamTokenIds: true,
      strict: false,
      keys: ApiKeys.open(),
      sdk,
      spool,
      upstreamTimeoutMs: 1000,
      maxInFlight: 4,
      recordTimeoutMs: 300,
    });
    try {
      await expect(gw.record('EpisodeOutcome', {}, outcome('e-1'))).resolves.toEqual({ recorded: 'EpisodeOutcome', spooled: true });
      await expect(gw.record('EpisodeOutcome', {}, outcome('e-2'))).rejects.toMatchObject({
        status: 503,
        code: 'spool_full',
        message: expect.stringMatching(/^the events could not be recorded: the gateway's spool is full/) as unknown,
      });
      expect(spool.pending).toBe(1);
    } finally {
      await spool.close();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
