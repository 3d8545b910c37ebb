import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import type { AgentEvent } from '@srpo/events';
import { ErrorCode, SrpoError } from '@srpo/core';
import { EventSpool } from './event-spool';

const batch = (id: string): AgentEvent[] => [
  { type: 'EpisodeOutcome', value: { episodeId: id, taskId: 't', outcomeReward: 1, success: true, verifier: 'v', turns: 1, eventTimeMs: 1 } },
];
const ids = (sent: AgentEvent[][]) => sent.map((b) => (b[0].value as { episodeId: string }).episodeId);

describe('event spool', () => {
  const dir = () => fs.mkdtempSync(path.join(os.tmpdir(), 'spool-'));

  it('replays batches in the order they were spooled, stopping at a failure and resuming after it', async () => {
    const d = dir();
    const sent: AgentEvent[][] = [];
    let up = false;
    const spool = new EventSpool(
      d,
      async (events) => {
        if (!up) throw new Error('broker down');
        sent.push(events);
      },
      60_000,
    );
    spool.open();
    spool.append(batch('a'));
    spool.append(batch('b'));
    await spool.drain();
    expect([spool.pending, sent.length]).toEqual([2, 0]);
    up = true;
    spool.append(batch('c'));
    await spool.drain();
    expect(ids(sent)).toEqual(['a', 'b', 'c']);
    expect(spool.pending).toBe(0);
    // Drained: the files start afresh.
    expect(fs.readFileSync(path.join(d, 'events.jsonl'), 'utf8')).toBe('');
    await spool.close();
  });

  it('survives a restart: what was spooled and not acknowledged is sent by the next process, nothing acknowledged twice', async () => {
    const d = dir();
    let calls = 0;
    const first = new EventSpool(
      d,
      async () => {
        calls++;
        if (calls > 1) throw new Error('broker went away');
      },
      60_000,
    );
    first.open();
    first.append(batch('a'));
    first.append(batch('b'));
    first.append(batch('c'));
    await first.drain();
    expect(first.pending).toBe(2);
    await first.close();
    const sent: AgentEvent[][] = [];
    const second = new EventSpool(d, async (events) => void sent.push(events), 60_000);
    second.open();
    expect(second.pending).toBe(2);
    await second.drain();
    expect(ids(sent)).toEqual(['b', 'c']);
    await second.close();
  });

  it('refuses an append past its byte budget with a retriable UNAVAILABLE, and takes appends again once drained', async () => {
    const d = dir();
    let up = false;
    const line = Buffer.byteLength(JSON.stringify(batch('a'))) + 1;
    const spool = new EventSpool(
      d,
      async () => {
        if (!up) throw new Error('broker down');
      },
      { retryMs: 60_000, maxBytes: 2 * line },
    );
    spool.open();
    spool.append(batch('a'));
    spool.append(batch('b'));
    let refusal: unknown;
    try {
      spool.append(batch('c'));
    } catch (e) {
      refusal = e;
    }
    expect(refusal).toBeInstanceOf(SrpoError);
    expect([(refusal as SrpoError).code, (refusal as SrpoError).retriable]).toEqual([ErrorCode.UNAVAILABLE, true]);
    expect((refusal as Error).message).toMatch(/spool is full \(\d+ of \d+ bytes, 2 batches waiting for Kafka\)/);
    expect([spool.pending, fs.statSync(path.join(d, 'events.jsonl')).size]).toEqual([2, 2 * line]);
    up = true;
    await spool.drain();
    spool.append(batch('c'));
    expect(spool.pending).toBe(1);
    await spool.close();
  });

  it('moves a batch the broker refuses for good (MESSAGE_TOO_LARGE, wrapped as kafkajs does) to rejected.jsonl and goes on', async () => {
    const d = dir();
    const sent: AgentEvent[][] = [];
    // kafkajs: KafkaJSNonRetriableError whose cause is the protocol error.
    const tooLarge = Object.assign(new Error('The request included a message larger than the max message size the server will accept'), {
      name: 'KafkaJSNonRetriableError',
      retriable: false,
      cause: Object.assign(new Error('The request included a message larger than the max message size the server will accept'), {
        name: 'KafkaJSProtocolError',
        type: 'MESSAGE_TOO_LARGE',
        retriable: false,
      }),
    });
    // kafkajs, broker down, retries spent: not retriable either, but the cause is a connection error: retried.
    const down = Object.assign(new Error('Connection error'), {
      name: 'KafkaJSNumberOfRetriesExceeded',
      retriable: false,
      cause: Object.assign(new Error('connect ECONNREFUSED'), { name: 'KafkaJSConnectionError', retriable: true }),
    });
    let failures = [down];
    const spool = new EventSpool(
      d,
      async (events) => {
        const id = (events[0].value as { episodeId: string }).episodeId;
        const f = failures.shift();
        if (f) throw f;
        if (id === 'big') throw tooLarge;
        sent.push(events);
      },
      60_000,
    );
    spool.open();
    for (const id of ['a', 'big', 'b']) spool.append(batch(id));
    await spool.drain();
    // The broker was down: nothing moved aside, all waiting.
    expect([spool.pending, spool.totals.rejected]).toEqual([3, 0]);
    failures = [];
    await spool.drain();
    expect(ids(sent)).toEqual(['a', 'b']);
    expect([spool.pending, spool.totals.rejected]).toEqual([0, 1]);
    const rejected = fs
      .readFileSync(path.join(d, 'rejected.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { error: string; batch: AgentEvent[] });
    expect(rejected.map((r) => [r.error, ids([r.batch])[0]])).toEqual([
      ['The request included a message larger than the max message size the server will accept', 'big'],
    ]);
    await spool.close();
  });

  it('cuts a torn last line left by a crash mid-append, so the next append starts on a line', async () => {
    const d = dir();
    const first = new EventSpool(d, async () => Promise.reject(new Error('down')), 60_000);
    first.open();
    first.append(batch('a'));
    await first.close();
    // A crash mid-append left half a line.
    fs.appendFileSync(path.join(d, 'events.jsonl'), '[{"type":"EpisodeOu');
    const sent: AgentEvent[][] = [];
    const second = new EventSpool(d, async (events) => void sent.push(events), 60_000);
    second.open();
    expect(second.pending).toBe(1);
    second.append(batch('b'));
    await second.drain();
    expect(ids(sent)).toEqual(['a', 'b']);
    await second.close();
  });
});
