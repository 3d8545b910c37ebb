import { jsonSerde, sourceBackedSerde, TransactionalStore } from './key-value-store';

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
    expect(bytes.toString('utf8')).toBe(JSON.stringify(value, (k, v) => (k === 'raw' || k === 'decoded' ? undefined : v)));
    expect(serde.deserialize(bytes)).toEqual({ source: { topic: 't', partition: 1, offset: 42 }, digest: 'ab' });
    // The value in the store keeps its bytes.
    expect(value.raw.length).toBe(3);
  });
});
