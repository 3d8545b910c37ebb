import * as net from 'net';
import type { ISocketFactory } from 'kafkajs';
import { createKafka, guardedSocketFactory, kafkaConfig } from '@srpo/events';
import { ensureKafka, uniquePrefix } from '@srpo/testing';

interface KafkajsConnection {
  connect(): Promise<boolean>;
  disconnect(): Promise<boolean>;
  isConnected(): boolean;
  send(args: { request: unknown; response: unknown }): Promise<unknown>;
}

// kafkajs internals, used to drive one connection through the race step by step; typed here as used.
/* eslint-disable @typescript-eslint/no-require-imports -- kafkajs exports no module (nor typings) for its internals */
const Connection = require('kafkajs/src/network/connection') as new (options: {
  host: string;
  port: number;
  logger: unknown;
  socketFactory: ISocketFactory;
  requestTimeout: number;
  connectionTimeout: number;
}) => KafkajsConnection;
const { createLogger, LEVELS } = require('kafkajs/src/loggers') as {
  createLogger: (options: { level: number; logCreator: () => (entry: { log: { message: string } }) => unknown }) => unknown;
  LEVELS: { ERROR: number };
};
const apiVersions = require('kafkajs/src/protocol/requests/apiVersions') as {
  protocol(options: { version: number }): () => { request: unknown; response: unknown };
};
/* eslint-enable @typescript-eslint/no-require-imports */

function busy(ms: number): void {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    // The event loop is held, as in a process starved of CPU.
  }
}

const stockSocketFactory: ISocketFactory = ({ host, port, onConnect }) => net.connect({ host, port }, onConnect);

/**
 * The demo monitor's `Connection error: write after end` (issue 16), reproduced against
 * the real broker. A proxy in front of it holds each client FIN for 2 s, as a busy broker
 * answers late; the event loop is held past `connectionTimeout` while the socket connects.
 */
describe('kafkajs connection timeout racing a late connect', () => {
  const [brokerHost, brokerPort] = ensureKafka()[0].split(':');
  let proxy: net.Server;
  let proxyPort = 0;
  const sockets = new Set<net.Socket>();

  beforeAll(async () => {
    proxy = net.createServer({ allowHalfOpen: true }, (down) => {
      const up = net.connect(Number(brokerPort), brokerHost);
      sockets.add(down).add(up);
      down.pipe(up, { end: false });
      up.pipe(down);
      down.on('end', () => setTimeout(() => up.end(), 2000).unref());
      down.on('error', () => undefined);
      up.on('error', () => undefined);
    });
    await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
    proxyPort = (proxy.address() as net.AddressInfo).port;
  });

  afterAll(async () => {
    for (const s of sockets) s.destroy();
    await new Promise((resolve) => proxy.close(resolve));
  });

  async function race(socketFactory: ISocketFactory): Promise<{ logged: string[]; connectedAfterTimeout: boolean; request: string }> {
    const logged: string[] = [];
    const logger = createLogger({ level: LEVELS.ERROR, logCreator: () => (e: { log: { message: string } }) => logged.push(e.log.message) });
    const connection = new Connection({
      host: '127.0.0.1',
      port: proxyPort,
      logger,
      socketFactory,
      requestTimeout: 5000,
      connectionTimeout: 100,
    });
    // Connect and hold the loop from a check-phase callback (setImmediate): the next loop
    // iteration then runs its timers (kafkajs's connection timeout) before its I/O (the
    // connect), every time. Started from a poll-phase callback, the connect could still be
    // handled in that same phase, ahead of the timer, and the race would not happen.
    // (Boxed: a promise resolved with a promise would adopt it.)
    const first = await new Promise<{ connecting: Promise<unknown> }>((resolve) =>
      setImmediate(() => {
        const connecting = connection.connect();
        busy(300);
        resolve({ connecting });
      }),
    );
    await expect(first.connecting).rejects.toThrow('Connection timeout');
    await new Promise((resolve) => setTimeout(resolve, 100));
    const connectedAfterTimeout = connection.isConnected();
    let request: string;
    try {
      await connection.connect();
      const { request: req, response } = apiVersions.protocol({ version: 0 })();
      await connection.send({ request: req, response });
      request = 'ok';
    } catch (e) {
      request = (e as Error).message;
    }
    await connection.disconnect();
    return { logged, connectedAfterTimeout, request };
  }

  it("kafkajs's own socket factory: the late connect marks the ended socket connected, and the next request writes after end", async () => {
    const r = await race(stockSocketFactory);
    expect(r.connectedAfterTimeout).toBe(true);
    expect(r.request).toBe('Connection error: write after end');
    expect(r.logged).toContain('Connection error: write after end');
  });

  it('the guarded factory: the connection stays disconnected, the retry opens a fresh socket, and the request succeeds', async () => {
    const r = await race(guardedSocketFactory());
    expect(r.connectedAfterTimeout).toBe(false);
    expect(r.request).toBe('ok');
    expect(r.logged).toEqual(['Connection timeout']);
  });

  it("a round trip through admin, producer and consumer on createKafka's guarded sockets", async () => {
    const kafka = createKafka({ brokers: ensureKafka(), clientId: 'socket-test' });
    const topic = `${uniquePrefix('socket')}t`;
    const admin = kafka.admin();
    await admin.connect();
    await admin.createTopics({ topics: [{ topic, numPartitions: 1 }], waitForLeaders: true });
    await admin.disconnect();
    const producer = kafka.producer();
    await producer.connect();
    await producer.send({ topic, messages: [{ value: 'hello' }] });
    await producer.disconnect();
    const consumer = kafka.consumer({ groupId: `${topic}-g` });
    await consumer.connect();
    await consumer.subscribe({ topics: [topic], fromBeginning: true });
    const value = await new Promise<string>((resolve) => {
      void consumer.run({ eachMessage: async ({ message }) => resolve(String(message.value)) });
    });
    await consumer.disconnect();
    expect(value).toBe('hello');
  });

  it("createKafka's configuration carries the guard: its socket factory passes the race", async () => {
    const factory = kafkaConfig({ brokers: ensureKafka(), clientId: 'socket-test' }).socketFactory as ISocketFactory;
    const r = await race(factory);
    expect(r.connectedAfterTimeout).toBe(false);
    expect(r.request).toBe('ok');
  });
});
