import { jsonSerde, SourceBacked, sourceBackedSerde, sourcedItems, TransactionalStore } from './key-value-store';

function records(store: TransactionalStore<unknown>): [string, string | null][] {
  return store.changelogRecords().map((r) => [r.key, r.value === null ? null : r.value.toString('utf8')]);
}

describe('TransactionalStore.changelogRecords', () => {
  it('writes a put, and a tombstone only for keys the changelog holds', () => {
    const store = new TransactionalStore<number>('s', jsonSerde<number>());
    store.restore('a', Buffer.from('1'));
    store.restore('b', Buffer.from('2'));
    store.put('c', 3);
    store.delete('a');
    // Put and deleted in one transaction: never reached the changelog, so nothing to write.
    store.put('d', 4);
    store.delete('d');
    // Deleting a key that was never there writes nothing either.
    store.delete('e');
    expect(records(store as TransactionalStore<unknown>)).toEqual([
      ['c', '3'],
      ['a', null],
    ]);
    store.commit();
    expect([...store.entries()]).toEqual([
      ['b', 2],
      ['c', 3],
    ]);
  });

  it('tombstones a key committed by an earlier transaction', () => {
    const store = new TransactionalStore<number>('s', jsonSerde<number>());
    store.put('x', 7);
    expect(records(store as TransactionalStore<unknown>)).toEqual([['x', '7']]);
    store.commit();
    store.delete('x');
    expect(records(store as TransactionalStore<unknown>)).toEqual([['x', null]]);
    store.rollback();
    expect(store.get('x')).toBe(7);
  });

  it('restoring the records it writes reproduces the committed state', () => {
    const live = new TransactionalStore<number>('s', jsonSerde<number>());
    const replica = new TransactionalStore<number>('s', jsonSerde<number>());
    const steps: ((s: TransactionalStore<number>) => void)[] = [
      (s) => {
        s.put('a', 1);
        s.put('b', 2);
        s.delete('b');
      },
      (s) => {
        s.delete('a');
        s.put('c', 3);
      },
      (s) => {
        s.put('a', 4);
        s.delete('c');
        s.delete('zz');
      },
    ];
    for (const step of steps) {
      step(live);
      for (const r of live.changelogRecords()) replica.restore(r.key, r.value);
      live.commit();
    }
    expect([...replica.entries()]).toEqual([...live.entries()]);
    expect([...live.entries()]).toEqual([['a', 4]]);
  });
});

describe('sourceBackedSerde', () => {
  it('writes the coordinates and fields without the bytes or their decoded form, in key order', () => {
    const serde = sourceBackedSerde<{ source: { topic: string; partition: number; offset: number }; raw?: Buffer; decoded?: unknown; digest: string }>();
    const value = { source: { topic: 't', partition: 1, offset: 42 }, raw: Buffer.from([1, 2, 3]), decoded: { setId: 's' }, digest: 'ab' };
    const bytes = serde.serialize(value);
    expect(bytes.toString('utf8')).toBe('{"source":{"topic":"t","partition":1,"offset":42},"digest":"ab"}');
    // The same bytes as the former replacer-only serialization.
    expect(bytes.toString('utf8')).toBe(JSON.stringify(value, (k, v: unknown) => (k === 'raw' || k === 'decoded' ? undefined : v)));
    expect(serde.deserialize(bytes)).toEqual({ source: { topic: 't', partition: 1, offset: 42 }, digest: 'ab' });
    // The value in the store keeps its bytes.
    expect(value.raw.length).toBe(3);
  });
});

