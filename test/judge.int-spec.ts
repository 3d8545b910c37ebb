import { spawn, type ChildProcess } from 'child_process';
import { createHash } from 'crypto';
import * as fs from 'fs';
import * as net from 'net';
import * as os from 'os';
import * as path from 'path';
import { repoRoot } from '@srpo/core';
import {
  AgentEventsProducer,
  createKafka,
  ensureTopics,
  EventCodec,
  readTopicsToEnd,
  sealOutput,
  topicCatalog,
  type AgentOutput,
  type EpisodeOutcome,
  type TopicCatalog,
} from '@srpo/events';
import { HfTokenizer } from '@srpo/hf';
import { KeyStore } from '@srpo/store';
import { ensureKafka, output, sleep, spawnApp, startFakeJudge, transition, uniquePrefix, waitForExit, type FakeJudgeServer } from '@srpo/testing';

/**
 * `srpo judge` end to end, as a child process of the built CLI (`npm run build` first), on the
 * real broker, against a local HTTP server that speaks OpenAI's chat-completions format standing
 * in for an external judge: one answer scores, one is garbage, one never comes (a timeout). The
 * last test runs the materializer too: a judge's outcome completes a set waiting in its window.
 */
const bin = path.join(repoRoot(), 'bin', 'srpo.js');
const TOKENIZER_DIR = path.join(repoRoot(), 'libs', 'hf', 'fixtures', 'qwen2');
const KEY = 'sk-judge-test-secret';

async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as net.AddressInfo).port;
  await new Promise((r) => server.close(r));
  return port;
}

