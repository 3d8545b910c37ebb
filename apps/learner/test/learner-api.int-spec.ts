import * as fs from 'fs';
import * as net from 'net';
import * as os from 'os';
import type { INestApplication } from '@nestjs/common';
import { Test, type TestingModuleBuilder } from '@nestjs/testing';
import request from 'supertest';
import type { VerifyReport } from '@srpo/audit';
import { initTfBackend, Logger } from '@srpo/core';
import type { AuditStore } from '@srpo/store';
import { ensureKafka, SEED, simpleGroup, tempDir, TINY_MODEL_JSON } from '@srpo/testing';
import { InMemoryEventsPublisher } from '@srpo/trainer';
import { bootstrap } from '../src/main';
import { loadLearnerConfig } from '../src/learner-config';
import { AUDIT_SERVICE, AUDIT_STORE, CLOCK, EVENTS_PUBLISHER } from '../src/learner-tokens';
import { LearnerModule } from '../src/learner.module';
import { UpdateService } from '../src/update.service';

Logger.configure({ level: 'error' });

const NOW = Date.parse('2026-03-01T12:00:00.000Z');
const WRITE_TOKEN = 'write-token-0123456789';
const READ_TOKEN = 'read-token-0123456789';

interface Running {
  app: INestApplication;
  url: string;
  dir: string;
  close(): Promise<void>;
}

/** The whole learner module over a temp SQLite store, listening on an ephemeral port; `override` replaces providers. */
async function startApp(env: Record<string, string>, override: (b: TestingModuleBuilder) => TestingModuleBuilder = (b) => b): Promise<Running> {
  const dir = tempDir('api');
  const config = loadLearnerConfig(
    {
      SRPO_POLICY_ID: 'solver',
      SRPO_MODEL_CONFIG: TINY_MODEL_JSON,
      SRPO_SEED: String(SEED),
      SRPO_BACKEND: 'tensorflow',
      SRPO_MAX_POLICY_LAG: '0',
      SRPO_LOG_LEVEL: 'error',
      ...env,
    },
    dir,
  );
  const moduleRef = await override(
    Test.createTestingModule({ imports: [LearnerModule.forRoot(config)] })
      .overrideProvider(EVENTS_PUBLISHER)
      .useValue(new InMemoryEventsPublisher())
      .overrideProvider(CLOCK)
      .useValue(() => NOW),
  ).compile();
  const app = moduleRef.createNestApplication({ logger: false });
  await app.listen(0, '127.0.0.1');
  const url = await app.getUrl();
  return {
    app,
    url: url.replace('[::1]', '127.0.0.1'),
    dir,
    close: async () => {
      await app.close();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** This machine's first non-loopback IPv4 address, if it has one. */
function externalIPv4(): string | undefined {
  return Object.values(os.networkInterfaces())
    .flat()
    .find((a) => a !== undefined && a.family === 'IPv4' && !a.internal)?.address;
}

/** Resolves when a TCP connection to host:port opens, rejects with the socket error otherwise. */
function connect(host: string, port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host, port, timeout: 3000 });
    socket.once('connect', () => {
      socket.destroy();
      resolve();
    });
    socket.once('timeout', () => {
      socket.destroy();
      reject(Object.assign(new Error(`connect ${host}:${port} timed out`), { code: 'ETIMEDOUT' }));
    });
    socket.once('error', reject);
  });
}

