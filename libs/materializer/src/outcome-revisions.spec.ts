import { EventCodec, RawRecord } from '@srpo/events';
import { outcome } from '@srpo/testing';
import { latestOutcomeRevisionsFirst } from './outcome-revisions';

const codec = new EventCodec();
const rec = (offset: number, value: ReturnType<typeof outcome> | Buffer, key = (value as { episodeId?: string }).episodeId ?? 'x'): RawRecord => ({
  topic: 'p.episode-outcomes',
  partition: 0,
  offset,
  key: Buffer.from(key),
  value: Buffer.isBuffer(value) ? value : codec.encode('EpisodeOutcome', value),
  timestampMs: 1000 + offset,
});

describe('latestOutcomeRevisionsFirst (replay --rematerialize)', () => {
  it("puts each episode's latest revision in its first outcome's place, with that time and the latest's coordinates", () => {
    const records = [
      rec(0, outcome('e1', 0, { eventTimeMs: 1000 })),
      rec(1, outcome('e2', 1, { eventTimeMs: 1100 })),
      rec(2, outcome('e1', 0.5, { revision: 1, eventTimeMs: 3000 })),
      rec(3, outcome('e1', 1, { revision: 2, eventTimeMs: 9000 })),
      rec(4, outcome('e1', 1, { revision: 2, eventTimeMs: 9000 })),
      rec(5, Buffer.from('not avro'), 'e1'),
    ];
    const { records: out, revised } = latestOutcomeRevisionsFirst(records, codec);
    expect(revised).toBe(1);
    expect(out.map((r) => r.offset)).toEqual([3, 1, 2, 5]);
    const head = codec.decodeAs('EpisodeOutcome', out[0].value);
    expect([head.episodeId, head.outcomeReward, head.revision, head.eventTimeMs]).toEqual(['e1', 1, 2, 1000]);
    expect(out[0].timestampMs).toBe(1000);
    // The rest stay as they were: revision 1 is refused as superseded, the garbage as undecodable.
    expect(out.slice(1)).toEqual([records[1], records[2], records[5]]);
  });

  it('leaves a log without revisions untouched', () => {
    const records = [rec(0, outcome('e1', 0)), rec(1, outcome('e1', 0)), rec(2, outcome('e2', 1))];
    expect(latestOutcomeRevisionsFirst(records, codec)).toEqual({ records, revised: 0 });
  });
});
