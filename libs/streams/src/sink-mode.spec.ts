import type { Kafka } from 'kafkajs';
import { ErrorCode, SrpoError, ValidationError } from '@srpo/core';
import { EventCodec } from '@srpo/events';
import { transitionValue } from '@srpo/testing';
import type { ConsumerHandlers, FetchedRecord, GroupConsumer, StreamAdmin, StreamClient, TransactionalProducer } from './client/stream-client';
import { ConsumerRunner } from './consumer-runner';
import { SinkModeOptions, SinkPartitions } from './sink-mode';

const codec = new EventCodec();

/** A Transition record whose transitionId is `id`. */
function record(offset: number, id: string): FetchedRecord {
  return { offset, key: Buffer.from('e'), value: transitionValue(id), timestampMs: 0 };
}

function garbage(offset: number): FetchedRecord {
  return { offset, key: Buffer.from('e'), value: Buffer.from('not an event'), timestampMs: 0 };
}

/** A group consumer driven by the test: it hands over the batches it is told to, and records commits. */
class FakeConsumer implements GroupConsumer {
  handlers?: ConsumerHandlers;
  readonly commits: number[] = [];
  readonly resolved: number[] = [];
  paused = false;
  stopped = false;
  heartbeats = 0;
  /** When set, heartbeats fail with it (the broker refusing them: a rebalance began). */
  heartbeatError?: Error;

  async start(handlers: ConsumerHandlers): Promise<void> {
    this.handlers = handlers;
    handlers.onAssignment(new Set([0]));
  }
  seek(): void {}
  async commit(_topic: string, _partition: number, nextOffset: number): Promise<void> {
    this.commits.push(nextOffset);
  }
  pause(): void {
    this.paused = true;
  }
  resume(): void {
    this.paused = false;
  }
  async stop(): Promise<void> {
    this.stopped = true;
  }
  deliver(records: FetchedRecord[]): Promise<void> {
    if (!this.handlers) throw new Error('not started');
    return this.handlers.onBatch({
      topic: 'groups',
      partition: 0,
      records,
      isActive: () => !this.stopped,
      resolve: (offset) => this.resolved.push(offset),
      heartbeat: async () => {
        this.heartbeats++;
        if (this.heartbeatError) throw this.heartbeatError;
      },
    });
  }
}

class FakeClient implements StreamClient {
  readonly name = 'kafkajs' as const;
  readonly consumers: FakeConsumer[] = [];
  groupConsumer(): GroupConsumer {
    const c = new FakeConsumer();
    this.consumers.push(c);
    return c;
  }
  transactionalProducer(): Promise<TransactionalProducer> {
    throw new Error('sink mode has no transactions');
  }
  admin(): Promise<StreamAdmin> {
    throw new Error('sink mode has no admin');
  }
  isFencing(): boolean {
    return false;
  }
  isRetriable(): boolean {
    return false;
  }
}

interface Sent {
  topic: string;
  key: Buffer | null;
  value: Buffer;
}

function setup(overrides: Partial<SinkModeOptions<string>> = {}) {
  const client = new FakeClient();
  const written: string[][] = [];
  const counts: string[] = [];
  const dead: Sent[] = [];
  const kafka = {
    producer: () => ({
      connect: async () => undefined,
      disconnect: async () => undefined,
      send: async (r: { topic: string; messages: { key: Buffer | null; value: Buffer }[] }) => {
        for (const m of r.messages) dead.push({ topic: r.topic, key: m.key, value: m.value });
      },
    }),
  } as unknown as Kafka;
  const runner = ConsumerRunner.sink<string>({
    groupId: 'learner-test',
    kafka,
    client,
    codec,
    topic: 'groups',
    select: (r) => (r.event.type === 'Transition' && !r.event.value.transitionId.startsWith('other') ? r.event.value.transitionId : null),
    batchSize: (pending) => (pending.length >= 2 ? 2 : 0),
    write: async (items) => {
      written.push([...items]);
    },
    retryDelayMs: 1,
    count: (metric) => counts.push(metric),
    ...overrides,
  });
  const consumer = () => client.consumers[client.consumers.length - 1];
  return { runner, client, consumer, written, counts, dead };
}

