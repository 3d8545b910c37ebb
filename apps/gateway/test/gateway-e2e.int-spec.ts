import type { ChildProcess } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { createKafka, ensureTopics, EventCodec, readTopicsToEnd, topicCatalog } from '@srpo/events';
import { ensureKafka, sleep, spawnApp, uniquePrefix } from '@srpo/testing';
import { runFixedAgent, type TaskResult } from '../../../examples/openai-agent/fixed-agent';

const MODEL = '{"vocabSize":32,"dModel":32,"nLayers":2,"nHeads":2,"maxSeqLen":16}';
const GROUP = 16;
/** Tasks played: progress, not time (each is 16 episodes, 32 sets: half an update). Measured here: 360 tasks left the last third at 2 % success, 900 at 19 %. */
const TASKS = Number(process.env.E2E_TASKS ?? 720);

/** Wilson 95 % interval of k successes in n. */
function wilson(k: number, n: number): [number, number] {
  const z = 1.96;
  const p = k / n;
  const d = 1 + (z * z) / n;
  const c = p + (z * z) / (2 * n);
  const m = z * Math.sqrt((p * (1 - p)) / n + (z * z) / (4 * n * n));
  return [(c - m) / d, (c + m) / d];
}

/**
 * End to end through the gateway: an agent written only with the `openai` client
 * (examples/openai-agent/fixed-agent.ts) plays the demo's fixed workflow through `srpo gateway`
 * in front of `srpo serve`. The materializer and a learner train on what the gateway recorded,
 * `srpo serve` follows the learner's versions, and the agent's success rises above its start.
 */
describe('an openai-client agent trains through the gateway (real broker, real processes)', () => {
  const brokers = ensureKafka();
  const prefix = uniquePrefix('e2e');
  const catalog = topicCatalog({ prefix, rawPartitions: 1, derivedPartitions: 1 });
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-gateway-e2e-'));
  const base = 26_000 + Math.floor(Math.random() * 900);
  const children: ChildProcess[] = [];
  const log = (name: string) => path.join(dir, `${name}.log`);
  let results: TaskResult[] = [];

  beforeAll(async () => {
    const admin = createKafka({ brokers, clientId: 'e2e-admin' }).admin();
    await admin.connect();
    await ensureTopics(admin, catalog.all());
    await admin.disconnect();
    const common = {
      KAFKA_BROKERS: brokers.join(','),
      SRPO_TOPIC_PREFIX: prefix,
      SRPO_RAW_PARTITIONS: '1',
      SRPO_DERIVED_PARTITIONS: '1',
      SRPO_CHECKPOINT_DIR: path.join(dir, 'checkpoints'),
      SRPO_LOG_LEVEL: 'info',
      KAFKAJS_NO_PARTITIONER_WARNING: '1',
    };
    children.push(spawnApp('materializer', { ...common, SRPO_APP_ID: `${prefix}materializer` }, log('materializer')));
    children.push(
      spawnApp(
        'learner',
        {
          ...common,
          SRPO_POLICY_ID: 'actor',
          SRPO_POLICY_ROLES: 'solver,checker',
          SRPO_MODEL_CONFIG: MODEL,
          SRPO_LR: '5e-4',
          SRPO_SETS_PER_UPDATE: '64',
          SRPO_MAX_POLICY_LAG: '8',
          SRPO_SQLITE_PATH: path.join(dir, 'learner.sqlite'),
          SRPO_HTTP_PORT: String(base),
          SRPO_CONSUMER_GROUP: `${prefix}learner.actor`,
        },
        log('learner'),
      ),
    );
    children.push(spawnApp('serve', { ...common, SRPO_SERVE_POLICIES: 'actor', SRPO_SERVE_PORT: String(base + 1), SRPO_BACKEND: 'tensorflow' }, log('serve')));
    children.push(
      spawnApp('gateway', { ...common, SRPO_GATEWAY_UPSTREAM: `http://127.0.0.1:${base + 1}/v1`, SRPO_GATEWAY_PORT: String(base + 2) }, log('gateway')),
    );
    for (const name of ['serve', 'gateway']) {
      const deadline = Date.now() + 120_000;
      while (!(fs.existsSync(log(name)) && /listening/.test(fs.readFileSync(log(name), 'utf8')))) {
        if (Date.now() > deadline)
          throw new Error(`${name} did not start:\n${fs.existsSync(log(name)) ? fs.readFileSync(log(name), 'utf8').slice(-3000) : ''}`);
        await sleep(250);
      }
    }
    results = await runFixedAgent({
      gateway: `http://127.0.0.1:${base + 2}/v1`,
      apiKey: 'unused',
      model: 'actor',
      tasks: TASKS,
      groupSize: GROUP,
      temperature: 1.5,
      runId: prefix.replace(/[^A-Za-z0-9-]/g, ''),
      seed: 7,
      setsPerUpdate: 64,
      maxAheadUpdates: 2,
    });
  }, 900_000);

  afterAll(() => {
    for (const c of children) c.kill('SIGTERM');
  });

  it('the learner trained on the recorded events and srpo serve followed: later completions came from later versions', () => {
    const versions = results.flatMap((r) => r.versions);
    expect(Math.max(...versions)).toBeGreaterThanOrEqual(20);
    // The first tasks were answered by version 0, the last by versions the learner made since.
    expect(results[0].versions).toEqual([0]);
    expect(Math.min(...results[results.length - 1].versions)).toBeGreaterThan(10);
  });

  it("success rose: the last third's 95 % interval lies wholly above the first 10 tasks'", () => {
    const first = results.slice(0, 10);
    const last = results.slice(Math.floor((2 * results.length) / 3));
    const k0 = first.reduce((a, r) => a + r.successes, 0);
    const k1 = last.reduce((a, r) => a + r.successes, 0);
    const start = wilson(k0, first.length * GROUP);
    const end = wilson(k1, last.length * GROUP);
    const solved = (rs: TaskResult[]) => rs.reduce((a, r) => a + r.solved, 0);
    console.log(
      `fixed success through the gateway: first 10 tasks ${k0}/${first.length * GROUP}, last third ${k1}/${last.length * GROUP} (solver right ${solved(first)} → ${solved(last)}); newest version ${Math.max(...results.flatMap((r) => r.versions))}`,
    );
    expect(end[0]).toBeGreaterThan(start[1]);
  });

  it('nothing was dead-lettered or invalid, and every output was recorded once', async () => {
    const kafka = createKafka({ brokers, clientId: 'e2e-check' });
    expect(await readTopicsToEnd(kafka, [catalog.deadLetter.name, catalog.invalidSets.name])).toHaveLength(0);
    const codec = new EventCodec();
    const outputs = (await readTopicsToEnd(kafka, [catalog.agentOutputs.name])).map((r) => codec.decodeAs('AgentOutput', r.value));
    expect(outputs).toHaveLength(TASKS * GROUP * 2);
    expect(new Set(outputs.map((o) => o.outputId)).size).toBe(outputs.length);
  });

  it('no process printed an error line', () => {
    for (const name of ['materializer', 'learner', 'serve', 'gateway']) expect(fs.readFileSync(log(name), 'utf8')).not.toMatch(/"level":"error"/);
  });
});
