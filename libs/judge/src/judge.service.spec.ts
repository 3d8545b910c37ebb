import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import type { EachBatchPayload, Kafka, KafkaMessage } from 'kafkajs';
import { Logger, MetricsSink, type LogSink } from '@srpo/core';
import { EventCodec, sealOutput, topicCatalog, type AgentOutput, type EpisodeOutcome, type Transition } from '@srpo/events';
import { KeyStore } from '@srpo/store';
import { output, transition } from '@srpo/testing';
import type { RewardInput, Scorer } from './judge-input';
import { JudgeService } from './judge.service';

Logger.configure({ level: 'warn' });

const T0 = 1_767_225_600_000;
/** Token i decodes to the letter 96 + i ('a' for 1). */
const table = { decode: (ids: readonly number[]) => ids.map((i) => String.fromCharCode(96 + (i % 26))).join('') };

/**
 * The service's batch loop without a broker: a fake kafkajs whose transactional producer
 * records what each transaction sends, and a scorer whose reward is a function of the text it
 * reads, so an output opened from its seal must score exactly as the same output in the clear.
 */
class Harness {
  readonly codec = new EventCodec();
  readonly catalog = topicCatalog({ prefix: 'unit.' });
  readonly metrics = new MetricsSink();
  readonly sent: EpisodeOutcome[] = [];
  readonly asked: RewardInput[] = [];
  readonly service: JudgeService;
  private offset = 0;

  constructor(mode: 'output' | 'episode', keys?: KeyStore) {
    const tx = {
      sendBatch: async ({ topicMessages }: { topicMessages: { messages: { value: Buffer }[] }[] }) => {
        for (const t of topicMessages) for (const m of t.messages) this.sent.push(this.codec.decodeAs('EpisodeOutcome', m.value));
        return [];
      },
      sendOffsets: async () => undefined,
      commit: async () => undefined,
      abort: async () => undefined,
    };
    const kafka = { producer: () => ({ connect: async () => undefined, disconnect: async () => undefined, transaction: async () => tx }) } as unknown as Kafka;
    // Reward: the response's length over 10, so it depends on the opened tokens.
    const scorer: Scorer = {
      verifier: 'module:len.js',
      details: {},
      score: async (input) => {
        this.asked.push(input);
        const reward = input.outputs.map((o) => o.response).join('').length / 10;
        return { reward, rawScore: reward, details: {} };
      },
    };
    this.service = new JudgeService({
      kafka,
      catalog: this.catalog,
      codec: this.codec,
      scorer,
      tokenizer: table,
      metrics: this.metrics,
      mode,
      policies: ['actor'],
      groupId: 'unit-judge',
      start: 'earliest',
      concurrency: 2,
      successThreshold: 0.5,
      rewardSource: 'program',
      maxPendingEpisodes: 100,
      maxTextChars: 1000,
      pendingTtlMs: 600_000,
      sessionTimeoutMs: 30_000,
      keys,
      clock: () => T0,
    });
  }

  /** One batch of one partition, as kafkajs hands it to `eachBatch`. */
  async batch(topic: string, values: Buffer[]): Promise<void> {
    const messages: KafkaMessage[] = values.map((value) => ({ offset: String(this.offset++), value, key: null, timestamp: '0', attributes: 0, headers: {} }));
    const payload = {
      batch: { topic, partition: 0, messages },
      isRunning: () => true,
      isStale: () => false,
      resolveOffset: () => undefined,
      heartbeat: async () => undefined,
    } as unknown as EachBatchPayload;
    await (this.service as unknown as { onBatch(p: EachBatchPayload): Promise<void> }).onBatch(payload);
  }

  outputs(list: AgentOutput[]): Promise<void> {
    return this.batch(
      this.catalog.agentOutputs.name,
      list.map((o) => this.codec.encode('AgentOutput', o)),
    );
  }

  transitions(list: Transition[]): Promise<void> {
    return this.batch(
      this.catalog.transitions.name,
      list.map((t) => this.codec.encode('Transition', t)),
    );
  }

  skipped(reason: string): Promise<number> {
    return this.metrics.value('judge_skipped_total', { reason });
  }
}