describe('srpo judge (real broker, local judge endpoint)', () => {
  const brokers = ensureKafka();
  const kafka = createKafka({ brokers, clientId: 'judge-int-test' });
  const codec = new EventCodec();
  const tokenizer = HfTokenizer.fromDirectory(TOKENIZER_DIR);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-judge-'));
  const children: ChildProcess[] = [];
  const producers: AgentEventsProducer[] = [];
  let judge: FakeJudgeServer;

  beforeAll(async () => {
    judge = await startFakeJudge(({ prompt }) => {
      if (prompt.includes('HANG')) return { hang: true };
      if (prompt.includes('GARBAGE')) return { content: 'What a lovely answer; I cannot decide.' };
      const m = /GOOD-(\d+)/.exec(prompt);
      return m ? { content: `The answer is correct.\n{"score": ${m[1]}}` } : { status: 400 };
    });
  });
  afterAll(async () => {
    for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
    for (const p of producers) await p.disconnect().catch(() => undefined);
    await judge.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  async function setUp(label: string, partitions: number): Promise<{ prefix: string; catalog: TopicCatalog; sdk: AgentEventsProducer }> {
    const prefix = uniquePrefix(label);
    const catalog = topicCatalog({ prefix, rawPartitions: partitions });
    const admin = kafka.admin();
    await admin.connect();
    await ensureTopics(admin, [catalog.agentOutputs, catalog.transitions, catalog.episodeOutcomes]);
    await admin.disconnect();
    const sdk = new AgentEventsProducer({ kafka, topics: catalog });
    await sdk.connect();
    producers.push(sdk);
    return { prefix, catalog, sdk };
  }

  function startJudge(prefix: string, partitions: number, args: string[], log: string, extraEnv: Record<string, string> = {}): ChildProcess {
    const child = spawn(process.execPath, [bin, 'judge', ...args], {
      env: {
        PATH: process.env.PATH ?? '',
        HOME: process.env.HOME ?? '',
        KAFKA_BROKERS: brokers.join(','),
        SRPO_TOPIC_PREFIX: prefix,
        SRPO_RAW_PARTITIONS: String(partitions),
        SRPO_LOG_LEVEL: 'info',
        JUDGE_TEST_KEY: KEY,
        ...extraEnv,
      },
      stdio: ['ignore', fs.openSync(log, 'a'), fs.openSync(log, 'a')],
    });
    children.push(child);
    return child;
  }

  async function outcomes(catalog: TopicCatalog): Promise<EpisodeOutcome[]> {
    const records = await readTopicsToEnd(kafka, [catalog.episodeOutcomes.name]);
    return records.map((r) => codec.decodeAs('EpisodeOutcome', r.value));
  }

  async function waitFor<T>(what: string, probe: () => Promise<T | undefined>, log: string, timeoutMs = 90_000): Promise<T> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const v = await probe().catch(() => undefined);
      if (v !== undefined) return v;
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; judge log:\n${fs.readFileSync(log, 'utf8').slice(-4000)}`);
      await sleep(500);
    }
  }

  const metric = (text: string, name: string, labels = ''): number => {
    const line = text.split('\n').find((l) => l.startsWith(`${name}${labels} `) || (labels === '' && l.startsWith(`${name} `)));
    return line ? Number(line.split(' ').pop()) : 0;
  };

  it("output mode: scores (sealed outputs opened with the store's keys, erased ones skipped), counts garbage and a timeout, goes on past a hung judge, and survives a restart exactly once", async () => {
    const startedAtMs = Date.now();
    const { prefix, catalog, sdk } = await setUp('judge-out', 1);
    const rubric = path.join(dir, 'rubric.txt');
    fs.writeFileSync(rubric, 'You grade answers.\nQuestion: {{prompt}}\nAnswer: {{response}}\nReply with {"score": <0-10>}.\n');
    const rubricSha = createHash('sha256').update(fs.readFileSync(rubric)).digest('hex');
    const ids = (text: string) => tokenizer.encode(text);
    const emit = (episodeId: string, response: string, patch: Parameters<typeof output>[2] = {}) => {
      const responseTokenIds = ids(response);
      return sdk.emitOutput(
        output(episodeId, 0, {
          policyId: 'actor',
          contextRef: `task-${episodeId}`,
          contextTokenIds: ids('What is 2+3?'),
          responseTokenIds,
          behaviourLogProbs: responseTokenIds.map(() => -0.5),
          lossMask: responseTokenIds.map(() => true),
          eventTimeMs: 5_000,
          ...patch,
        }),
      );
    };
    // One partition: the good output after the hung one is behind it in the same log.
    await emit('e-good', 'GOOD-8');
    await emit('e-good', 'GOOD-1', { outputId: 'e-good/o1', step: 1 }); // a second judged output of the episode: skipped
    await emit('e-hang', 'HANG');
    await emit('e-after-hang', 'GOOD-3', { eventTimeMs: 6_000 });
    await emit('e-garbage', 'GARBAGE');
    await emit('e-other', 'GOOD-9', { policyId: 'other' }); // not a chosen policy
    // Sealed as a sealing gateway does, keys in the learner's SQLite store (docs/erasure.md): alice's
    // output is e-good's, sealed; bob's key is erased before the judge starts.
    const storePath = path.join(dir, 'learner.sqlite');
    const keys = await KeyStore.open({ kind: 'sqlite', path: storePath });
    const sealedWith = async (o: AgentOutput) => sealOutput(o, await keys.keyFor(o.subjectId, o.episodeId, Date.now()));
    const contentOf = (episodeId: string, response: string, subjectId: string) => {
      const responseTokenIds = ids(response);
      return output(episodeId, 0, {
        policyId: 'actor',
        contextRef: `task-${episodeId}`,
        contextTokenIds: ids('What is 2+3?'),
        responseTokenIds,
        behaviourLogProbs: responseTokenIds.map(() => -0.5),
        lossMask: responseTokenIds.map(() => true),
        eventTimeMs: 5_000,
        subjectId,
      });
    };
    await sdk.emitOutput(await sealedWith(contentOf('e-sealed', 'GOOD-8', 'alice')));
    await sdk.emitOutput(await sealedWith(contentOf('e-erased', 'GOOD-4', 'bob')));
    const aliceKey = (await keys.keyFor('alice', 'e-sealed', Date.now())).key.toString('hex');
    await keys.erase({ subjectId: 'bob' }, 'er-judge-int', Date.now());
    await keys.close();

    const port = await freePort();
    const log = path.join(dir, 'judge-out.log');
    const args = [
      '--policy',
      'actor',
      '--base-url',
      judge.baseUrl,
      '--model',
      'judge-x',
      '--api-key-env',
      'JUDGE_TEST_KEY',
      '--rubric',
      rubric,
      '--tokenizer',
      TOKENIZER_DIR,
      '--timeout-ms',
      '1500',
      '--concurrency',
      '2',
      '--metrics-port',
      String(port),
      '--start',
      'earliest',
    ];
    const storeEnv = { SRPO_SQLITE_PATH: storePath };
    let child = startJudge(prefix, 1, args, log, storeEnv);
    const metricsText = () => fetch(`http://127.0.0.1:${port}/metrics`).then((r) => r.text());
    const text = await waitFor(
      'three outcomes and two failures',
      async () => {
        const t = await metricsText();
        return metric(t, 'srpo_judge_requests_total', '{result="ok"}') === 3 && metric(t, 'srpo_judge_requests_total', '{result="failed"}') === 2
          ? t
          : undefined;
      },
      log,
    );
    expect(metric(text, 'srpo_judge_failures_total', '{reason="timeout"}')).toBe(1);
    expect(metric(text, 'srpo_judge_failures_total', '{reason="garbage"}')).toBe(1);
    expect(metric(text, 'srpo_judge_skipped_total', '{reason="episode_already_judged"}')).toBe(1);
    expect(metric(text, 'srpo_judge_skipped_total', '{reason="erased_content"}')).toBe(1);
    expect(metric(text, 'srpo_judge_skipped_total', '{reason="sealed_content"}')).toBe(0);
    expect(metric(text, 'srpo_judge_outcomes_total')).toBe(3);

    const got = await outcomes(catalog);
    expect(got.map((o) => o.episodeId).sort()).toEqual(['e-after-hang', 'e-good', 'e-sealed']);
    // The sealed output, opened with alice's key, was sent as the same text and scored as e-good in the clear.
    const sealedOutcome = got.find((o) => o.episodeId === 'e-sealed') as EpisodeOutcome;
    expect([sealedOutcome.outcomeReward, sealedOutcome.success, sealedOutcome.verifierDetails.rawScore]).toEqual([0.8, true, '8']);
    expect(judge.requests.filter((r) => r.prompt.includes('GOOD-8')).map((r) => r.prompt)).toEqual([
      'You grade answers.\nQuestion: What is 2+3?\nAnswer: GOOD-8\nReply with {"score": <0-10>}.\n',
      'You grade answers.\nQuestion: What is 2+3?\nAnswer: GOOD-8\nReply with {"score": <0-10>}.\n',
    ]);
    expect(judge.requests.some((r) => r.prompt.includes('GOOD-4'))).toBe(false); // bob's erased output
    const good = got.find((o) => o.episodeId === 'e-good') as EpisodeOutcome;
    expect(good).toMatchObject({
      taskId: 'task-e-good',
      outcomeReward: 0.8,
      success: true,
      verifier: 'judge:judge-x',
      turns: 1,
      eventTimeMs: expect.any(Number) as unknown,
      rewardSource: 'judge',
      revision: 0,
    });
    expect(good.verifierDetails).toMatchObject({
      judgeModel: 'judge-x',
      judgeVersion: 'judge-model-2026-01-01',
      judgeSystemFingerprint: 'fp_fake',
      promptSha256: rubricSha,
      rubric: 'rubric.txt',
      endpointHost: new URL(judge.baseUrl).host,
      rawScore: '8',
      judgedOutputs: 'e-good/o0',
    });
    expect(got.find((o) => o.episodeId === 'e-after-hang')).toMatchObject({ outcomeReward: 0.3, success: false });
    // Stamped when decided (this run), not with the judged output's time (5 s after the epoch).
    expect(good.eventTimeMs).toBeGreaterThanOrEqual(startedAtMs);
    // What the judge was sent: the rubric around the decoded prompt and response, with the key.
    const asked = judge.requests.find((r) => r.prompt.includes('GOOD-8'));
    expect(asked?.prompt).toBe('You grade answers.\nQuestion: What is 2+3?\nAnswer: GOOD-8\nReply with {"score": <0-10>}.\n');
    expect(asked?.authorization).toBe(`Bearer ${KEY}`);
    expect(judge.requests.some((r) => r.prompt.includes('GOOD-9'))).toBe(false);

    // A restart reads on from the committed offsets: one new outcome, none twice, and the failed
    // judgements (committed, with no outcome to remember them by) are not asked again.
    child.kill('SIGTERM');
    await waitForExit(child);
    const askedBefore = judge.requests.length;
    await emit('e-late', 'GOOD-10');
    child = startJudge(prefix, 1, args, log, storeEnv);
    const after = await waitFor(
      'the late outcome',
      async () => {
        const all = await outcomes(catalog);
        return all.some((o) => o.episodeId === 'e-late') ? all : undefined;
      },
      log,
    );
    await sleep(2_000); // room for a wrong duplicate to show up
    expect((await outcomes(catalog)).map((o) => o.episodeId).sort()).toEqual(['e-after-hang', 'e-good', 'e-late', 'e-sealed']);
    expect(after.find((o) => o.episodeId === 'e-late')?.outcomeReward).toBe(1);
    expect(judge.requests.slice(askedBefore).map((r) => /Answer: (.*)/.exec(r.prompt)?.[1])).toEqual(['GOOD-10']);
    child.kill('SIGTERM');
    await waitForExit(child);
    const logText = fs.readFileSync(log, 'utf8');
    expect(logText).not.toContain(KEY);
    expect(logText).not.toContain(aliceKey); // a content key never reaches a log
    expect(logText).toContain(`"contentKeys":"sqlite:${storePath}"`);
  });

  it('episode mode with a reward module: judges a finished episode in step order, whatever the order of its events', async () => {
    const { prefix, catalog, sdk } = await setUp('judge-ep', 2);
    const module = path.join(dir, 'reward.js');
    fs.writeFileSync(module, 'module.exports = (input) => input.outputs.map((o) => o.step).join("") === "01" ? 1 : 0.25;\n');
    const withText = (episodeId: string, n: number, step: number, eventTimeMs: number) => {
      const responseTokenIds = tokenizer.encode(`step ${step}`);
      return output(episodeId, n, {
        step,
        policyId: 'actor',
        contextTokenIds: tokenizer.encode('Solve it.'),
        responseTokenIds,
        behaviourLogProbs: responseTokenIds.map(() => -0.1),
        lossMask: responseTokenIds.map(() => true),
        eventTimeMs,
      });
    };
    // e1: outputs, then its transitions. e2: the done transition before the last output.
    await sdk.emitOutput(withText('e1', 0, 0, 1_000));
    await sdk.emitTransition(transition('e1', [0], { step: 0, done: false, eventTimeMs: 1_100, taskId: 'task-a' }));
    await sdk.emitOutput(withText('e1', 1, 1, 1_200));
    await sdk.emitTransition(transition('e1', [1], { transitionId: 'e1/t1', step: 1, done: true, eventTimeMs: 1_300, taskId: 'task-a' }));
    await sdk.emitOutput(withText('e2', 0, 0, 2_000));
    await sdk.emitTransition(transition('e2', [0, 1], { step: 0, done: true, eventTimeMs: 2_100, taskId: 'task-b' }));
    // e3 never ends: held, not judged.
    await sdk.emitOutput(withText('e3', 0, 0, 3_000));

    const port = await freePort();
    const log = path.join(dir, 'judge-ep.log');
    const args = [
      '--mode',
      'episode',
      '--policy',
      'actor',
      '--reward-module',
      module,
      '--tokenizer',
      TOKENIZER_DIR,
      '--metrics-port',
      String(port),
      '--start',
      'earliest',
    ];
    const child = startJudge(prefix, 2, args, log);
    const e1 = await waitFor('e1 judged', async () => (await outcomes(catalog)).find((o) => o.episodeId === 'e1'), log);
    expect(e1).toMatchObject({
      taskId: 'task-a',
      outcomeReward: 1,
      success: true,
      verifier: 'module:reward.js',
      turns: 2,
      eventTimeMs: expect.any(Number) as unknown,
      rewardSource: 'program',
    });
    expect(e1.verifierDetails).toMatchObject({
      mode: 'episode',
      judgedOutputs: 'e1/o0,e1/o1',
      moduleSha256: createHash('sha256').update(fs.readFileSync(module)).digest('hex'),
    });
    await sleep(2_000);
    expect((await outcomes(catalog)).map((o) => o.episodeId)).toEqual(['e1']); // e2 waits for e2/o1, e3 for its end

    await sdk.emitOutput(withText('e2', 1, 1, 2_050));
    const e2 = await waitFor('e2 judged', async () => (await outcomes(catalog)).find((o) => o.episodeId === 'e2'), log);
    expect(e2).toMatchObject({ taskId: 'task-b', outcomeReward: 1, turns: 1 });
    const metrics = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    expect(metric(metrics, 'srpo_judge_outcomes_total')).toBe(2);

    // A restart while e3 is unfinished: its output is read again (the committed offset waited for
    // it), e3 is judged once it ends, and e1, e2 are not judged again.
    child.kill('SIGTERM');
    await waitForExit(child);
    const again = startJudge(prefix, 2, args, log);
    await sdk.emitTransition(transition('e3', [0], { step: 0, done: true, eventTimeMs: 3_100, taskId: 'task-c' }));
    const e3 = await waitFor('e3 judged', async () => (await outcomes(catalog)).find((o) => o.episodeId === 'e3'), log);
    expect(e3).toMatchObject({ taskId: 'task-c', turns: 1 });
    await sleep(2_000);
    expect((await outcomes(catalog)).map((o) => o.episodeId).sort()).toEqual(['e1', 'e2', 'e3']);
    again.kill('SIGTERM');
    await waitForExit(again);
  });

  it("a judge's reward reaches training's input: a set waiting in the judge's window completes with it, the materializer restarted during the wait", async () => {
    const { prefix, catalog, sdk } = await setUp('judge-mat', 1);
    const stateDir = fs.mkdtempSync(path.join(dir, 'mat-state-'));
    const matLog = path.join(dir, 'judge-mat-materializer.log');
    const appId = `${prefix}materializer`;
    const materializer = () =>
      spawnApp(
        'materializer',
        {
          KAFKA_BROKERS: brokers.join(','),
          SRPO_TOPIC_PREFIX: prefix,
          SRPO_APP_ID: appId,
          SRPO_RAW_PARTITIONS: '1',
          SRPO_DERIVED_PARTITIONS: '1',
          SRPO_REWARD_WINDOWS: 'judge=10m',
          SRPO_STATE_DIR: stateDir,
        },
        matLog,
      );
    // The episode happened two minutes ago; its set waits for a `judge` outcome for ten.
    const t = Date.now() - 2 * 60_000;
    const response = tokenizer.encode('GOOD-6');
    await sdk.emitOutput(
      output('jm', 0, {
        policyId: 'worker',
        contextRef: 'task-jm',
        contextTokenIds: tokenizer.encode('What is 2+4?'),
        responseTokenIds: response,
        behaviourLogProbs: response.map(() => -0.5),
        lossMask: response.map(() => true),
        startedAtMs: t,
        eventTimeMs: t,
      }),
    );
    await sdk.emitTransition(transition('jm', [0], { rewardSource: 'judge', groupKey: 'jm', expectedGroupSize: 1, done: true, eventTimeMs: t }));
    const first = materializer();
    children.push(first);
    const admin = kafka.admin();
    await admin.connect();
    try {
      // The set stage has read the transition (its offset committed with the waiting set's state).
      await waitFor(
        'the set stage past the transition',
        async () => {
          const [committed] = await admin.fetchOffsets({ groupId: `${appId}.sets`, topics: [catalog.transitions.name] });
          return committed?.partitions.some((p) => Number(p.offset) >= 1) ? true : undefined;
        },
        matLog,
      );
    } finally {
      await admin.disconnect();
    }
    first.kill('SIGTERM');
    await waitForExit(first);
    const sets = async () => (await readTopicsToEnd(kafka, [catalog.activeSets.name])).map((r) => codec.decodeAs('ActiveSet', r.value));
    expect(await sets()).toEqual([]);

    const rubric = path.join(dir, 'rubric-mat.txt');
    fs.writeFileSync(rubric, 'Grade: {{response}}\n');
    const judgeLog = path.join(dir, 'judge-mat.log');
    const args = [
      '--policy',
      'worker',
      '--base-url',
      judge.baseUrl,
      '--model',
      'judge-x',
      '--rubric',
      rubric,
      '--tokenizer',
      TOKENIZER_DIR,
      '--start',
      'earliest',
    ];
    const child = startJudge(prefix, 1, args, judgeLog);
    const verdict = await waitFor('the judge outcome', async () => (await outcomes(catalog)).find((o) => o.episodeId === 'jm'), judgeLog);
    child.kill('SIGTERM');
    await waitForExit(child);
    expect([verdict.outcomeReward, verdict.rewardSource]).toEqual([0.6, 'judge']);

    children.push(materializer());
    const [set] = await waitFor('the completed set', async () => ((await sets()).length > 0 ? sets() : undefined), matLog);
    expect([set.setId, set.status, set.reward, set.rewardSource, set.outcomeSource?.topic]).toEqual([
      'jm/t0',
      'COMPLETE',
      0.6,
      'OUTCOME',
      catalog.episodeOutcomes.name,
    ]);
    const groups = await waitFor(
      'its group',
      async () => {
        const gs = (await readTopicsToEnd(kafka, [catalog.advantageGroups.name])).map((r) => codec.decodeAs('AdvantageGroup', r.value));
        return gs.length > 0 ? gs : undefined;
      },
      matLog,
    );
    expect(groups[0].sets.map((g) => [g.set.setId, g.set.reward])).toEqual([['jm/t0', 0.6]]);
  });
});
