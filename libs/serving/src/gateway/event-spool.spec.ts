import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import type { AgentEvent } from '@srpo/events';
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
});
