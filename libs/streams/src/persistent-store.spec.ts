import { spawnSync } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { jsonSerde, sourceBackedSerde, StoreDerivations, TransactionalStore } from './key-value-store';
import { LocalTaskState } from './local-task-state';
import { PersistentStore } from './persistent-store';

/** A value shaped like an episode: ids it owns (indexed), a due time (scheduled), held input records. */
interface Value {
  ids: string[];
  dueMs: number | null;
  sourced: { source: { topic: string; partition: number; offset: number }; raw?: Buffer }[];
}

const derivations: StoreDerivations<Value> = { indexes: { ids: (v) => v.ids }, schedule: (v) => v.dueMs ?? undefined };
const identity = { appId: 'app', partition: 3, stores: ['s'] };

function tmp(): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-lmdb-'));
}

/** Deterministic pseudo-random numbers (mulberry32), so a failure replays. */
function rng(seed: number): () => number {
  return () => {
    seed |= 0;
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function view(s: TransactionalStore<Value> | PersistentStore<Value>, keys: string[], ids: string[]) {
  return {
    values: keys.map((k) => s.get(k) ?? null),
    lookups: ids.map((id) => s.lookup('ids', id) ?? null),
    // Ties in due time may come in another order (arrival in memory, key on disk): compared as sets.
    due: [...s.due(50)].sort(),
    size: s.size,
  };
}

describe('PersistentStore', () => {
  it('gives the same view as the in-memory TransactionalStore through random writes, commits and rollbacks, and after a reopen', () => {
    const dir = tmp();
    const random = rng(7);
    const serde = sourceBackedSerde<Value & { sourced: Value['sourced'] }>();
    const memory = new TransactionalStore<Value>('s', serde, derivations);
    let local = LocalTaskState.open(dir, identity);
    let disk = local.store<Value>('s', serde, derivations, true);
    const keys = Array.from({ length: 12 }, (_, i) => `k${i}`);
    // Each key owns its own ids, as processors keep an id with one owner (a second is refused).
    const ids = keys.flatMap((k) => [0, 1, 2, 3].map((i) => `${k}:id${i}`));
    let offset = 0;
    for (let round = 0; round < 200; round++) {
      const writes = 1 + Math.floor(random() * 5);
      for (let w = 0; w < writes; w++) {
        const key = keys[Math.floor(random() * keys.length)];
        if (random() < 0.25) {
          memory.delete(key);
          disk.delete(key);
        } else {
          // Ids only grow most of the time (the index's fast path), sometimes change entirely.
          const prev = memory.get(key);
          const base = prev && random() < 0.7 ? prev.ids : [];
          const idList = [...base, `${key}:id${Math.floor(random() * 4)}`].filter((x, i, a) => a.indexOf(x) === i);
          const dueMs = random() < 0.2 ? null : Math.floor(random() * 100);
          const at = offset++;
          // Two equal values, not one shared object: the stores must not depend on sharing.
          const make = (): Value => ({
            ids: [...idList],
            dueMs,
            sourced: [{ source: { topic: 't', partition: 0, offset: at }, raw: Buffer.from([round & 0xff, w]) }],
          });
          memory.put(key, make());
          disk.put(key, make());
        }
      }
      expect(view(disk, keys, ids)).toEqual(view(memory, keys, ids));
      expect(disk.changelogRecords().sort((a, b) => (a.key < b.key ? -1 : 1))).toEqual(memory.changelogRecords().sort((a, b) => (a.key < b.key ? -1 : 1)));
      if (random() < 0.3) {
        memory.rollback();
        local.rollback();
      } else {
        memory.commit();
        local.commit({ 'app.s.changelog': round + 1 });
      }
      // Schedules agree on what is due (ties may come in another order: compare as sets).
      expect(new Set(disk.due(50))).toEqual(new Set(memory.due(50)));
      if (round % 50 === 49) {
        local.close();
        local = LocalTaskState.open(dir, identity);
        expect(local.checkpoint).toEqual({ 'app.s.changelog': expect.any(Number) });
        disk = local.store<Value>('s', serde, derivations, true);
      }
      const v = view(disk, keys, ids);
      expect(v).toEqual(view(memory, keys, ids));
    }
    // The held records' bytes come back from disk although the changelog bytes leave them out.
    const some = keys.map((k) => disk.get(k)).find((v) => v !== undefined) as Value;
    expect(Buffer.isBuffer(some.sourced[0].raw)).toBe(true);
    local.close();
  });

  it('commits the writes and the checkpoint atomically: a failure inside the local transaction leaves both as they were', () => {
    const dir = tmp();
    const local = LocalTaskState.open(dir, identity);
    const store = local.store<Value>('s', jsonSerde(), derivations);
    store.put('a', { ids: ['x'], dueMs: 1, sourced: [] });
    local.commit({ c: 5 });
    store.put('b', { ids: ['y'], dueMs: 2, sourced: [] });
    expect(() =>
      local.commit(
        { c: 9 },
        {
          duringWrite: () => {
            throw new Error('disk gone');
          },
        },
      ),
    ).toThrow('disk gone');
    local.close();
    const reopened = LocalTaskState.open(dir, identity);
    const again = reopened.store<Value>('s', jsonSerde(), derivations);
    expect(reopened.checkpoint).toEqual({ c: 5 });
    expect(again.get('a')?.ids).toEqual(['x']);
    expect(again.get('b')).toBeUndefined();
    expect(again.lookup('ids', 'y')).toBeUndefined();
    expect(again.due(10)).toEqual(['a']);
    reopened.close();
  });

  it('discards a copy of another task, another store layout, or an unreadable one, and says why', () => {
    const dir = tmp();
    const local = LocalTaskState.open(dir, identity);
    expect(local.discarded).toBe('no local state');
    local.store<Value>('s', jsonSerde()).put('a', { ids: [], dueMs: null, sourced: [] });
    local.commit({ c: 1 });
    local.close();
    const other = LocalTaskState.open(dir, { ...identity, partition: 4 });
    expect(other.checkpoint).toBeUndefined();
    expect(other.discarded).toBe('local state belongs to app[3]');
    expect(other.store<Value>('s', jsonSerde()).get('a')).toBeUndefined();
    other.commit({ c: 1 });
    other.close();
    const layout = LocalTaskState.open(dir, { ...identity, partition: 4, stores: ['s', 't'] });
    expect(layout.discarded).toBe('local state holds stores s, the task has s,t');
    layout.close();
    fs.writeFileSync(path.join(dir, 'data.mdb'), Buffer.alloc(4096, 0x5a));
    const corrupt = LocalTaskState.open(dir, identity);
    expect(corrupt.checkpoint).toBeUndefined();
    expect(corrupt.discarded).toBe('local state unreadable');
    corrupt.store<Value>('s', jsonSerde()).put('z', { ids: [], dueMs: null, sourced: [] });
    corrupt.commit({ c: 2 });
    corrupt.close();
    // A start that crashed while opening the copy leaves its marker: the copy is not opened again.
    fs.writeFileSync(path.join(dir, 'opening'), '1');
    const afterCrash = LocalTaskState.open(dir, identity);
    expect(afterCrash.discarded).toBe('the previous start crashed while opening the local state');
    expect(afterCrash.store<Value>('s', jsonSerde()).get('z')).toBeUndefined();
    afterCrash.close();
    // And a good copy opens with its checkpoint, leaving no marker.
    const good = LocalTaskState.open(dir, identity);
    expect(good.discarded).toBe('local state has no checkpoint');
    good.commit({ c: 3 });
    good.close();
    const again = LocalTaskState.open(dir, identity);
    expect(again.checkpoint).toEqual({ c: 3 });
    expect(fs.existsSync(path.join(dir, 'opening'))).toBe(false);
    again.close();
  });

  it('refuses the writes of an instance whose copy another instance took over since, keeping the new owner’s state', () => {
    const dir = tmp();
    const first = LocalTaskState.open(dir, identity);
    const a = first.store<Value>('s', jsonSerde(), derivations);
    a.put('k', { ids: ['x'], dueMs: 1, sourced: [] });
    first.commit({ c: 5 });
    // The task moves: the new owner restores and commits (its first commit takes the copy over).
    const second = LocalTaskState.open(dir, identity);
    const b = second.store<Value>('s', jsonSerde(), derivations);
    b.put('k', { ids: ['y'], dueMs: 2, sourced: [] });
    second.commit({ c: 9 });
    // The old owner, paused meanwhile, comes back with an older write.
    a.put('k', { ids: ['old'], dueMs: 3, sourced: [] });
    expect(() => first.commit({ c: 7 })).toThrow(/taken over by another instance/);
    first.rollback();
    first.close();
    b.put('other', { ids: [], dueMs: null, sourced: [] });
    second.commit({});
    second.close();
    const reopened = LocalTaskState.open(dir, identity);
    expect(reopened.checkpoint).toEqual({ c: 9 });
    expect(reopened.store<Value>('s', jsonSerde(), derivations).get('k')?.ids).toEqual(['y']);
    reopened.close();
  });

  it('keeps restored values out of the changelog and hands them out for hydration', () => {
    const dir = tmp();
    const local = LocalTaskState.open(dir, identity);
    const store = local.store<Value>('s', sourceBackedSerde<Value>(), derivations, true);
    store.restore('a', Buffer.from(JSON.stringify({ ids: ['x'], dueMs: 3, sourced: [{ source: { topic: 't', partition: 0, offset: 4 } }] })));
    store.restore('b', null);
    expect(store.dirty).toBe(false);
    expect(store.changelogRecords()).toEqual([]);
    expect([...store.restoredValues()].map(([k, v]) => [k, v.sourced[0].source.offset])).toEqual([['a', 4]]);
    expect(store.lookup('ids', 'x')).toBe('a');
    local.close();
  });

  describe('unflushed local commits (unsynced markers)', () => {
    const markers = (dir: string) => fs.readdirSync(dir).filter((f) => f.startsWith('unsynced-'));
    const value: Value = { ids: ['x'], dueMs: null, sourced: [] };

    it('rebuilds a copy written unflushed in another boot, and keeps one flushed by a clean close', () => {
      const dir = tmp();
      const first = LocalTaskState.open(dir, identity, { bootId: () => 'boot-a' });
      expect(markers(dir)).toHaveLength(1);
      expect(fs.readFileSync(path.join(dir, markers(dir)[0]), 'utf8')).toBe('boot-a');
      first.store<Value>('s', jsonSerde()).put('k', value);
      first.commit({ c: 4 });
      // No clean close: the machine restarts with the marker on disk.
      const afterReboot = LocalTaskState.open(dir, identity, { bootId: () => 'boot-b' });
      expect(afterReboot.discarded).toBe('the machine restarted while the local state had writes not yet flushed to disk');
      expect(afterReboot.checkpoint).toBeUndefined();
      expect(afterReboot.store<Value>('s', jsonSerde()).get('k')).toBeUndefined();
      first.close();
      afterReboot.store<Value>('s', jsonSerde()).put('k2', value);
      afterReboot.commit({ c: 6 });
      afterReboot.close();
      expect(markers(dir)).toEqual([]);
      // Closed cleanly (flushed, marker removed): a later boot keeps it.
      const later = LocalTaskState.open(dir, identity, { bootId: () => 'boot-c' });
      expect(later.discarded).toBeUndefined();
      expect(later.checkpoint).toEqual({ c: 6 });
      expect(later.store<Value>('s', jsonSerde()).get('k2')).toEqual(value);
      later.close();
    });

    it('keeps a copy whose writer crashed in this boot, clearing the dead writer’s marker', () => {
      const dir = tmp();
      const local = LocalTaskState.open(dir, identity, { bootId: () => 'boot-a' });
      local.store<Value>('s', jsonSerde()).put('k', value);
      local.commit({ c: 2 });
      local.close();
      // A writer that died without closing: its pid is gone, its writes are in this boot's page cache.
      const deadPid = spawnSync(process.execPath, ['-e', '0']).pid;
      fs.writeFileSync(path.join(dir, `unsynced-${deadPid}-deadbeef`), 'boot-a');
      const reopened = LocalTaskState.open(dir, identity, { bootId: () => 'boot-a' });
      expect(reopened.discarded).toBeUndefined();
      expect(reopened.checkpoint).toEqual({ c: 2 });
      expect(markers(dir).some((m) => m.startsWith(`unsynced-${deadPid}-`))).toBe(false);
      expect(markers(dir)).toHaveLength(1);
      reopened.close();
      expect(markers(dir)).toEqual([]);
    });

    it('flushes every commit and writes no marker where the boot id is unknown, and then distrusts any marker', () => {
      const dir = tmp();
      const local = LocalTaskState.open(dir, identity, { bootId: () => undefined });
      expect(markers(dir)).toEqual([]);
      local.store<Value>('s', jsonSerde()).put('k', value);
      local.commit({ c: 1 });
      local.close();
      const kept = LocalTaskState.open(dir, identity, { bootId: () => undefined });
      expect(kept.checkpoint).toEqual({ c: 1 });
      kept.close();
      fs.writeFileSync(path.join(dir, 'unsynced-1-abcdef12'), 'boot-a');
      const distrusted = LocalTaskState.open(dir, identity, { bootId: () => undefined });
      expect(distrusted.discarded).toBe('the machine restarted while the local state had writes not yet flushed to disk');
      distrusted.close();
    });
  });
});