describe('learner HTTP API (real HTTP, SQLite store, real Kafka probe)', () => {
  const brokers = ensureKafka();
  let main: Running;
  let updateId: string;
  /** A read with the write token: with SRPO_API_TOKEN set, every read needs a token. */
  const get = (path: string) => request(main.url).get(path).set('Authorization', `Bearer ${WRITE_TOKEN}`);

  beforeAll(async () => {
    await initTfBackend('tensorflow');
    main = await startApp({ KAFKA_BROKERS: brokers.join(','), SRPO_API_TOKEN: WRITE_TOKEN });
    const updates = main.app.get(UpdateService);
    const applied = await updates.applyBatch([simpleGroup('g1')]);
    updateId = applied.update?.updateId as string;
    // Sampled at version 0, the learner is at 1 with max lag 0: stale.
    await updates.applyBatch([simpleGroup('old', { version: 0 })]);
  });

  afterAll(async () => {
    await main?.close();
  });

  it('GET /health reports the database, Kafka and the policy', async () => {
    const res = await get('/health').expect(200);
    expect(res.body).toMatchObject({
      status: 'ok',
      database: { ok: true, detail: 'reachable' },
      kafka: { ok: true },
      policy: { policyId: 'solver', version: 1 },
      consumption: { paused: false },
    });
    expect((res.body as { kafka: { detail: string } }).kafka.detail).toMatch(/^\d+ broker\(s\)/);
  });

  it('GET /health answers 503 when Kafka is unreachable', async () => {
    const down = await startApp({ KAFKA_BROKERS: '127.0.0.1:1' });
    try {
      const res = await request(down.url).get('/health').expect(503);
      expect(res.body).toMatchObject({ status: 'unavailable', database: { ok: true }, kafka: { ok: false }, policy: { policyId: 'solver', version: 0 } });
    } finally {
      await down.close();
    }
  });

  it('GET /metrics exposes the learner metrics in Prometheus format', async () => {
    const res = await get('/metrics').expect(200);
    expect(res.headers['content-type']).toMatch(/^text\/plain/);
    expect(res.text).toMatch(/^learner_updates_total 1$/m);
    expect(res.text).toMatch(/^learner_groups_consumed_total 1$/m);
    expect(res.text).toMatch(/^learner_groups_skipped_total\{reason="stale"\} 1$/m);
    expect(res.text).toMatch(/^learner_policy_version 1$/m);
    expect(res.text).toMatch(/^learner_policy_lag 0$/m);
    expect(res.text).toMatch(/^learner_loss -?\d/m);
    expect(res.text).toMatch(/^learner_clip_frac\{side="low"\} 0$/m);
  });

  it('GET /policies and /policies/:id/versions', async () => {
    const policies = await get('/policies').expect(200);
    expect(policies.body).toEqual([{ policyId: 'solver', roles: ['solver'], currentVersion: 1, createdAtMs: NOW }]);
    const versions = await get('/policies/solver/versions').expect(200);
    expect((versions.body as { version: number; updateId: string | null }[]).map((v) => [v.version, v.updateId])).toEqual([
      [0, null],
      [1, updateId],
    ]);
    const missing = await get('/policies/nope/versions').expect(404);
    expect(missing.body).toEqual({ statusCode: 404, error: 'NOT_FOUND', message: 'no policy nope', field: 'policyId' });
  });

  it('GET /updates filters by policy and time (ISO or epoch ms)', async () => {
    const ids = async (query: string) => ((await get(`/updates${query}`).expect(200)).body as { updateId: string }[]).map((u) => u.updateId);
    expect(await ids('')).toEqual([updateId]);
    expect(await ids('?policy=solver')).toEqual([updateId]);
    expect(await ids('?policy=critic')).toEqual([]);
    expect(await ids(`?from=${NOW}`)).toEqual([updateId]);
    expect(await ids(`?from=${NOW + 1}`)).toEqual([]);
    expect(await ids('?from=2026-03-01T11:59:59Z&to=2026-03-01T12:00:01Z')).toEqual([updateId]);
    expect(await ids('?to=2026-03-01T12:00:00.000Z')).toEqual([]);
    const bad = await get('/updates?from=yesterday').expect(400);
    expect((bad.body as { message: string }).message).toBe('from: expected epoch milliseconds or an ISO 8601 time, got "yesterday"');
    await get('/updates?limit=0').expect(400);
  });

  it('GET /updates/:id returns the whole audit record with groups and coordinates', async () => {
    const res = await get(`/updates/${encodeURIComponent(updateId)}`).expect(200);
    const stored = await main.app.get<typeof AUDIT_STORE, AuditStore>(AUDIT_STORE).getUpdate(updateId);
    expect(res.body).toEqual(JSON.parse(JSON.stringify(stored)));
    const body = res.body as typeof stored;
    expect(body.groups[0].groupId).toBe('g1');
    expect(body.groups[0].source).toEqual({ topic: 'srpo.advantage-groups', partition: 0, offset: expect.any(Number) });
    expect(body.groups[0].sources[0].members[0].source.topic).toBe('srpo.agent-outputs');
    await get('/updates/nope').expect(404);
  });

  it('POST /consumption/pause|resume need the bearer token', async () => {
    const none = await request(main.url).post('/consumption/pause').expect(401);
    expect(none.headers['www-authenticate']).toBe('Bearer realm="srpo-learner"');
    await request(main.url).post('/consumption/pause').set('Authorization', 'Bearer wrong-token-0123456789').expect(401);
    await request(main.url).post('/consumption/pause').set('Authorization', `Basic ${WRITE_TOKEN}`).expect(401);
    const paused = await request(main.url).post('/consumption/pause').set('Authorization', `Bearer ${WRITE_TOKEN}`).expect(200);
    expect(paused.body).toEqual({ paused: true, changedAtMs: expect.any(Number) });
    expect(((await get('/health').expect(200)).body as { consumption: { paused: boolean } }).consumption.paused).toBe(true);
    const resumed = await request(main.url).post('/consumption/resume').set('Authorization', `Bearer ${WRITE_TOKEN}`).expect(200);
    expect((resumed.body as { paused: boolean }).paused).toBe(false);
  });

  it('disables state-changing endpoints without SRPO_API_TOKEN and guards reads with SRPO_API_READ_TOKEN', async () => {
    const locked = await startApp({ KAFKA_BROKERS: brokers.join(','), SRPO_API_READ_TOKEN: READ_TOKEN });
    try {
      const res = await request(locked.url).post('/consumption/pause').set('Authorization', `Bearer ${READ_TOKEN}`).expect(403);
      expect((res.body as { message: string }).message).toBe('state-changing endpoints are disabled: SRPO_API_TOKEN is not set');
      await request(locked.url).get('/policies').expect(401);
      await request(locked.url).get('/metrics').expect(401);
      await request(locked.url).get('/updates').set('Authorization', 'Bearer nope-nope-nope-nope').expect(401);
      await request(locked.url).get('/policies').set('Authorization', `Bearer ${READ_TOKEN}`).expect(200);
      expect((await request(locked.url).get('/health').expect(200)).body).toEqual({ status: 'ok' });
      const full = await request(locked.url).get('/health').set('Authorization', `Bearer ${READ_TOKEN}`).expect(200);
      expect(full.body).toMatchObject({ status: 'ok', database: { ok: true }, policy: { policyId: 'solver' } });
    } finally {
      await locked.close();
    }
  });

  it('with only SRPO_API_TOKEN set, every read needs a token and /health tells nothing but its status', async () => {
    const id = encodeURIComponent(updateId);
    const reads = [
      '/metrics',
      '/policies',
      '/policies/solver/versions',
      '/updates',
      `/updates/${id}`,
      '/group-stats',
      `/sets/${encodeURIComponent('g1/s0')}/trace`,
    ];
    for (const path of reads) {
      const res = await request(main.url).get(path);
      expect([path, res.status, res.headers['www-authenticate']]).toEqual([path, 401, 'Bearer realm="srpo-learner"']);
      await request(main.url).get(path).set('Authorization', 'Bearer wrong-token-0123456789').expect(401);
    }
    await request(main.url).post(`/updates/${id}/verify`).expect(401);
    expect((await request(main.url).get('/health').expect(200)).body).toEqual({ status: 'ok' });
    expect((await request(main.url).get('/health').set('Authorization', 'Bearer wrong-token-0123456789').expect(200)).body).toEqual({ status: 'ok' });
    // The page and its chart library hold no data: a browser loads them, then sends the token typed in.
    await request(main.url).get('/').expect(200);
  });

  it('runs one verify at a time: a concurrent verify gets 429, the next one after it runs', async () => {
    const started: string[] = [];
    let release!: () => void;
    const blocked = new Promise<void>((resolve) => (release = resolve));
    let entered!: () => void;
    const inside = new Promise<void>((resolve) => (entered = resolve));
    // A verification that holds its slot until the test releases it (a real one takes a training step).
    const audit = {
      verify: async (updateId: string): Promise<VerifyReport> => {
        started.push(updateId);
        entered();
        await blocked;
        return { updateId, ok: true } as unknown as VerifyReport;
      },
    };
    const gated = await startApp({ KAFKA_BROKERS: brokers.join(','), SRPO_API_READ_TOKEN: READ_TOKEN }, (b) =>
      b.overrideProvider(AUDIT_SERVICE).useValue(audit),
    );
    try {
      const verify = (updateId: string) => request(gated.url).post(`/updates/${updateId}/verify`).set('Authorization', `Bearer ${READ_TOKEN}`);
      const first = verify('u1').then((res) => res);
      await inside;
      for (const other of ['u2', 'u1']) {
        const busy = await verify(other).expect(429);
        expect(busy.body).toEqual({
          statusCode: 429,
          error: 'Too Many Requests',
          message: 'a verification is already running (u1); this learner verifies one update at a time: retry when it has finished',
        });
      }
      release();
      const done = await first;
      expect([done.status, done.body]).toEqual([200, { updateId: 'u1', ok: true }]);
      expect((await verify('u3').expect(200)).body).toEqual({ updateId: 'u3', ok: true });
      expect(started).toEqual(['u1', 'u3']);
    } finally {
      release();
      await gated.close();
    }
  });

  /** The learner through main.ts, as `srpo learner` starts it, on an ephemeral port. */
  async function boot(env: Record<string, string>): Promise<{ app: INestApplication; dir: string; close: () => Promise<void> }> {
    const dir = tempDir('main');
    const app = await bootstrap({
      SRPO_POLICY_ID: 'boot',
      SRPO_SQLITE_PATH: `${dir}/learner.sqlite`,
      SRPO_CHECKPOINT_DIR: `${dir}/checkpoints`,
      SRPO_MODEL_CONFIG: TINY_MODEL_JSON,
      SRPO_HTTP_PORT: '0',
      SRPO_LOG_LEVEL: 'error',
      KAFKA_BROKERS: brokers.join(','),
      ...env,
    });
    return {
      app,
      dir,
      close: async () => {
        await app.close();
        fs.rmSync(dir, { recursive: true, force: true });
      },
    };
  }

  it('main.ts bootstraps the learner with its production providers, listening on loopback only', async () => {
    const { app, dir, close } = await boot({});
    try {
      const address = (app.getHttpServer() as net.Server).address() as net.AddressInfo;
      expect(address.address).toBe('127.0.0.1');
      // Where the machine has another interface, nothing answers there.
      const external = externalIPv4();
      if (external !== undefined) await expect(connect(external, address.port)).rejects.toMatchObject({ code: 'ECONNREFUSED' });
      const url = `http://127.0.0.1:${address.port}`;
      const res = await request(url).get('/health').expect(200);
      expect((res.body as { policy: unknown }).policy).toEqual({ policyId: 'boot', version: 0 });
      expect(fs.existsSync(`${dir}/checkpoints/boot/v0/model.json`)).toBe(true);
      await request(url).post('/consumption/pause').set('Authorization', `Bearer ${WRITE_TOKEN}`).expect(403);
    } finally {
      await close();
    }
  });

  it('SRPO_HTTP_HOST=0.0.0.0 listens on every interface', async () => {
    const { app, close } = await boot({ SRPO_HTTP_HOST: '0.0.0.0', SRPO_API_TOKEN: WRITE_TOKEN });
    try {
      const address = (app.getHttpServer() as net.Server).address() as net.AddressInfo;
      expect(address.address).toBe('0.0.0.0');
      const host = externalIPv4() ?? '127.0.0.1';
      await request(`http://${host}:${address.port}`).get('/policies').expect(401);
      await request(`http://${host}:${address.port}`).get('/policies').set('Authorization', `Bearer ${WRITE_TOKEN}`).expect(200);
    } finally {
      await close();
    }
  });
});