describe('TransactionalStore secondary indexes', () => {
  type Owner = { members: string[] };
  const make = () => new TransactionalStore<Owner>('owners', jsonSerde<Owner>(), { indexes: { member: (v) => v.members } });

  it('finds a value by each key it lists, including keys added in place', () => {
    const store = make();
    const a: Owner = { members: ['x'] };
    store.put('a', a);
    expect(store.lookup('member', 'x')).toBe('a');
    a.members.push('y');
    store.put('a', a);
    expect(store.lookup('member', 'y')).toBe('a');
    // A key dropped from a value mutated in place is unindexed: the old keys are remembered, not recomputed.
    a.members.splice(0, 1);
    store.put('a', a);
    expect(store.lookup('member', 'x')).toBeUndefined();
    expect(store.lookup('member', 'y')).toBe('a');
    store.delete('a');
    expect(store.lookup('member', 'y')).toBeUndefined();
    expect(() => store.lookup('nope', 'y')).toThrow('store has no index "nope"');
  });

  it('rolls back to the committed values and rebuilds from restored changelog records', () => {
    const store = make();
    store.restore('a', Buffer.from(JSON.stringify({ members: ['x'] })));
    store.restore('b', Buffer.from(JSON.stringify({ members: ['z'] })));
    store.restore('b', null);
    expect(store.lookup('member', 'x')).toBe('a');
    expect(store.lookup('member', 'z')).toBeUndefined();
    store.put('a', { members: ['w'] });
    store.put('c', { members: ['v'] });
    store.delete('a');
    expect(store.lookup('member', 'x')).toBeUndefined();
    store.rollback();
    expect(store.lookup('member', 'x')).toBe('a');
    expect(store.lookup('member', 'w')).toBeUndefined();
    expect(store.lookup('member', 'v')).toBeUndefined();
    // The index is derived: nothing about it reaches the changelog.
    store.put('c', { members: ['v'] });
    expect(records(store as TransactionalStore<unknown>)).toEqual([['c', '{"members":["v"]}']]);
  });

  it('lets the later of two values listing one key win, and keeps it when the earlier goes', () => {
    const store = make();
    store.put('a', { members: ['k'] });
    store.put('b', { members: ['k'] });
    expect(store.lookup('member', 'k')).toBe('b');
    store.delete('a');
    expect(store.lookup('member', 'k')).toBe('b');
  });
});

describe('sourcedItems', () => {
  it('lists the records of a value, of a list, and none of a value stored before its store was source-backed', () => {
    const source = { topic: 't', partition: 0, offset: 3 };
    expect(sourcedItems({ source })).toEqual([{ source }]);
    expect(sourcedItems({ sourced: [{ source }, { source: { ...source, offset: 4 } }] }).map((v) => v.source.offset)).toEqual([3, 4]);
    expect(sourcedItems({ setIds: ['a'] } as unknown as SourceBacked)).toEqual([]);
  });
});

describe('TransactionalStore schedule', () => {
  type Job = { at: number | null };
  const make = () => new TransactionalStore<Job>('jobs', jsonSerde<Job>(), { schedule: (v) => v.at ?? undefined });

  it('returns the keys due by a time, earliest first, until a write moves them', () => {
    const store = make();
    store.put('late', { at: 300 });
    store.put('early', { at: 100 });
    store.put('never', { at: null });
    store.put('tie-a', { at: 200 });
    store.put('tie-b', { at: 200 });
    expect(store.due(99)).toEqual([]);
    expect(store.due(200)).toEqual(['early', 'tie-a', 'tie-b']);
    // Nothing was written: still due.
    expect(store.due(250)).toEqual(['early', 'tie-a', 'tie-b']);
    store.put('early', { at: 1_000 });
    store.delete('tie-a');
    store.put('tie-b', { at: null });
    expect(store.due(300)).toEqual(['late']);
    expect(() => new TransactionalStore<Job>('plain').due(1)).toThrow('store has no schedule');
  });

  it('rolls back to the committed due times and rebuilds them on restore', () => {
    const store = make();
    store.restore('a', Buffer.from(JSON.stringify({ at: 10 })));
    store.restore('b', Buffer.from(JSON.stringify({ at: 20 })));
    store.restore('b', null);
    expect(store.due(100)).toEqual(['a']);
    store.put('a', { at: 500 });
    store.put('c', { at: 5 });
    expect(store.due(100)).toEqual(['c']);
    store.rollback();
    expect(store.due(100)).toEqual(['a']);
  });

  it('agrees with a scan of every value over many random writes', () => {
    const store = make();
    // A small linear congruential generator: the same sequence on every run.
    let seed = 12345;
    const rand = (n: number) => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed % n;
    };
    for (let step = 0; step < 20_000; step++) {
      const key = `k${rand(300)}`;
      const op = rand(10);
      if (op < 6) store.put(key, { at: rand(5) === 0 ? null : rand(10_000) });
      else if (op < 8) store.delete(key);
      else if (op === 8) store.commit();
      else store.rollback();
      if (step % 500 === 0) {
        const now = rand(10_000);
        const expected = [...store.entries()]
          .filter(([, v]) => v.at !== null && v.at <= now)
          .map(([k]) => k)
          .sort();
        expect([...store.due(now)].sort()).toEqual(expected);
      }
    }
  });
});
