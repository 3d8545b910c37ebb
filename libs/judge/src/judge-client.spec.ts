import { startFakeJudge, type FakeJudgeReply, type FakeJudgeServer } from '@srpo/testing';
import { JudgeClient, type JudgeClientOptions } from './judge-client';
import { JudgeFailure } from './judge-errors';

describe('JudgeClient (against a local OpenAI-compatible server)', () => {
  let server: FakeJudgeServer;
  let replies: FakeJudgeReply[];
  beforeAll(async () => {
    server = await startFakeJudge(() => replies.shift() ?? { content: 'Score: 1' });
  });
  afterAll(() => server.close());
  beforeEach(() => {
    server.requests.length = 0;
    replies = [];
  });

  const client = (o: Partial<JudgeClientOptions> = {}) =>
    new JudgeClient({ baseUrl: server.baseUrl, model: 'judge-x', timeoutMs: 2_000, concurrency: 2, maxTokens: 64, temperature: 0, retryDelayMs: 10, ...o });

  const failure = async (p: Promise<unknown>): Promise<JudgeFailure> => {
    try {
      await p;
    } catch (e) {
      if (e instanceof JudgeFailure) return e;
      throw e;
    }
    throw new Error('expected a JudgeFailure');
  };

  it('asks with the rubric as the user message and reports which model answered', async () => {
    replies = [{ content: '{"score": 4}' }];
    const answer = await client({ apiKey: 'sk-test' }).ask('rate this');
    expect(answer).toEqual({ content: '{"score": 4}', model: 'judge-model-2026-01-01', systemFingerprint: 'fp_fake' });
    expect(server.requests).toHaveLength(1);
    expect(server.requests[0]).toMatchObject({ prompt: 'rate this', model: 'judge-x', authorization: 'Bearer sk-test' });
    expect(server.requests[0].body).toMatchObject({ temperature: 0, max_tokens: 64 });
  });

  it('gives up on a judge that never answers, once, as a timeout', async () => {
    replies = [{ hang: true }, { content: 'Score: 1' }];
    const started = Date.now();
    const e = await failure(client({ timeoutMs: 300 }).ask('x'));
    expect(e.reason).toBe('timeout');
    expect(Date.now() - started).toBeLessThan(2_000);
    expect(server.requests).toHaveLength(1); // a timeout is not retried
  });

  it('retries a 503 once, then succeeds', async () => {
    replies = [{ status: 503 }, { content: 'Score: 2' }];
    await expect(client().ask('x')).resolves.toMatchObject({ content: 'Score: 2' });
    expect(server.requests).toHaveLength(2);
  });

  it('fails a 502 after one retry, and a 400 at once, as http', async () => {
    replies = [{ status: 502 }, { status: 502 }, { content: 'never asked' }];
    expect((await failure(client().ask('x'))).reason).toBe('http');
    expect(server.requests).toHaveLength(2);
    replies = [{ status: 400 }];
    expect((await failure(client().ask('y'))).reason).toBe('http');
    expect(server.requests).toHaveLength(3);
  });

  it('calls a body that is not a completion http', async () => {
    replies = [{ rawBody: '{"choices": []}' }];
    expect((await failure(client().ask('x'))).reason).toBe('http');
  });

  it('calls a refused connection unreachable', async () => {
    const e = await failure(client({ baseUrl: 'http://127.0.0.1:1/v1' }).ask('x'));
    expect(e.reason).toBe('unreachable');
  });

  it('keeps at most `concurrency` requests in flight', async () => {
    replies = [{ hang: true }, { hang: true }, { content: 'Score: 3' }];
    const c = client({ concurrency: 2, timeoutMs: 400 });
    const all = Promise.allSettled([c.ask('a'), c.ask('b'), c.ask('c')]);
    await new Promise((r) => setTimeout(r, 150));
    expect(server.requests).toHaveLength(2); // the third waits for a slot
    const settled = await all;
    expect(settled.map((s) => s.status)).toEqual(['rejected', 'rejected', 'fulfilled']);
    expect(server.requests).toHaveLength(3);
  });
});