async function until(condition: () => boolean): Promise<void> {
  for (let i = 0; i < 200 && !condition(); i++) await new Promise((r) => setTimeout(r, 5));
  if (!condition()) throw new Error('condition not met');
}

describe('ConsumerRunner sink mode', () => {
  it('writes complete batches in log order and commits, after each write, the first record not yet written', async () => {
    const { runner, consumer, written } = setup();
    await runner.start();
    await consumer().deliver([record(0, 'a'), record(1, 'other-x'), record(2, 'b'), record(3, 'c')]);
    expect(written).toEqual([['a', 'b']]);
    // After the write: c (offset 3) is pending, so 3 is committed; nothing more at the batch end.
    expect(consumer().commits).toEqual([3]);
    expect(consumer().resolved).toEqual([0, 1, 2, 3]);
    await consumer().deliver([record(4, 'd'), record(5, 'other-y')]);
    expect(written).toEqual([
      ['a', 'b'],
      ['c', 'd'],
    ]);
    // Written, then the skipped record read after it is committed at the batch end.
    expect(consumer().commits).toEqual([3, 5, 6]);
    await runner.stop();
  });

  it('dead-letters undecodable records with a reason before their offset is committed', async () => {
    const { runner, consumer, dead, counts } = setup({ deadLetterTopic: 'dlq', processorName: 'learner' });
    await runner.start();
    await consumer().deliver([garbage(0), record(1, 'a')]);
    expect(dead).toHaveLength(1);
    const dl = codec.decode(dead[0].value);
    expect(dl.type).toBe('DeadLetter');
    const value = dl.value as { reasonCode: string; processor: string; source: { offset: number } };
    expect(value.processor).toBe('learner');
    expect(value.source.offset).toBe(0);
    expect(value.reasonCode).toBeTruthy();
    expect(counts).toContain('deadletter_total');
    // a waits for a complete batch, and the dead letter's offset is before it: nothing is committed yet.
    expect(consumer().commits).toEqual([]);
    await runner.stop();
  });

  it('logs and skips undecodable records without a dead-letter topic', async () => {
    const { runner, consumer, dead, counts } = setup();
    await runner.start();
    await consumer().deliver([garbage(0)]);
    expect(dead).toEqual([]);
    expect(counts).toContain('deadletter_total');
    expect(consumer().commits).toEqual([1]);
    await runner.stop();
  });

  it('retries a retriable sink failure in place, heartbeating, and commits only after the write', async () => {
    let failures = 2;
    const written: string[][] = [];
    const { runner, consumer, counts } = setup({
      write: async (items) => {
        if (failures-- > 0) throw new SrpoError(ErrorCode.UNAVAILABLE, 'database away', { retriable: true });
        written.push([...items]);
      },
    });
    await runner.start();
    await consumer().deliver([record(0, 'a'), record(1, 'b')]);
    expect(written).toEqual([['a', 'b']]);
    expect(counts.filter((c) => c === 'sink_retries_total')).toHaveLength(2);
    expect(counts).toContain('sink_batches_total');
    expect(consumer().heartbeats).toBeGreaterThanOrEqual(2);
    expect(consumer().commits).toEqual([2, 2]);
    await runner.stop();
  });

  it('lends the write a keepAlive that heartbeats and lets due timers run, and never throws (the commit after the write decides)', async () => {
    const seen: { heartbeats: number; timerRan: boolean }[] = [];
    const { runner, consumer } = setup({
      write: async (_items, context) => {
        const before = consumer().heartbeats;
        for (let i = 0; i < 3; i++) {
          let timerRan = false;
          setTimeout(() => (timerRan = true), 0);
          // Computing past the timer's due time (1 ms), as an update's piece does. The monotonic
          // clock (libuv's timers use it too): a wall-clock step once ended a Date.now() wait early.
          const due = performance.now() + 3;
          while (performance.now() < due);
          if (i === 1) consumer().heartbeatError = new Error('The group is rebalancing');
          await context.keepAlive();
          consumer().heartbeatError = undefined;
          seen.push({ heartbeats: consumer().heartbeats - before, timerRan });
        }
      },
    });
    await runner.start();
    await consumer().deliver([record(0, 'a'), record(1, 'b')]);
    // One client heartbeat per keepAlive, a timer's turn each time, the refused one swallowed.
    expect(seen).toEqual([
      { heartbeats: 1, timerRan: true },
      { heartbeats: 2, timerRan: true },
      { heartbeats: 3, timerRan: true },
    ]);
    expect(consumer().commits).toEqual([2, 2]);
    await runner.stop();
  });

  it('stops the consumer on a non-retriable failure; the recreated consumer redelivers the unwritten batch', async () => {
    let fail = true;
    const written: string[][] = [];
    const { runner, client, consumer, counts } = setup({
      write: async (items) => {
        if (fail) throw new ValidationError('group', 'refused');
        written.push([...items]);
      },
    });
    await runner.start();
    const first = consumer();
    await expect(first.deliver([record(0, 'a'), record(1, 'b')])).rejects.toThrow('refused');
    expect(first.commits).toEqual([]);
    // The client reports the consumer dead; the runner replaces it and reads from the committed offset.
    fail = false;
    first.handlers?.onFatal(new Error('eachBatch failed'));
    await until(() => client.consumers.length === 2 && client.consumers[1].handlers !== undefined);
    expect(first.stopped).toBe(true);
    expect(counts).toContain('sink_consumer_restarts_total');
    await consumer().deliver([record(0, 'a'), record(1, 'b')]);
    expect(written).toEqual([['a', 'b']]);
    expect(consumer().commits).toEqual([2, 2]);
    await runner.stop();
  });

  it('redelivers a batch written but not committed (a crash between write and commit)', async () => {
    const { runner, consumer, written } = setup();
    await runner.start();
    const c = consumer();
    c.commit = async () => {
      throw new Error('process killed before the commit');
    };
    await expect(c.deliver([record(0, 'a'), record(1, 'b')])).rejects.toThrow('killed');
    // A new process (a new runner, nothing in memory) reads from the last committed offset: the sink sees the batch again.
    const next = setup();
    await next.runner.start();
    await next.consumer().deliver([record(0, 'a'), record(1, 'b')]);
    expect(written).toEqual([['a', 'b']]);
    expect(next.written).toEqual([['a', 'b']]);
    await runner.stop();
    await next.runner.stop();
  });

  it('skips records read before and keeps pending items across a rebalance that keeps the partition', async () => {
    const { runner, consumer, written } = setup();
    await runner.start();
    await consumer().deliver([record(0, 'a')]);
    consumer().handlers?.onAssignment(new Set([0]));
    // The client rewinds to the committed offset (0): a is not read twice.
    await consumer().deliver([record(0, 'a'), record(1, 'b')]);
    expect(written).toEqual([['a', 'b']]);
    expect(consumer().resolved).toEqual([0, 0, 1]);
    consumer().handlers?.onAssignment(new Set([1]));
    await consumer().deliver([record(2, 'c')]);
    expect(written).toEqual([['a', 'b']]);
    await runner.stop();
  });

  it('pauses and resumes the consumer, and a recreated consumer starts paused', async () => {
    const { runner, client, consumer } = setup();
    await runner.start();
    runner.pause();
    expect(runner.isPaused).toBe(true);
    expect(consumer().paused).toBe(true);
    consumer().handlers?.onFatal(new Error('crash'));
    await until(() => client.consumers.length === 2);
    expect(consumer().paused).toBe(true);
    runner.resume();
    expect(consumer().paused).toBe(false);
    expect(runner.isPaused).toBe(false);
    await runner.stop();
  });
});

describe('SinkPartitions', () => {
  it('commits the first pending offset, or everything read when nothing is pending', () => {
    const s = new SinkPartitions<string>((p) => (p.length >= 2 ? 2 : 0));
    expect(s.commitOffset(0)).toBeUndefined();
    s.read(0, 5, null);
    expect(s.commitOffset(0)).toBe(6);
    s.read(0, 6, 'a');
    s.read(0, 7, null);
    expect(s.commitOffset(0)).toBe(6);
    expect(s.nextBatch(0)).toBeUndefined();
    s.read(0, 8, 'b');
    expect(s.nextBatch(0)).toEqual(['a', 'b']);
    s.written(0, 2);
    expect(s.commitOffset(0)).toBe(9);
    expect(s.wasRead(0, 8)).toBe(true);
    expect(s.wasRead(0, 9)).toBe(false);
    s.retain(new Set([1]));
    expect(s.wasRead(0, 8)).toBe(false);
  });
});
