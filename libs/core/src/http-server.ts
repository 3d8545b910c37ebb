import type { IncomingMessage, Server, ServerResponse } from 'http';
import { isIPv4, type Socket } from 'net';
import { Server as TlsServer } from 'tls';

/** How long an idle keep-alive connection stays open on our HTTP servers: past the 60 s of common load balancers and clients. */
export const KEEP_ALIVE_TIMEOUT_MS = 65_000;

/**
 * Keep-alive settings for the apps' HTTP servers. Node closes an idle connection after 5 s, and
 * clients reuse one until about 4 s (undici: the server's hint minus 1 s), so a client that sends
 * on a connection just as the server closes it sees `other side closed`. Under a loaded machine
 * the two timers drift into each other: the gateway's /health failed so once while the broker
 * was down, at load average 9. An idle timeout longer than the clients' makes the client the side
 * that closes; headers must then be allowed a little longer than the idle timeout (Node's rule).
 *
 * Held that long, idle connections must not hold up a stop: see {@link closeQuietConnectionsOnClose}.
 */
export function holdIdleConnections(server: Server): void {
  server.keepAliveTimeout = KEEP_ALIVE_TIMEOUT_MS;
  server.headersTimeout = KEEP_ALIVE_TIMEOUT_MS + 1_000;
  closeQuietConnectionsOnClose(server);
}

/**
 * Once `server.close()` is called, closes every connection with no request in flight at once,
 * and each other one as soon as its last response is done, so a stopping app waits for the
 * requests it is answering and for nothing else. Node's own close() closes only connections idle
 * after a response: one a client opened without sending a request yet (an HTTP client's spare
 * pooled connection, a TCP probe) counted as waiting for headers, and held the stop for up to
 * the headers timeout, 66 s: `srpo serve` outlived a SIGTERM by a minute, and `srpo up` killed a
 * learner that had not stopped within its 60 s. (An https server's connections are counted from
 * their TLS handshake; one still in its handshake is left to Node.)
 */
export function closeQuietConnectionsOnClose(server: Server): void {
  /** Requests in flight on each open connection. */
  const inFlight = new Map<Socket, number>();
  let closing = false;
  server.on(server instanceof TlsServer ? 'secureConnection' : 'connection', (socket: Socket) => {
    if (closing) return void socket.destroy();
    inFlight.set(socket, 0);
    socket.once('close', () => inFlight.delete(socket));
  });
  server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    const socket = req.socket;
    if (!inFlight.has(socket)) return;
    inFlight.set(socket, (inFlight.get(socket) ?? 0) + 1);
    // 'close' follows 'finish', and comes alone when the client went away mid-response.
    res.once('close', () => {
      if (!inFlight.has(socket)) return;
      const left = (inFlight.get(socket) ?? 1) - 1;
      inFlight.set(socket, left);
      if (closing && left === 0) socket.destroy();
    });
  });
  const close = server.close.bind(server);
  server.close = (callback?: (err?: Error) => void) => {
    closing = true;
    for (const [socket, n] of inFlight) if (n === 0) socket.destroy();
    return close(callback);
  };
}

/** Whether a server listening on `host` takes connections from this machine only: 127.0.0.0/8, ::1, `localhost`. */
export function isLoopbackHost(host: string): boolean {
  const h = host.toLowerCase();
  return h === 'localhost' || h === '::1' || (isIPv4(h) && h.startsWith('127.')) || h === '::ffff:127.0.0.1';
}
