import { ErrorCode, SrpoError, ValidationError } from '@srpo/core';
import { EventCodec, RawRecord, ReasonCode } from '@srpo/events';
import { TransactionalStore, type KeyValueStore } from './key-value-store';
import type { InputRecord, OutputRecord, Processor, ProcessorContext } from './processor';
import { decodeRecord, DeadLetterOriginal, StreamTask, TaskSink } from './stream-task';
import { transitionRecord as raw } from '@srpo/testing';

type S = { seen: KeyValueStore<number> };
const codec = new EventCodec();

/** Records its calls; reward -1 is refused, reward -2 fails retriably (a broker hiccup in a lookup). */
class Recorder implements Processor<S> {
  readonly name = 'recorder';
  readonly storeNames: 'seen'[] = ['seen'];
  readonly punctuations: number[] = [];
  constructor(readonly punctuationIntervalMs?: number) {}
  eventTime(record: InputRecord): number {
    return (record.event.value as { eventTimeMs: number }).eventTimeMs;
  }
  process(record: InputRecord, stores: S, ctx: ProcessorContext): void {
    const reward = record.event.type === 'Transition' ? record.event.value.reward : null;
    if (reward === -1) throw new ValidationError('Transition.reward', 'refused', { reasonCode: ReasonCode.INVALID_FIELD });
    if (reward === -2) throw new SrpoError(ErrorCode.UNAVAILABLE, 'lookup timed out', { retriable: true });
    stores.seen.put(`${record.source.topic}@${record.source.offset}`, ctx.streamTimeMs);
    ctx.count('seen_total', { topic: record.source.topic });
  }
  punctuate(_stores: S, ctx: ProcessorContext): void {
    this.punctuations.push(ctx.watermarkMs);
  }
}

function setup(processor: Recorder, inputs?: string[]) {
  const dead: { original: DeadLetterOriginal; reasonCode: string; details: Record<string, string> }[] = [];
  const counts: string[] = [];
  const outputs: OutputRecord[] = [];
  const sink: TaskSink = {
    emit: (o) => outputs.push(o),
    deadLetter: (original, reasonCode, _reason, details) => dead.push({ original, reasonCode, details }),
    count: (metric, labels) => counts.push(`${metric}${JSON.stringify(labels ?? {})}`),
  };
  const stores = { seen: new TransactionalStore<number>('seen') };
  const task = new StreamTask<S>(processor, 0, stores, sink, inputs ? { inputs } : {});
  const feed = (r: RawRecord) => task.feed(decodeRecord(codec, r));
  return { task, dead, counts, outputs, stores, feed };
}

describe('decodeRecord', () => {
  it('hands the processor the record’s Kafka timestamp, as read', () => {
    const r = { ...raw('in', 3, 5_000), timestampMs: 1_700_000_000_123 };
    const d = decodeRecord(codec, r);
    expect('record' in d && d.record.timestampMs).toBe(1_700_000_000_123);
    expect('record' in d && d.record.source).toEqual({ topic: 'in', partition: 0, offset: 3 });
  });
});

