import { execFileSync, type ChildProcess } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import OpenAI from 'openai';
import { initTfBackend, repoRoot } from '@srpo/core';
import { createKafka, ensureTopics, EventCodec, readTopicsToEnd, topicCatalog } from '@srpo/events';
import { CheckpointStore, Policy } from '@srpo/policy';
import { ensureKafka, sleep, spawnApp, uniquePrefix } from '@srpo/testing';

const PORT = 19493;
const TINY = { vocabSize: 32, dModel: 16, nLayers: 1, nHeads: 2, maxSeqLen: 16 };

async function waitFor(what: string, check: () => boolean | Promise<boolean>, ms = 90_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(250);
  }
}

/**
 * The gateway's events broker stopped mid-run. Its upstream (srpo serve, on the shared broker)
 * keeps answering. By default the gateway refuses the completion (503), so nothing is returned
 * unrecorded. With SRPO_GATEWAY_SPOOL_DIR it answers, spools the events to disk, and replays
 * them in their order once the broker is back.
 */
describe('srpo gateway with its broker stopped', () => {
  const sharedBrokers = ensureKafka();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-gateway-down-'));
  const kafkaEnv = { ...process.env, SRPO_KAFKA_PORT: String(PORT), SRPO_KAFKA_DIR: path.join(dir, 'kafka') };
  const kafkaSh = (verb: string) => execFileSync('bash', [path.join(repoRoot(), 'infra', 'kafka', 'kafka.sh'), verb], { env: kafkaEnv, stdio: 'inherit' });
  const brokers = [`127.0.0.1:${PORT}`];
  const prefix = uniquePrefix('gwdown');
  const catalog = topicCatalog({ prefix, rawPartitions: 1, derivedPartitions: 1 });
  const codec = new EventCodec();
  const servePort = 24_000 + Math.floor(Math.random() * 300);
  const failPort = servePort + 300;
  const spoolPort = servePort + 600;
  const headers = (step: number) => ({ 'X-SRPO-Episode': 'ep-d', 'X-SRPO-Step': String(step), 'X-SRPO-Role': 'solver', 'X-SRPO-Agent': 'a' });
  const client = (port: number, step: number) =>
    new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'unused', maxRetries: 0, defaultHeaders: headers(step) });
  const children: ChildProcess[] = [];
  const log = (name: string) => path.join(dir, `${name}.log`);

  beforeAll(async () => {
    await initTfBackend('tensorflow');
    kafkaSh('start');
    for (const b of [brokers, sharedBrokers]) {
      const admin = createKafka({ brokers: b, clientId: 'gwdown-admin' }).admin();
      await admin.connect();
      await ensureTopics(admin, catalog.all());
      await admin.disconnect();
    }
    const tiny = Policy.create('tiny', TINY, 3);
    await new CheckpointStore(path.join(dir, 'checkpoints')).save(tiny);
    tiny.dispose();
    children.push(
      spawnApp(
        'serve',
        {
          KAFKA_BROKERS: sharedBrokers.join(','),
          SRPO_TOPIC_PREFIX: prefix,
          SRPO_CHECKPOINT_DIR: path.join(dir, 'checkpoints'),
          SRPO_SERVE_POLICIES: 'tiny',
          SRPO_SERVE_PORT: String(servePort),
          SRPO_BACKEND: 'tensorflow',
        },
        log('serve'),
      ),
    );
    const gw = { KAFKA_BROKERS: brokers.join(','), SRPO_TOPIC_PREFIX: prefix, SRPO_GATEWAY_UPSTREAM: `http://127.0.0.1:${servePort}/v1` };
    children.push(spawnApp('gateway', { ...gw, SRPO_GATEWAY_PORT: String(failPort) }, log('gateway-fail')));
    children.push(spawnApp('gateway', { ...gw, SRPO_GATEWAY_PORT: String(spoolPort), SRPO_GATEWAY_SPOOL_DIR: path.join(dir, 'spool') }, log('gateway-spool')));
    for (const name of ['serve', 'gateway-fail', 'gateway-spool']) {
      await waitFor(`${name} to listen`, () => fs.existsSync(log(name)) && /listening/.test(fs.readFileSync(log(name), 'utf8')));
    }
  }, 180_000);

  afterAll(() => {
    for (const c of children) c.kill('SIGKILL');
    kafkaSh('stop');
  });

  it('fails the request by default, spools and later replays in order with the spool, losing nothing', async () => {
    const before = await client(failPort, 0).completions.create({ model: 'tiny', prompt: '^S', max_tokens: 2 });
    expect((before as unknown as { srpo: { output_ids: string[] } }).srpo.output_ids).toEqual(['ep-d.s0.a']);

    kafkaSh('stop');
    await expect(client(failPort, 1).completions.create({ model: 'tiny', prompt: '^S', max_tokens: 2 })).rejects.toMatchObject({
      status: 503,
      code: 'kafka_unavailable',
    });
    const spooled = await client(spoolPort, 2).completions.create({ model: 'tiny', prompt: '^S', max_tokens: 2 });
    expect((spooled as unknown as { srpo: { output_ids: string[]; spooled: boolean } }).srpo).toMatchObject({ output_ids: ['ep-d.s2.a'], spooled: true });
    const outcome = await fetch(`http://127.0.0.1:${spoolPort}/v1/srpo/outcomes`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ episodeId: 'ep-d', taskId: 't', outcomeReward: 1, success: true, verifier: 'test@1', turns: 3, eventTimeMs: Date.now() }),
    });
    expect(await outcome.json()).toEqual({ recorded: 'EpisodeOutcome', spooled: true });
    const health = async () => (await (await fetch(`http://127.0.0.1:${spoolPort}/health`)).json()) as { spoolPending: number; replayed: number };
    expect((await health()).spoolPending).toBe(2);

    kafkaSh('start');
    await waitFor('the spool to drain', async () => (await health()).spoolPending === 0, 120_000);
    const kafka = createKafka({ brokers, clientId: 'gwdown-check' });
    const outputs = (await readTopicsToEnd(kafka, [catalog.agentOutputs.name])).map((r) => codec.decodeAs('AgentOutput', r.value).outputId);
    // The refused request left nothing; the spooled one arrived once the broker was back.
    expect(outputs).toEqual(['ep-d.s0.a', 'ep-d.s2.a']);
    const outcomes = (await readTopicsToEnd(kafka, [catalog.episodeOutcomes.name])).map((r) => codec.decodeAs('EpisodeOutcome', r.value).episodeId);
    expect(outcomes).toEqual(['ep-d']);
    expect(fs.readFileSync(path.join(dir, 'spool', 'events.jsonl'), 'utf8')).toBe('');
  }, 240_000);
});
