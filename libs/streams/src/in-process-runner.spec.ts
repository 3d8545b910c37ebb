import { ValidationError } from '@srpo/core';
import { EventCodec, RawRecord, ReasonCode } from '@srpo/events';
import { InProcessSink, InProcessTask, mergeByEventTime, recordEventTime } from './in-process-runner';
import { decodeRecord } from './stream-task';
import { transitionRecord } from '@srpo/testing';
import type { KeyValueStore } from './key-value-store';
import type { InputRecord, Processor, ProcessorContext } from './processor';

type S = { seen: KeyValueStore<number> };

/** Records every call it gets; a transition with reward -1 is refused as invalid. */
class Recorder implements Processor<S> {
  readonly name = 'recorder';
  readonly storeNames: 'seen'[] = ['seen'];
  readonly punctuations: number[] = [];
  eventTime(record: InputRecord): number {
    return (record.event.value as { eventTimeMs: number }).eventTimeMs;
  }
  process(record: InputRecord, stores: S, ctx: ProcessorContext): void {
    if (record.event.type === 'Transition' && record.event.value.reward === -1)
      throw new ValidationError('Transition.reward', 'refused', { reasonCode: ReasonCode.INVALID_FIELD });
    stores.seen.put(`${record.source.topic}@${record.source.offset}`, ctx.streamTimeMs);
  }
  punctuate(_stores: S, ctx: ProcessorContext): void {
    this.punctuations.push(ctx.watermarkMs);
  }
}

const codec = new EventCodec();

function sink(): InProcessSink & { dead: string[] } {
  const dead: string[] = [];
  return { dead, emit: () => undefined, deadLetter: (_t, r, code) => dead.push(`${r.source.topic}@${r.source.offset}:${code}`) };
}

describe('mergeByEventTime', () => {
  it('keeps each input in offset order and otherwise takes the smallest event time first, ties in input order', () => {
    const a = [transitionRecord('a', 0, 10), transitionRecord('a', 1, 5), transitionRecord('a', 2, 30)];
    const b = [transitionRecord('b', 0, 10), transitionRecord('b', 1, 20)];
    const order = [...mergeByEventTime([a, b], (r) => decodeRecord(codec, r), recordEventTime)].map((d) =>
      'record' in d ? `${d.record.source.topic}${d.record.source.offset}` : '?',
    );
    expect(order).toEqual(['a0', 'a1', 'b0', 'b1', 'a2']);
  });

  it('decodes each record once, and undecodable ones go as soon as they are next', () => {
    let calls = 0;
    const bad: RawRecord = { topic: 'b', partition: 0, offset: 0, key: null, value: Buffer.from([1, 2, 3]), timestampMs: 0 };
    const out = [...mergeByEventTime([[transitionRecord('a', 0, 10)], [bad]], (r) => (calls++, decodeRecord(codec, r)), recordEventTime)];
    expect(calls).toBe(2);
    expect(out.map((d) => ('record' in d ? 'ok' : d.reasonCode))).toEqual([ReasonCode.DECODE_BAD_MAGIC, 'ok']);
  });
});

describe('InProcessTask', () => {
  it('holds the watermark at the slowest input with unread records, as the live runner does, and releases it at the end', () => {
    const processor = new Recorder();
    const s = sink();
    const task = new InProcessTask<S>(
      processor,
      0,
      s,
      new Map([
        ['a', 2],
        ['b', 1],
      ]),
    );
    const feed = (r: RawRecord) => task.feedDecoded(decodeRecord(codec, r));
    feed(transitionRecord('a', 0, 100));
    // b has an unread record and nothing read yet: no deadline may fire.
    expect(task.watermark()).toBe(-Infinity);
    feed(transitionRecord('b', 0, 50));
    // b is read to its end of range: only a (at 100) holds it back, capped by stream time.
    expect(task.watermark()).toBe(100);
    feed(transitionRecord('a', 1, 300));
    expect(task.watermark()).toBe(300);
    task.finish();
    expect(processor.punctuations).toEqual([100, 300]);
    expect(task.stores.seen.get('b@0')).toBe(100);
  });

  it('dead-letters non-retriable processor errors and undecodable bytes, and goes on', () => {
    const s = sink();
    const task = new InProcessTask<S>(new Recorder(), 0, s);
    task.feedDecoded(decodeRecord(codec, transitionRecord('a', 0, 10, -1)));
    task.feedDecoded(decodeRecord(codec, { topic: 'a', partition: 0, offset: 1, key: null, value: Buffer.from([0xc3, 0x01, 0]), timestampMs: 0 }));
    task.feedDecoded(decodeRecord(codec, transitionRecord('a', 2, 20)));
    expect(s.dead).toEqual([`a@0:${ReasonCode.INVALID_FIELD}`, `a@1:${ReasonCode.DECODE_TRUNCATED}`]);
    expect([...task.stores.seen.entries()].map(([k]) => k)).toEqual(['a@2']);
  });

  it('does not let a refused record move stream time or the watermark of its input', () => {
    const s = sink();
    const proc = new Recorder();
    const task = new InProcessTask<S>(proc, 0, s, new Map([['a', 3]]));
    task.feedDecoded(decodeRecord(codec, transitionRecord('a', 0, 10)));
    // Refused, 990 ms ahead: were it to count, stream time would jump to 1000.
    task.feedDecoded(decodeRecord(codec, transitionRecord('a', 1, 1000, -1)));
    expect(task.streamTimeMs).toBe(10);
    expect(task.watermark()).toBe(10);
    task.feedDecoded(decodeRecord(codec, transitionRecord('a', 2, 20)));
    // The next valid record sees the stream time of the last accepted one, then its own.
    expect(task.stores.seen.get('a@2')).toBe(20);
    expect(task.streamTimeMs).toBe(20);
    expect(Math.max(...proc.punctuations)).toBeLessThanOrEqual(20);
  });
});