describe('JudgeService and sealed outputs', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-judge-svc-'));
  let keys: KeyStore;
  beforeAll(async () => {
    keys = await KeyStore.open({ kind: 'sqlite', path: path.join(dir, 'keys.sqlite') }, { cacheMs: 0 });
  });
  afterAll(async () => {
    await keys.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  // Prompt 'ab', response 'cdef': four characters, reward 0.4.
  const actorOutput = (episodeId: string, subjectId: string, patch: Partial<AgentOutput> = {}): AgentOutput =>
    output(episodeId, 0, { policyId: 'actor', subjectId, contextRef: `task-${episodeId}`, contextTokenIds: [1, 2], responseTokenIds: [3, 4, 5, 6], ...patch });
  const seal = async (o: AgentOutput) => sealOutput(o, await keys.keyFor(o.subjectId, o.episodeId, T0));

  it('output mode: judges a sealed output opened with its key as in the clear; skips erased and changed ones with their own reasons, in one key query per chunk', async () => {
    const clear = actorOutput('ep-clear', 'alice');
    const sealed = await seal(actorOutput('ep-sealed', 'alice'));
    const erased = await seal(actorOutput('ep-erased', 'bob'));
    const changed = await seal(actorOutput('ep-changed', 'carol'));
    const ciphertext = Buffer.from(changed.sealed?.ciphertext as Buffer);
    ciphertext[ciphertext.length - 1] ^= 0x80; // a bit of the GCM tag
    const tampered: AgentOutput = { ...changed, sealed: { ...(changed.sealed as NonNullable<AgentOutput['sealed']>), ciphertext } };
    const other = await seal(actorOutput('ep-other', 'dave', { policyId: 'other' })); // not a judged policy: its key is not fetched
    await keys.erase({ subjectId: 'bob' }, 'er-unit', T0 + 1);

    const spy = jest.spyOn(keys, 'keysById');
    const h = new Harness('output', keys);
    await h.outputs([clear, sealed, erased, tampered, other]);
    expect(spy).toHaveBeenCalledTimes(1);
    expect([...(spy.mock.calls[0][0] as string[])].sort()).toEqual([sealed.sealed?.keyId, erased.sealed?.keyId, changed.sealed?.keyId].sort());
    spy.mockRestore();

    expect(h.sent.map((o) => [o.episodeId, o.outcomeReward])).toEqual([
      ['ep-clear', 0.4],
      ['ep-sealed', 0.4],
    ]);
    // The scorer read the same text from both: the opened prompt and response, not empty strings.
    expect(h.asked.map((i) => [i.outputs[0].prompt, i.outputs[0].response])).toEqual([
      ['ab', 'cdef'],
      ['ab', 'cdef'],
    ]);
    expect(await h.skipped('erased_content')).toBe(1);
    expect(await h.skipped('unopenable_content')).toBe(1);
    expect(await h.skipped('sealed_content')).toBe(0);
    expect(await h.metrics.value('judge_outcomes_total')).toBe(2);
    expect(await h.metrics.value('judge_failures_total')).toBe(0);
  });

  it('episode mode: an episode with an erased output is dropped whole, never judged on the outputs left', async () => {
    const first = await seal(actorOutput('ep-a', 'erin', { outputId: 'ep-a/o0' }));
    const second = await seal(actorOutput('ep-a', 'frank', { outputId: 'ep-a/o1', step: 1 }));
    const whole = [await seal(actorOutput('ep-b', 'erin', { outputId: 'ep-b/o0' })), actorOutput('ep-b', 'erin', { outputId: 'ep-b/o1', step: 1 })];
    await keys.erase({ subjectId: 'frank' }, 'er-unit-2', T0 + 2);
    const h = new Harness('episode', keys);
    await h.outputs([first, second, ...whole]);
    await h.transitions([transition('ep-a', [0, 1], { done: true, taskId: 'task-a' }), transition('ep-b', [0, 1], { done: true, taskId: 'task-b' })]);
    expect(h.sent.map((o) => [o.episodeId, o.outcomeReward])).toEqual([['ep-b', 0.8]]); // two responses of 4 characters
    expect(h.asked.map((i) => i.outputs.map((o) => o.response))).toEqual([['cdef', 'cdef']]);
    expect(await h.skipped('erased_content')).toBe(1);
  });

  it('without a key source: a sealed output is skipped as sealed_content, and the log says once which variable to set', async () => {
    const lines: string[] = [];
    const sink: LogSink = { write: (line) => void lines.push(line) };
    Logger.configure({ sink });
    try {
      const h = new Harness('output');
      await h.outputs([await seal(actorOutput('ep-n1', 'gina')), await seal(actorOutput('ep-n2', 'gina'))]);
      expect(h.sent).toEqual([]);
      expect(h.asked).toEqual([]);
      expect(await h.skipped('sealed_content')).toBe(2);
      const warned = lines.filter((l) => l.includes('sealed outputs are skipped'));
      expect(warned).toHaveLength(1);
      expect(warned[0]).toContain('set SRPO_DATABASE_URL or SRPO_SQLITE_PATH');
    } finally {
      Logger.configure({ sink: { write: (line) => process.stderr.write(line + '\n') } });
    }
  });
});
