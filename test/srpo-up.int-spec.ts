import { ChildProcess, spawn } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import OpenAI from 'openai';
import { repoRoot } from '@srpo/core';
import { createKafka, EventCodec, readTopicsToEnd, topicCatalog } from '@srpo/events';
import { ensureKafka, pidAlive, sleep, uniquePrefix, upChildPids } from '@srpo/testing';

/**
 * `srpo up` as a user runs it (bin/srpo.js, the compiled apps from `npm run build`) on a tiny
 * random Llama directory (libs/hf/fixtures/llama) against the real broker: it starts the four
 * processes, reports ready, answers the official `openai` client through the gateway (which
 * records the completion), and stops in order on SIGINT with every child gone and exit code 0.
 * A child that dies takes the others down and the exit code names it.
 */
const root = repoRoot();
const MODEL = path.join(root, 'libs', 'hf', 'fixtures', 'llama');

interface Up {
  child: ChildProcess;
  output: () => string;
  exited: Promise<number | null>;
  prefix: string;
  gateway: string;
}

function startUp(label: string, extraEnv: Record<string, string> = {}): Up {
  const brokers = ensureKafka();
  const prefix = uniquePrefix(label);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `srpo-up-${label}-`));
  const base = 27_000 + Math.floor(Math.random() * 900) * 4;
  const child = spawn(
    process.execPath,
    [
      path.join(root, 'bin', 'srpo.js'),
      'up',
      '--model',
      MODEL,
      '--lora',
      '--port',
      String(base),
      '--serve-port',
      String(base + 1),
      '--learner-port',
      String(base + 2),
      '--materializer-port',
      String(base + 3),
      '--backend',
      'tensorflow',
      '--ready-timeout',
      '240',
    ],
    {
      cwd: dir,
      env: {
        PATH: process.env.PATH ?? '',
        HOME: process.env.HOME ?? '',
        KAFKA_BROKERS: brokers.join(','),
        SRPO_TOPIC_PREFIX: prefix,
        SRPO_RAW_PARTITIONS: '1',
        SRPO_DERIVED_PARTITIONS: '1',
        // Variables reach the children as well as flags: one group per test run on a shared broker.
        SRPO_CONSUMER_GROUP: `${prefix}learner`,
        SRPO_STATE_DIR: path.join(dir, 'state'),
        ...extraEnv,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (out += d.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return { child, output: () => out, exited, prefix, gateway: `http://127.0.0.1:${base}/v1` };
}

async function waitFor(up: Up, pattern: RegExp, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!pattern.test(up.output())) {
    if (up.child.exitCode !== null || Date.now() > deadline) throw new Error(`srpo up never printed ${pattern}:\n${up.output().slice(-6000)}`);
    await sleep(250);
  }
}

/** Each role's PID, from the `<role> started (pid N)` lines. */
const pids = (up: Up) => upChildPids(up.output(), `srpo up's output:\n${up.output().slice(0, 3000)}`);

describe('srpo up (real broker, real processes)', () => {
  const started: Up[] = [];
  afterAll(() => {
    // Only if a test failed midway: its srpo up (which then stops its own children).
    for (const up of started) if (up.child.exitCode === null) up.child.kill('SIGTERM');
  });

  it('starts the topology, answers the openai client through the gateway, records the output, and stops in order on SIGINT (exit 0)', async () => {
    const up = startUp('up');
    started.push(up);
    await waitFor(up, /^srpo up: ready$/m, 240_000);
    const children = pids(up);
    expect(up.output()).toContain(`gateway       ${up.gateway}   <- OpenAI base_url for agents; model "llama-lora"`);

    const client = new OpenAI({
      baseURL: up.gateway,
      apiKey: 'unused',
      defaultHeaders: { 'X-SRPO-Episode': 'up-e1', 'X-SRPO-Step': '0', 'X-SRPO-Role': 'solver', 'X-SRPO-Agent': 'solver-0' },
    });
    const completion = await client.chat.completions.create({ model: 'llama-lora', messages: [{ role: 'user', content: 'hello' }], max_tokens: 4 });
    expect(completion.choices).toHaveLength(1);
    expect(typeof completion.choices[0].message.content).toBe('string');
    const srpo = (completion as unknown as { srpo: { policy_id: string; policy_version: number; output_ids: string[] } }).srpo;
    expect(srpo).toMatchObject({ policy_id: 'llama-lora', policy_version: 0 });

    // The gateway recorded it as one AgentOutput of version 0.
    const kafka = createKafka({ brokers: ensureKafka(), clientId: 'srpo-up-check' });
    const codec = new EventCodec();
    const outputs = (await readTopicsToEnd(kafka, [topicCatalog({ prefix: up.prefix }).agentOutputs.name])).map((r) => codec.decodeAs('AgentOutput', r.value));
    expect(outputs.map((o) => [o.outputId, o.policyId, o.policyVersion])).toEqual([[srpo.output_ids[0], 'llama-lora', 0]]);

    up.child.kill('SIGINT');
    expect(await up.exited).toBe(0);
    const out = up.output();
    expect(out).toMatch(/^srpo up: SIGINT: stopping gateway, serve, learner, materializer$/m);
    expect(out).toMatch(/^srpo up: every process stopped$/m);
    for (const pid of Object.values(children)) expect(pidAlive(pid)).toBe(false);
    // One log view: every child line prefixed by its role; the JSON logs shown as text.
    expect(out).toMatch(/^learner {6}\d\d:\d\d:\d\d info {2}learner HTTP API listening host=127\.0\.0\.1 port=\d+ policyId=llama-lora$/m);
    expect(out).toMatch(/^serve {8}\d\d:\d\d:\d\d info {2}serve OpenAI-compatible API listening /m);
    expect(out).not.toMatch(/^\{"ts"/m);
    expect(out).not.toMatch(/ error /);
  }, 360_000);

  it('stops the others when one child dies, with an exit code that names it (serve: 13)', async () => {
    const up = startUp('up-die');
    started.push(up);
    await waitFor(up, /^srpo up: ready$/m, 240_000);
    const children = pids(up);
    process.kill(children.serve, 'SIGKILL');
    expect(await up.exited).toBe(13);
    expect(up.output()).toMatch(/^srpo up: the serve exited on its own \(signal SIGKILL\); stopping the others$/m);
    expect(up.output()).toMatch(/^srpo up: exit 13: the serve died \(signal SIGKILL\)$/m);
    for (const pid of Object.values(children)) expect(pidAlive(pid)).toBe(false);
  }, 360_000);

  it('refuses to start without a broker, saying how to start one', async () => {
    const up = spawn(process.execPath, [path.join(root, 'bin', 'srpo.js'), 'up', '--model', MODEL], {
      cwd: os.tmpdir(),
      // No KAFKA_BROKERS: the local broker's port, where nothing listens.
      env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', SRPO_KAFKA_PORT: '1' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let err = '';
    up.stderr.on('data', (d: Buffer) => (err += d.toString()));
    const code = await new Promise<number | null>((resolve) => up.once('exit', (c) => resolve(c)));
    expect(code).toBe(1);
    // One line, nothing of kafkajs's retries before it.
    expect(err.trim().split('\n')).toHaveLength(1);
    expect(err).toMatch(/^srpo: no Kafka broker answers at 127\.0\.0\.1:1 \(.*\): start the local one with `infra\/kafka\/kafka\.sh start`/);
  }, 60_000);
});
