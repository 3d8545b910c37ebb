import * as http from 'http';
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

  it('knows which hosts are loopback (no warning for an open server there)', () => {
    expect(['127.0.0.1', '127.8.0.1', 'localhost', 'LOCALHOST', '::1', '::ffff:127.0.0.1'].every(isLoopbackHost)).toBe(true);
    expect(['0.0.0.0', '::', '10.0.0.5', 'example.com', '127.0.0.1.example.com', '127.example.com'].some(isLoopbackHost)).toBe(false);
  });
});