describe('StreamTask', () => {
  it('punctuates on the stream-time schedule: first at a finite watermark, then each time it moved by the interval', () => {
    const p = new Recorder(1_000);
    const { task, feed } = setup(p);
    const fired: boolean[] = [];
    for (const [i, t] of [100, 900, 1_099, 1_100, 1_150, 5_000].entries()) {
      feed(raw('a', i, t));
      fired.push(task.punctuate());
    }
    // 100 fires (first); 900, 1099 are under 100 + 1000; 1100 fires; 1150 is under; 5000 fires.
    expect(fired).toEqual([true, false, false, true, false, true]);
    expect(p.punctuations).toEqual([100, 1_100, 5_000]);
  });

  it('with interval 0 punctuates whenever the watermark moved, never twice at one watermark', () => {
    const p = new Recorder();
    const { task, feed } = setup(p);
    feed(raw('a', 0, 10));
    task.punctuate();
    task.punctuate();
    feed(raw('a', 1, 5)); // late: stream time stays 10
    task.punctuate();
    feed(raw('a', 2, 20));
    task.punctuate();
    expect(p.punctuations).toEqual([10, 20]);
  });

  it('holds the watermark at the slowest unread input, ignores caught-up inputs, and never exceeds stream time', () => {
    const p = new Recorder();
    const { task, feed } = setup(p, ['a', 'b']);
    feed(raw('a', 0, 100));
    expect(task.watermark()).toBe(-Infinity);
    expect(task.punctuate()).toBe(false);
    feed(raw('b', 0, 40));
    expect(task.watermark()).toBe(40);
    task.setUnread('b', false);
    expect(task.watermark()).toBe(100);
    task.setUnread('a', false);
    expect(task.watermark()).toBe(100);
  });

  it('dead-letters a refusal and undecodable bytes without moving the clock, and counts under the processor’s own names', () => {
    const p = new Recorder();
    const { task, feed, dead, counts, stores } = setup(p, ['a']);
    feed(raw('a', 0, 10));
    feed(raw('a', 1, 1_000_000, -1));
    feed({ topic: 'a', partition: 0, offset: 2, key: Buffer.from([0xff, 0xfe]), value: Buffer.from([0xc3, 0x01, 0]), timestampMs: 0 });
    expect(task.clock()).toEqual({ streamTimeMs: 10, maxEventMs: { a: 10 } });
    expect(dead.map((d) => [d.original.source.offset, d.reasonCode, d.details.field])).toEqual([
      [1, ReasonCode.INVALID_FIELD, 'Transition.reward'],
      [2, ReasonCode.DECODE_TRUNCATED, undefined],
    ]);
    // Undecodable bytes keep their key as read (not valid UTF-8 here), a decoded record its string key.
    expect(dead[1].original.key).toEqual(Buffer.from([0xff, 0xfe]));
    expect(dead[0].original.key).toBe('e');
    expect(counts).toEqual(['seen_total{"topic":"a"}']);
    expect(stores.seen.get('a@0')).toBe(10);
  });

  it('rethrows a retriable failure with the record’s time taken back, for the runtime to retry its unit of work', () => {
    const { task, feed } = setup(new Recorder(), ['a']);
    feed(raw('a', 0, 10));
    expect(() => feed(raw('a', 1, 500, -2))).toThrow('lookup timed out');
    expect(task.clock()).toEqual({ streamTimeMs: 10, maxEventMs: { a: 10 } });
  });

  it('snapshots and restores its clock (an aborted transaction) and resumes from a persisted one (a restart)', () => {
    const p = new Recorder(1_000);
    const first = setup(p, ['a']);
    first.feed(raw('a', 0, 2_000));
    first.task.setUnread('a', false);
    first.task.punctuate();
    const committed = first.task.clock();
    expect(committed).toEqual({ streamTimeMs: 2_000, maxEventMs: { a: 2_000 }, punctuatedAtMs: 2_000 });
    first.feed(raw('a', 1, 9_000));
    first.task.punctuate();
    first.task.restoreClock(committed);
    expect(first.task.clock()).toEqual(committed);

    const p2 = new Recorder(1_000);
    const restarted = new StreamTask<S>(
      p2,
      0,
      { seen: new TransactionalStore<number>('seen') },
      { emit: () => undefined, deadLetter: () => undefined, count: () => undefined },
      { inputs: ['a'], clock: committed },
    );
    restarted.setUnread('a', false);
    // The schedule continues from the persisted firing: 2500 is under 2000 + 1000.
    restarted.advanceStreamTime(2_500);
    expect(restarted.punctuate()).toBe(false);
    restarted.advanceStreamTime(3_000);
    expect(restarted.punctuate()).toBe(true);
    expect(p2.punctuations).toEqual([3_000]);
  });
});
