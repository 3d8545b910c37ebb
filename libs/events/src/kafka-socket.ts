import * as net from 'net';
import * as tls from 'tls';
import type { ISocketFactory } from 'kafkajs';

/** kafkajs's own keep-alive delay (src/network/socketFactory.js). */
const KEEP_ALIVE_MS = 60_000;

/**
 * kafkajs's default socket factory with one change: a socket that kafkajs gives up on
 * before it has connected is destroyed, and its late connect is never reported.
 *
 * Why: kafkajs 2.2.4's `Connection.connect` arms a `connectionTimeout` timer beside the
 * socket's connect listener. When the event loop is busy past that timeout while a
 * socket connects (a process starved of CPU on a loaded machine), the timer runs first:
 * kafkajs logs "Connection timeout", ends the socket and marks the connection
 * disconnected. The connect event, already queued, then runs the listener, which marks
 * the connection *connected* again, on a socket that has been ended. Until the broker's
 * answer to that FIN arrives, kafkajs's retry finds the connection "connected", writes
 * to it, and fails with `Connection error: write after end`; a consumer then crashes
 * and restarts (`Crash: KafkaJSConnectionError … Restarting the consumer`).
 * `test/kafka-socket.int-spec.ts` reproduces it against the broker.
 *
 * Destroying instead of ending a socket that never connected drops its queued connect
 * event, so the connection stays disconnected and kafkajs's retry opens a fresh one.
 * A connected socket is ended as before (an orderly FIN after pending writes).
 */
export function guardedSocketFactory(): ISocketFactory {
  return ({ host, port, ssl, onConnect }) => {
    let connected = false;
    let abandoned = false;
    const connectListener = (): void => {
      if (abandoned) return;
      connected = true;
      onConnect();
    };
    const socket = ssl
      ? tls.connect({ host, port, ...(net.isIP(host) ? {} : { servername: host }), ...ssl }, connectListener)
      : net.connect({ host, port }, connectListener);
    socket.setKeepAlive(true, KEEP_ALIVE_MS);
    const end = socket.end.bind(socket) as (...args: unknown[]) => net.Socket;
    socket.end = (...args: unknown[]) => {
      if (connected) return end(...args);
      abandoned = true;
      socket.destroy();
      return socket;
    };
    return socket;
  };
}
