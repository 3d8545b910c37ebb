import { spawn } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { repoRoot } from '@srpo/core';
import { createKafka, EventCodec, readTopicsToEnd, topicCatalog } from '@srpo/events';
import { hfDirectoryHash } from '@srpo/hf';
import { ensureKafka, sleep } from '@srpo/testing';

const UPDATES = 4;
const MAX_SECONDS = 300;
const MODEL = path.join(repoRoot(), 'libs', 'hf', 'fixtures', 'qwen2');

/**
 * `srpo demo --model DIR`: the whole pipeline (real processes, real broker) on a Hugging Face
 * model, the Qwen2 fixture made by scripts/reference/make_hf_fixtures.py. Learning is the other
 * demo test's subject; this one checks that every part runs on the HF model: the agents sample it
 * and write its token ids, the learners train it and checkpoint it on its base, nothing is
 * dead-lettered, and no error-level line is printed.
 */
describe('srpo demo --model (a Hugging Face directory, real broker)', () => {
  const brokers = ensureKafka();
  const kafka = createKafka({ brokers, clientId: 'demo-hf-test' });
  const codec = new EventCodec();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-demo-hf-'));
  const port = 22_000 + Math.floor(Math.random() * 1000);
  let stdout = '';
  let exitCode: number | null = null;
  let prefix = '';

  beforeAll(
    async () => {
      const child = spawn(
        process.execPath,
        [path.join(repoRoot(), 'bin', 'srpo.js'), 'demo', '--model', MODEL, '--updates', String(UPDATES), '--target', '0', '--seconds', String(MAX_SECONDS)],
        {
          env: {
            PATH: process.env.PATH ?? '',
            HOME: process.env.HOME ?? '',
            KAFKA_BROKERS: brokers.join(','),
            SRPO_DEMO_DIR: dir,
            SRPO_DEMO_HTTP_PORT: String(port),
            SRPO_DEMO_LOG_MS: '10000',
          },
          stdio: ['ignore', 'pipe', 'pipe'],
        },
      );
      child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
      child.stderr.on('data', (d: Buffer) => (stdout += d.toString()));
      const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
      const timer = setTimeout(() => child.kill('SIGKILL'), (MAX_SECONDS + 120) * 1000);
      exitCode = await exited;
      clearTimeout(timer);
      prefix = /topics (\S+)\*/.exec(stdout)?.[1] ?? '';
      await sleep(0);
    },
    (MAX_SECONDS + 180) * 1000,
  );

  it('trained every policy to the update target and stopped cleanly, nothing dead-lettered, no error line', async () => {
    expect(exitCode).toBe(0);
    expect(stdout).toMatch(new RegExp(`every policy applied ${UPDATES} updates at \\d+:\\d\\d; stopping`));
    expect(stdout).not.toMatch(/"level":"error"|\bERROR\b|Crash:/);
    const catalog = topicCatalog({ prefix });
    expect(await readTopicsToEnd(kafka, [catalog.deadLetter.name, catalog.invalidSets.name])).toHaveLength(0);
  });

  it('the agents wrote the model tokenizer\'s ids: BOS is its "^", and versions past 0 sampled', async () => {
    const vocab = (JSON.parse(fs.readFileSync(path.join(MODEL, 'tokenizer.json'), 'utf8')) as { model: { vocab: Record<string, number> } }).model.vocab;
    const catalog = topicCatalog({ prefix });
    const outputs = (await readTopicsToEnd(kafka, [catalog.agentOutputs.name], { timeoutMs: 60_000 })).map((r) => codec.decodeAs('AgentOutput', r.value));
    expect(outputs.length).toBeGreaterThan(100);
    for (const o of outputs) {
      expect(o.contextTokenIds[0]).toBe(vocab['^']);
      for (const id of o.responseTokenIds) expect(id >= 0 && id < 448).toBe(true);
    }
    // The symbols above 31 in the project's own vocabulary do not exist here: ids of HF tokens do.
    expect(outputs.some((o) => o.responseTokenIds.some((id) => id >= 32))).toBe(true);
    expect(Math.max(...outputs.map((o) => o.policyVersion))).toBeGreaterThanOrEqual(1);
  });

  it('the learners checkpointed Hugging Face policies on the model directory, by its hash', () => {
    const hash = hfDirectoryHash(MODEL);
    for (const policy of ['actor', 'judge', 'aggregator']) {
      const versions = fs.readdirSync(path.join(dir, 'checkpoints', policy)).filter((v) => /^v\d+$/.test(v));
      expect(versions.length).toBeGreaterThanOrEqual(2);
      const newest = versions.sort((a, b) => Number(b.slice(1)) - Number(a.slice(1)))[0];
      const modelJson = JSON.parse(fs.readFileSync(path.join(dir, 'checkpoints', policy, newest, 'model.json'), 'utf8')) as {
        userDefinedMetadata: { manifest: { modelKind: string; base: { hash: string } } };
      };
      const { manifest } = modelJson.userDefinedMetadata;
      expect(manifest.modelKind).toBe('hf-llama');
      expect(manifest.base.hash).toBe(hash);
    }
  });
});
