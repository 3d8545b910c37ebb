import type { Server } from 'http';
import { isIPv4 } from 'net';

/** How long an idle keep-alive connection stays open on our HTTP servers: past the 60 s of common load balancers and clients. */
export const KEEP_ALIVE_TIMEOUT_MS = 65_000;

/**
 * Keep-alive settings for the apps' HTTP servers. Node closes an idle connection after 5 s, and
 * clients reuse one until about 4 s (undici: the server's hint minus 1 s), so a client that sends
 * on a connection just as the server closes it sees `other side closed`. Under a loaded machine
 * the two timers drift into each other: the gateway's /health failed so once while the broker
 * was down, at load average 9. An idle timeout longer than the clients' makes the client the side
 * that closes; headers must then be allowed a little longer than the idle timeout (Node's rule).
 */
export function holdIdleConnections(server: Server): void {
  server.keepAliveTimeout = KEEP_ALIVE_TIMEOUT_MS;
  server.headersTimeout = KEEP_ALIVE_TIMEOUT_MS + 1_000;
}

/** Whether a server listening on `host` takes connections from this machine only: 127.0.0.0/8, ::1, `localhost`. */
export function isLoopbackHost(host: string): boolean {
  const h = host.toLowerCase();
  return h === 'localhost' || h === '::1' || (isIPv4(h) && h.startsWith('127.')) || h === '::ffff:127.0.0.1';
}
