import { execFile, execFileSync } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { promisify } from 'util';
import { Logger, repoRoot } from '@srpo/core';
import { AgentEventsProducer, createKafka, EventCodec, readKafkaConnection, readTopicsToEnd, toPlain } from '@srpo/events';
import { EnvReader } from '@srpo/core';
import { output, sleep, spawnApp, transition, uniquePrefix, waitForExit } from '@srpo/testing';
import { loadMaterializerConfig } from '../apps/materializer/src/materializer-config';
import { Materializer } from '../apps/materializer/src/materializer.service';

const run = promisify(execFile);
const PASSWORD = 'scram-pass-' + Math.random().toString(36).slice(2, 10);
const PORT = 19392;

/**
 * The pipeline against a second local broker that only accepts SASL/SCRAM-SHA-512
 * over TLS (a throwaway CA made here): SDK -> materializer -> learner, with the
 * credentials from configuration; wrong credentials are refused with an error that
 * says so; the password appears in no log.
 */
describe('pipeline on a SASL/SCRAM over TLS broker', () => {
  const root = repoRoot();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-secure-'));
  const kafkaEnv = {
    SRPO_KAFKA_PORT: String(PORT),
    SRPO_KAFKA_DIR: path.join(dir, 'kafka'),
    SRPO_KAFKA_SECURITY: 'sasl_ssl',
    SRPO_KAFKA_SSL_DIR: path.join(dir, 'ssl'),
    SRPO_KAFKA_SCRAM_USER: 'srpo',
    SRPO_KAFKA_SCRAM_PASSWORD: PASSWORD,
  };
  const clientEnv = {
    KAFKA_BROKERS: `127.0.0.1:${PORT}`,
    KAFKA_SSL_CA_FILE: path.join(dir, 'ssl', 'ca.pem'),
    KAFKA_SASL_MECHANISM: 'scram-sha-512',
    KAFKA_SASL_USERNAME: 'srpo',
    KAFKA_SASL_PASSWORD: PASSWORD,
  };
  const logs: string[] = [];

  beforeAll(() => {
    execFileSync('bash', [path.join(root, 'infra', 'kafka', 'make-certs.sh'), path.join(dir, 'ssl')], { stdio: 'ignore' });
    execFileSync('bash', [path.join(root, 'infra', 'kafka', 'kafka.sh'), 'start'], { env: { ...process.env, ...kafkaEnv }, stdio: 'inherit' });
    Logger.configure({ level: 'debug', sink: { write: (line) => logs.push(line) } });
  }, 120_000);

  afterAll(() => {
    Logger.configure({ level: 'warn', sink: { write: (line) => process.stderr.write(line + '\n') } });
    execFileSync('bash', [path.join(root, 'infra', 'kafka', 'kafka.sh'), 'stop'], { env: { ...process.env, ...kafkaEnv }, stdio: 'inherit' });
  });

  it('carries events through the materializer and the learner with credentials from configuration', async () => {
    const prefix = uniquePrefix('secure');
    const materializer = new Materializer(
      loadMaterializerConfig({ ...clientEnv, SRPO_TOPIC_PREFIX: prefix, SRPO_RAW_PARTITIONS: '1', SRPO_DERIVED_PARTITIONS: '1', SRPO_LOG_LEVEL: 'debug' }),
    );
    await materializer.start();
    const kafka = createKafka(readKafkaConnection(new EnvReader(clientEnv), 'secure-test'));
    const sdk = new AgentEventsProducer({ kafka, topics: materializer.catalog });
    for (let e = 0; e < 4; e++) {
      const id = `s${e}`;
      await sdk.emitOutput(output(id, 0, { policyVersion: 0 }));
      await sdk.emitTransition(transition(id, [0], { groupKey: `task-${e >> 1}`, expectedGroupSize: 2, reward: e % 2 }));
    }
    await sdk.disconnect();
    const learnerDir = path.join(dir, 'learner');
    // Below Linux's ephemeral range (32768-60999): a port there can be taken by any outgoing socket.
    const port = 27_000 + Math.floor(Math.random() * 1000);
    const learner = spawnApp(
      'learner',
      {
        ...clientEnv,
        SRPO_TOPIC_PREFIX: prefix,
        SRPO_POLICY_ID: 'worker',
        SRPO_SQLITE_PATH: path.join(learnerDir, 'l.sqlite'),
        SRPO_CHECKPOINT_DIR: path.join(learnerDir, 'ck'),
        SRPO_SETS_PER_UPDATE: '2',
        SRPO_MODEL_CONFIG: JSON.stringify({ vocabSize: 16, dModel: 8, nLayers: 1, nHeads: 2, maxSeqLen: 16 }),
        SRPO_HTTP_PORT: String(port),
        SRPO_BACKEND: 'tensorflow',
        SRPO_LOG_LEVEL: 'debug',
      },
      path.join(dir, 'learner.log'),
    );
    try {
      let updates: unknown[] = [];
      for (let i = 0; i < 120 && updates.length < 1; i++) {
        await sleep(500);
        updates = await fetch(`http://127.0.0.1:${port}/updates?policy=worker`).then(
          (r) => (r.ok ? (r.json() as Promise<unknown[]>) : []),
          () => [],
        );
      }
      expect(updates.length).toBeGreaterThanOrEqual(1);
      const codec = new EventCodec();
      const versions = (await readTopicsToEnd(kafka, [materializer.catalog.policyVersions.name])).map((r) => toPlain(codec.decodeAs('PolicyVersion', r.value)));
      expect(versions.some((v) => v.policyId === 'worker' && v.version === 1)).toBe(true);
    } finally {
      learner.kill('SIGTERM');
      await waitForExit(learner);
      await materializer.stop();
    }
    const learnerLog = fs.readFileSync(path.join(dir, 'learner.log'), 'utf8');
    expect(learnerLog.length).toBeGreaterThan(0);
    expect(learnerLog).not.toContain(PASSWORD);
  }, 180_000);

  it('refuses wrong credentials with an error that says so', async () => {
    const bin = path.join(root, 'bin', 'srpo.js');
    const result = await run('node', [bin, 'kafka', 'status'], {
      env: { ...process.env, ...clientEnv, KAFKA_SASL_PASSWORD: 'not-the-password', SRPO_LOG_LEVEL: 'debug' },
    }).then(
      () => ({ code: 0, stderr: '' }),
      (e: { code: number; stderr: string }) => e,
    );
    expect(result.code).not.toBe(0);
    expect(result.stderr).toMatch(/authentication failed.*invalid credentials/i);
    expect(result.stderr).not.toContain('not-the-password');
  });

  it('never writes the password into a log line', () => {
    expect(logs.length).toBeGreaterThan(10);
    expect(logs.filter((l) => l.includes(PASSWORD))).toEqual([]);
  });
});
