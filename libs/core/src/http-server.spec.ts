import * as http from 'http';
import * as net from 'net';
import type { AddressInfo } from 'net';
import { holdIdleConnections, isLoopbackHost, KEEP_ALIVE_TIMEOUT_MS } from './http-server';

/** Two GETs on one keep-alive agent, `idleMs` apart; the client ports the server saw. */
async function portsSeen(configure: (s: http.Server) => void, idleMs: number): Promise<number[]> {
  const ports: number[] = [];
  const server = http.createServer((req, res) => {
    ports.push(req.socket.remotePort as number);
    res.end('ok');
  });
  configure(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const get = () =>
    new Promise<void>((resolve, reject) => {
      http
        .get({ host: '127.0.0.1', port: (server.address() as AddressInfo).port, agent }, (res) => {
          res.resume();
          res.on('end', () => resolve());
        })
        .on('error', reject);
    });
  try {
    await get();
    await new Promise((r) => setTimeout(r, idleMs));
    await get();
  } finally {
    agent.destroy();
    await new Promise((r) => server.close(r));
  }
  return ports;
}

describe('holdIdleConnections', () => {
  it("keeps idle connections past the clients' own timeouts, headers a little longer", () => {
    const server = http.createServer();
    holdIdleConnections(server);
    expect([server.keepAliveTimeout, server.headersTimeout]).toEqual([KEEP_ALIVE_TIMEOUT_MS, KEEP_ALIVE_TIMEOUT_MS + 1000]);
    expect(KEEP_ALIVE_TIMEOUT_MS).toBeGreaterThan(60_000);
  });

  it("a connection idle for 7 s is still the one a client reuses (Node's default closes it after 5 s and its 1 s grace)", async () => {
    const [held, defaults] = await Promise.all([portsSeen(holdIdleConnections, 7_000), portsSeen(() => undefined, 7_000)]);
    expect(held[0]).toBe(held[1]);
    expect(defaults[0]).not.toBe(defaults[1]);
  }, 30_000);

  it('on close, ends a connection that never sent a request and one idle after a response at once, and one in flight once it is answered', async () => {
    let answer: (() => void) | undefined;
    const server = http.createServer((req, res) => {
      if (req.url === '/slow') answer = () => res.end('slow');
      else res.end('ok');
    });
    holdIdleConnections(server);
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const port = (server.address() as AddressInfo).port;
    const agents = [new http.Agent({ keepAlive: true }), new http.Agent({ keepAlive: true })];
    // One agent per request, so the idle connection and the one in flight are two.
    const get = (p: string, agent: http.Agent) =>
      new Promise<string>((resolve, reject) => {
        http
          .get({ host: '127.0.0.1', port, path: p, agent }, (res) => {
            let body = '';
            res.on('data', (d: Buffer) => (body += d.toString()));
            res.on('end', () => resolve(body));
          })
          .on('error', reject);
      });
    // Connected, nothing sent: what Node's own close() leaves open until the headers timeout.
    const quiet = net.connect(port, '127.0.0.1');
    try {
      const quietClosed = new Promise<void>((r) => quiet.once('close', () => r()));
      await new Promise<void>((r) => quiet.once('connect', () => r()));
      expect(await get('/', agents[0])).toBe('ok');
      const slow = get('/slow', agents[1]);
      while (!answer) await new Promise((r) => setTimeout(r, 10));
      const started = Date.now();
      const closed = new Promise<void>((r) => server.close(() => r()));
      await quietClosed;
      // The request in flight is still answered, on its connection, after close().
      answer();
      expect(await slow).toBe('slow');
      await closed;
      expect(Date.now() - started).toBeLessThan(5_000);
    } finally {
      // Also when it failed: nothing of this test keeps the server (and jest) open.
      quiet.destroy();
      for (const a of agents) a.destroy();
    }
  }, 30_000);

  it('knows which hosts are loopback (no warning for an open server there)', () => {
    expect(['127.0.0.1', '127.8.0.1', 'localhost', 'LOCALHOST', '::1', '::ffff:127.0.0.1'].every(isLoopbackHost)).toBe(true);
    expect(['0.0.0.0', '::', '10.0.0.5', 'example.com', '127.0.0.1.example.com', '127.example.com'].some(isLoopbackHost)).toBe(false);
  });
});
