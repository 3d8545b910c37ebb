import * as http from 'http';
import type { AddressInfo, Socket } from 'net';

/** How the fake judge answers one request: a completion, an error status, a raw body, or nothing at all. */
export type FakeJudgeReply = { content: string } | { status: number } | { rawBody: string } | { hang: true };

export interface FakeJudgeRequest {
  prompt: string;
  model: string;
  authorization: string | undefined;
  body: Record<string, unknown>;
}

export interface FakeJudgeServer {
  /** `http://127.0.0.1:<port>/v1`: the OpenAI base URL. */
  baseUrl: string;
  requests: FakeJudgeRequest[];
  close(): Promise<void>;
}

/**
 * A small OpenAI-compatible `POST /v1/chat/completions` server standing in for an external judge
 * endpoint in tests: `reply` decides each answer from the request (the prompt is the first
 * message's content). Answers name `answeredModel` and a system fingerprint, as OpenAI does.
 */
export async function startFakeJudge(reply: (req: FakeJudgeRequest) => FakeJudgeReply, answeredModel = 'judge-model-2026-01-01'): Promise<FakeJudgeServer> {
  const requests: FakeJudgeRequest[] = [];
  const sockets = new Set<Socket>();
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (req.method !== 'POST' || req.url !== '/v1/chat/completions') {
        res.statusCode = 404;
        res.end(JSON.stringify({ error: { message: 'not found', type: 'invalid_request_error', param: null, code: null } }));
        return;
      }
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { model: string; messages: { content: string }[] };
      const request: FakeJudgeRequest = { prompt: body.messages[0]?.content ?? '', model: body.model, authorization: req.headers.authorization, body };
      requests.push(request);
      const r = reply(request);
      if ('hang' in r) return; // never answers: the client's timeout must cut it off
      res.setHeader('content-type', 'application/json');
      if ('status' in r) {
        res.statusCode = r.status;
        res.end(JSON.stringify({ error: { message: `status ${r.status}`, type: 'server_error', param: null, code: null } }));
      } else if ('rawBody' in r) res.end(r.rawBody);
      else
        res.end(
          JSON.stringify({
            id: `chatcmpl-${requests.length}`,
            object: 'chat.completion',
            created: 1_700_000_000,
            model: answeredModel,
            system_fingerprint: 'fp_fake',
            choices: [{ index: 0, message: { role: 'assistant', content: r.content }, finish_reason: 'stop', logprobs: null }],
            usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
          }),
        );
    });
  });
  server.on('connection', (s: Socket) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    baseUrl: `http://127.0.0.1:${port}/v1`,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}
