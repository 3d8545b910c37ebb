import { Kafka, logLevel } from 'kafkajs';
import { ErrorCode, SrpoError, ValidationError } from '@srpo/core';
import { BAD_EVENTS, CORPUS_MAX_PAYLOAD_BYTES } from '../../../test/corpus/bad-events';
import { validStream } from '../../../test/corpus/valid-stream';
import { AgentEventsProducer } from './agent-events-producer';
import { EventCodec } from './event-codec';
import { topicCatalog } from './topic-catalog';

// Nothing listens on this port: a call that got as far as the network fails with a
// connection error, so a ValidationError proves the event was refused before sending.
const kafka = new Kafka({
  clientId: 'sdk-spec',
  brokers: ['127.0.0.1:1'],
  retry: { retries: 1, initialRetryTime: 50, maxRetryTime: 100 },
  connectionTimeout: 300,
  logLevel: logLevel.NOTHING,
});

function sdk(): AgentEventsProducer {
  return new AgentEventsProducer({
    kafka,
    codec: new EventCodec(undefined, { maxPayloadBytes: CORPUS_MAX_PAYLOAD_BYTES }),
    topics: topicCatalog({ prefix: 'sdk-spec.' }),
  });
}

describe('AgentEventsProducer and the bad-input corpus', () => {
  const refusable = BAD_EVENTS.filter((b) => b.sdk !== undefined);

  it('has a typed event for every entry it must refuse', () => {
    expect(refusable.filter((b) => b.event === undefined).map((b) => b.name)).toEqual([]);
    // The field-level kinds of the issue, plus the two single-event relation checks.
    expect(refusable.length).toBeGreaterThanOrEqual(20);
  });

  it.each(refusable.map((b) => [b.name, b] as const))('refuses %s before sending, naming the field', async (_name, bad) => {
    const valid = validStream().outputs[0];
    // A valid event first: nothing of a batch with one bad event may be sent.
    const error: unknown = await sdk()
      .emitBatch([valid, bad.event as NonNullable<typeof bad.event>])
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    const refusal = bad.sdk as NonNullable<typeof bad.sdk>;
    if ('field' in refusal) {
      expect(error).toBeInstanceOf(ValidationError);
      expect((error as ValidationError).field).toBe(refusal.field);
      expect((error as ValidationError).message.startsWith(`${refusal.field}: `)).toBe(true);
    } else {
      expect(error).toBeInstanceOf(SrpoError);
      expect((error as SrpoError).code).toBe(refusal.code);
      expect((error as SrpoError).code).toBe(ErrorCode.PAYLOAD_TOO_LARGE);
    }
  });

  it('lets every valid event of the stream through to the network', async () => {
    const events = Object.values(validStream()).flat();
    const error: unknown = await sdk()
      .emitBatch(events)
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    // Validation passed: what stopped the call is the missing broker, not a refusal.
    expect(error).toBeDefined();
    expect(error).not.toBeInstanceOf(SrpoError);
    expect((error as Error).name).toMatch(/KafkaJS/);
  });
});

describe('AgentEventsProducer and floor behaviour log-probs', () => {
  /** A Kafka stand-in whose producer records what it was asked to send. */
  function fakeKafka(): { kafka: Kafka; sent: { topic: string; messages: { key: string; value: Buffer }[] }[] } {
    const sent: { topic: string; messages: { key: string; value: Buffer }[] }[] = [];
    const producer = {
      connect: async () => undefined,
      disconnect: async () => undefined,
      sendBatch: async (batch: { topicMessages: { topic: string; messages: { key: string; value: Buffer }[] }[] }) => {
        sent.push(...batch.topicMessages);
        return [];
      },
    };
    return { kafka: { producer: () => producer } as unknown as Kafka, sent };
  }

  it('sends an output with a −9999 log-prob unchanged and counts it (trained tokens only)', async () => {
    const { kafka: fake, sent } = fakeKafka();
    const seen: { outputId: string; policyId: string; tokens: number }[] = [];
    const codec = new EventCodec();
    const producer = new AgentEventsProducer({ kafka: fake, codec, topics: topicCatalog({ prefix: 'sdk-spec.' }), onFloorLogProbs: (i) => seen.push(i) });
    const outputs = validStream().outputs.filter((e) => e.type === 'AgentOutput');
    const [a, b] = outputs.map((e) => e.value);
    const floored = { ...a, behaviourLogProbs: a.behaviourLogProbs.map((x, i) => (i === 0 ? -9999 : x)), lossMask: a.responseTokenIds.map(() => true) };
    const maskedOnly = { ...b, behaviourLogProbs: b.behaviourLogProbs.map(() => -9999), lossMask: b.responseTokenIds.map((_, i) => i !== 0) };
    await producer.emitBatch([
      { type: 'AgentOutput', value: floored },
      { type: 'AgentOutput', value: maskedOnly },
    ]);
    const messages = sent.flatMap((t) => t.messages);
    expect(messages).toHaveLength(2);
    expect(codec.decodeAs('AgentOutput', messages[0].value).behaviourLogProbs[0]).toBe(-9999);
    // The corpus outputs have two tokens; maskedOnly floors both but trains only the second: 1 + 1 tokens counted.
    expect(b.responseTokenIds).toHaveLength(2);
    expect(producer.floorLogProbs).toEqual({ outputs: 2, tokens: 2 });
    expect(seen[0]).toEqual({ outputId: a.outputId, policyId: a.policyId, tokens: 1 });
  });
});
