import { PartitionBuffers } from './partition-buffers';

const rec = (offset: number) => ({ offset, key: null, value: Buffer.from(String(offset)), timestampMs: offset });
const offsets = (t: { records: { offset: number }[] } | undefined) => t?.records.map((r) => r.offset);

describe('PartitionBuffers', () => {
  it('keeps one copy of each offset when a stream rewinds and re-delivers', () => {
    const b = new PartitionBuffers();
    for (const o of [0, 1, 2, 3]) b.push('t', 0, rec(o));
    for (const o of [1, 2, 3, 4]) b.push('t', 0, rec(o)); // rewound to 1
    expect(b.size).toBe(5);
    expect(offsets(b.take())).toEqual([0, 1, 2, 3, 4]);
    expect(b.take()).toBeUndefined();
  });

  it('drops records below the resolved position and gives back what a batch left', () => {
    const b = new PartitionBuffers();
    for (const o of [10, 11, 12]) b.push('t', 1, rec(o));
    const taken = b.take();
    b.resolve('t', 1, 10);
    b.push('t', 1, rec(13));
    b.push('t', 1, rec(9)); // re-delivery below the position: dropped, and it does not clear 13
    b.giveBack(taken as NonNullable<typeof taken>);
    expect(offsets(b.take())).toEqual([11, 12, 13]);
  });

  it('does not give back a batch whose partition was sought meanwhile', () => {
    const b = new PartitionBuffers();
    for (const o of [5, 6]) b.push('t', 0, rec(o));
    const taken = b.take();
    b.seek('t', 0, 5);
    b.giveBack(taken as NonNullable<typeof taken>);
    expect(b.size).toBe(0);
    b.push('t', 0, rec(4)); // before the sought position
    b.push('t', 0, rec(5));
    expect(offsets(b.take())).toEqual([5]);
  });

  it('hands partitions over in turn and forgets revoked ones', () => {
    const b = new PartitionBuffers();
    b.push('a', 0, rec(0));
    b.push('a', 1, rec(0));
    b.push('a', 2, rec(0));
    b.retainPartitions(new Set([0, 2]));
    expect(b.size).toBe(2);
    const first = b.take();
    const second = b.take();
    expect([first?.partition, second?.partition].sort()).toEqual([0, 2]);
  });
});
