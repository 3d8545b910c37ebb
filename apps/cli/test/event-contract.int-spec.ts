import { execFile } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { promisify } from 'util';
import { Kafka } from 'kafkajs';
import { ValidationError } from '@srpo/core';
import {
  AgentEventsProducer,
  createKafka,
  endOffsets,
  ensureTopics,
  EventCodec,
  openOutput,
  readTopicsToEnd,
  sampleEvents,
  topicCatalog,
  toPlain,
} from '@srpo/events';
import { KeyStore } from '@srpo/store';
import { ensureKafka, uniquePrefix } from '@srpo/testing';
import { loadCliConfig } from '../src/cli-config';
import { eventRoundTrip } from '../src/commands/events.command';
import { main } from '../src/main';

const run = promisify(execFile);

describe('event contract on the real broker', () => {
  const brokers = ensureKafka();
  const env = { KAFKA_BROKERS: brokers.join(','), SRPO_LOG_LEVEL: 'error' };
  let kafka: Kafka;

  beforeAll(() => {
    kafka = createKafka({ brokers, clientId: 'event-contract-test' });
  });

  it('produces and consumes every event type and decodes it back equal', async () => {
    const catalog = topicCatalog({ prefix: uniquePrefix('contract'), rawPartitions: 3 });
    const report = await eventRoundTrip(loadCliConfig(env), catalog);
    expect(report.topicsCreated.sort()).toEqual(
      catalog
        .all()
        .map((t) => t.name)
        .sort(),
    );
    expect(report.results.map((r) => [r.type, r.equal])).toEqual([
      ['AgentOutput', true],
      ['Transition', true],
      ['EpisodeOutcome', true],
      ['ActiveSet', true],
      ['AdvantageGroup', true],
      ['PolicyUpdate', true],
      ['PolicyVersion', true],
      ['DeadLetter', true],
      ['InferredTask', true],
      ['ActionCredit', true],
      ['Erasure', true],
    ]);
    for (const r of report.results) expect(r.offset).toBeGreaterThanOrEqual(0);
  });

  it('keys agent events by episode id so an episode lands on one partition of each raw topic', async () => {
    const catalog = topicCatalog({ prefix: uniquePrefix('copart'), rawPartitions: 4 });
    const admin = kafka.admin();
    await admin.connect();
    await ensureTopics(admin, catalog.all());
    await admin.disconnect();
    const sdk = new AgentEventsProducer({ kafka, topics: catalog });
    for (let n = 0; n < 8; n++) {
      const s = sampleEvents(n);
      await sdk.emitBatch([
        { type: 'AgentOutput', value: s.AgentOutput },
        { type: 'Transition', value: s.Transition },
        { type: 'EpisodeOutcome', value: s.EpisodeOutcome },
      ]);
    }
    await sdk.disconnect();
    const codec = new EventCodec();
    const records = await readTopicsToEnd(kafka, [catalog.agentOutputs.name, catalog.transitions.name, catalog.episodeOutcomes.name]);
    expect(records).toHaveLength(24);
    const partitionsByEpisode = new Map<string, Set<number>>();
    for (const r of records) {
      const value = toPlain(codec.decode(r.value).value) as { episodeId: string };
      expect(r.key?.toString()).toBe(value.episodeId);
      const set = partitionsByEpisode.get(value.episodeId) ?? new Set<number>();
      set.add(r.partition);
      partitionsByEpisode.set(value.episodeId, set);
    }
    expect(partitionsByEpisode.size).toBe(8);
    for (const parts of partitionsByEpisode.values()) expect(parts.size).toBe(1);
  });

  it("seals outputs under the store's content keys when given a sealer: only ciphertext reaches the topic, and the key opens it", async () => {
    const catalog = topicCatalog({ prefix: uniquePrefix('seal'), rawPartitions: 1 });
    const admin = kafka.admin();
    await admin.connect();
    await ensureTopics(admin, [catalog.agentOutputs]);
    await admin.disconnect();
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-seal-'));
    const keys = await KeyStore.open({ kind: 'sqlite', path: path.join(dir, 'store.sqlite') });
    try {
      const sdk = new AgentEventsProducer({ kafka, topics: catalog, sealer: keys });
      const clear = { ...sampleEvents(3).AgentOutput, subjectId: 'dana', contextTokenIds: [101, 102, 103], responseTokenIds: [7, 8, 9] };
      await sdk.emitOutput(clear);
      // An invalid output is refused in the clear, before any key is made for it.
      await expect(sdk.emitOutput({ ...clear, outputId: 'other', episodeId: 'ep-never', responseTokenIds: [-1, 8, 9] })).rejects.toThrow(
        /^AgentOutput.responseTokenIds\[0\]/,
      );
      expect(await keys.keyIdsOf({ episodeId: 'ep-never' })).toEqual([]);
      await sdk.disconnect();
      const [record] = await readTopicsToEnd(kafka, [catalog.agentOutputs.name]);
      if (!record?.value) throw new Error('no AgentOutput on the topic');
      const written = new EventCodec().decodeAs('AgentOutput', record.value);
      expect([written.contextTokenIds, written.responseTokenIds, written.sealed?.scheme]).toEqual([[], [], 'aes-256-gcm/v1']);
      const key = await keys.keyFor('dana', clear.episodeId, 0);
      expect(written.sealed?.keyId).toBe(key.keyId);
      expect(record.value.includes(Buffer.from(Int32Array.from([101, 102, 103]).buffer))).toBe(false);
      expect(openOutput(written, key.key)).toMatchObject({ contextTokenIds: [101, 102, 103], responseTokenIds: [7, 8, 9], sealed: null });
      expect(await keys.keyIdsOf({ subjectId: 'dana' })).toEqual([key.keyId]);
    } finally {
      await keys.close();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('refuses every kind of invalid field before sending, and nothing reaches the topics', async () => {
    const catalog = topicCatalog({ prefix: uniquePrefix('sdk'), rawPartitions: 2 });
    const admin = kafka.admin();
    await admin.connect();
    await ensureTopics(admin, catalog.all());
    const sdk = new AgentEventsProducer({ kafka, topics: catalog });
    const s = sampleEvents(1);
    const bad: [string, () => Promise<unknown>][] = [
      ['AgentOutput.behaviourLogProbs', () => sdk.emitOutput({ ...s.AgentOutput, behaviourLogProbs: [-1] })],
      ['AgentOutput.behaviourLogProbs[1]', () => sdk.emitOutput({ ...s.AgentOutput, behaviourLogProbs: [-1, NaN, -1] })],
      ['AgentOutput.behaviourLogProbs[0]', () => sdk.emitOutput({ ...s.AgentOutput, behaviourLogProbs: [0.1, -1, -1] })],
      ['AgentOutput.lossMask', () => sdk.emitOutput({ ...s.AgentOutput, lossMask: [true] })],
      ['AgentOutput.outputId', () => sdk.emitOutput({ ...s.AgentOutput, outputId: '' })],
      ['AgentOutput.responseTokenIds', () => sdk.emitOutput({ ...s.AgentOutput, responseTokenIds: [], behaviourLogProbs: [], lossMask: [] })],
      ['Transition.expectedCardinality', () => sdk.emitTransition({ ...s.Transition, expectedCardinality: 2 })],
      ['Transition.consumedOutputIds[1]', () => sdk.emitTransition({ ...s.Transition, consumedOutputIds: ['x', 'x'], expectedCardinality: 2 })],
      ['Transition.episodeId', () => sdk.emitTransition({ ...s.Transition, episodeId: '' })],
      ['EpisodeOutcome.outcomeReward', () => sdk.emitOutcome({ ...s.EpisodeOutcome, outcomeReward: Infinity })],
      // One bad event in a batch stops the whole batch, the good one included.
      [
        'Transition.reward',
        () =>
          sdk.emitBatch([
            { type: 'AgentOutput', value: s.AgentOutput },
            { type: 'Transition', value: { ...s.Transition, reward: NaN } },
          ]),
      ],
    ];
    for (const [field, call] of bad) {
      const error = await call().then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(ValidationError);
      expect((error as ValidationError).field).toBe(field);
      expect((error as Error).message.startsWith(field)).toBe(true);
    }
    await sdk.disconnect();
    const ends = await endOffsets(admin, [catalog.agentOutputs.name, catalog.transitions.name, catalog.episodeOutcomes.name]);
    await admin.disconnect();
    expect([...ends.values()].every((high) => high === 0)).toBe(true);
    expect(ends.size).toBe(6);
  });

  it('`srpo kafka start` brings a second local broker up within 60 s and `stop` takes it down', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-kafka-'));
    const localEnv = { SRPO_KAFKA_PORT: '19192', SRPO_KAFKA_DIR: dir, SRPO_LOG_LEVEL: 'error', PATH: process.env.PATH, HOME: process.env.HOME };
    const started = Date.now();
    await main(['node', 'srpo', 'kafka', 'start'], localEnv);
    const elapsed = Date.now() - started;
    expect(process.exitCode ?? 0).toBe(0);
    expect(elapsed).toBeLessThan(60_000);
    const probe = createKafka({ brokers: ['127.0.0.1:19192'], clientId: 'probe', retries: 1 }).admin();
    await probe.connect();
    expect((await probe.describeCluster()).brokers).toHaveLength(1);
    await probe.disconnect();

    await main(['node', 'srpo', 'kafka', 'stop'], localEnv);
    await main(['node', 'srpo', 'kafka', 'status'], localEnv);
    expect(process.exitCode).toBe(1);
    process.exitCode = 0;
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('the installed `srpo` bin answers `kafka status` against the running broker', async () => {
    const root = path.resolve(__dirname, '..', '..', '..');
    const { stdout } = await run('node', [path.join(root, 'bin', 'srpo.js'), 'kafka', 'status'], {
      env: { ...process.env, KAFKA_BROKERS: brokers.join(','), SRPO_LOG_LEVEL: 'error' },
    });
    expect(stdout).toMatch(/cluster \S+: 1 broker\(s\)/);
  });
});
