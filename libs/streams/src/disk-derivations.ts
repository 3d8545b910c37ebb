import { Database, RootDatabase } from 'lmdb';

/*
 * A persistent store's secondary indexes and schedule on disk, each with an overlay of the open
 * transaction's changes that the local commit writes (see `PersistentStore`).
 */

/** A removal in an overlay of writes not yet on disk. */
export const DELETED = Symbol('deleted');

/** A unique secondary index on disk (secondary -> primary, primary -> its keys), with an overlay for the open transaction. */
export class DiskIndex {
  private readonly byKey: Database<string, string>;
  private readonly byPrimary: Database<string[], string>;
  private readonly keyOverlay = new Map<string, string | typeof DELETED>();
  private readonly primaryOverlay = new Map<string, string[] | typeof DELETED>();

  constructor(
    env: RootDatabase,
    store: string,
    readonly index: string,
  ) {
    this.byKey = env.openDB<string, string>(`i/${store}/${index}`, { encoding: 'msgpack' });
    this.byPrimary = env.openDB<string[], string>(`p/${store}/${index}`, { encoding: 'msgpack' });
  }

  lookup(key: string): string | undefined {
    const o = this.keyOverlay.get(key);
    if (o === DELETED) return undefined;
    return o ?? this.byKey.get(key);
  }

  /** As `UniqueIndexes.update`: the keys a primary was indexed under are remembered, not recomputed. */
  update(primary: string, keys: readonly string[], fresh = false): void {
    const o = this.primaryOverlay.get(primary);
    const before = o === DELETED ? undefined : (o ?? (fresh ? undefined : this.byPrimary.get(primary)));
    if (before && keys.length >= before.length && before.every((k, i) => keys[i] === k)) {
      if (keys.length === before.length) return;
      for (let i = before.length; i < keys.length; i++) this.keyOverlay.set(keys[i], primary);
      this.primaryOverlay.set(primary, [...keys]);
      return;
    }
    if (before) for (const k of before) if (this.lookup(k) === primary) this.keyOverlay.set(k, DELETED);
    for (const k of keys) this.keyOverlay.set(k, primary);
    this.primaryOverlay.set(primary, keys.length > 0 ? [...keys] : DELETED);
  }

  write(): void {
    for (const [k, p] of this.keyOverlay) {
      if (p === DELETED) this.byKey.removeSync(k);
      else this.byKey.putSync(k, p);
    }
    for (const [p, keys] of this.primaryOverlay) {
      if (keys === DELETED) this.byPrimary.removeSync(p);
      else this.byPrimary.putSync(p, keys);
    }
  }

  written(): void {
    this.rollback();
  }

  rollback(): void {
    this.keyOverlay.clear();
    this.primaryOverlay.clear();
  }
}

/** Due times on disk: (due, key) in order for range scans, key -> due for moves; an overlay for the open transaction. */
export class DiskSchedule {
  private readonly byDue: Database<boolean, [number, string]>;
  private readonly dueOf: Database<number, string>;
  private readonly overlay = new Map<string, number | typeof DELETED>();
  /** Keys known to have no due time on disk (written to a fresh copy): no lookup at write. */
  private readonly fresh = new Set<string>();

  constructor(
    env: RootDatabase,
    store: string,
    private readonly schedule: (value: unknown) => number | undefined,
  ) {
    this.byDue = env.openDB<boolean, [number, string]>(`d/${store}`, { encoding: 'msgpack', keyEncoding: 'ordered-binary' });
    this.dueOf = env.openDB<number, string>(`k/${store}`, { encoding: 'msgpack' });
  }

  update(key: string, value: unknown): void {
    const due = value === undefined ? undefined : this.schedule(value);
    this.overlay.set(key, due === undefined || !Number.isFinite(due) ? DELETED : due);
  }

  /** Keys due at or before `nowMs`, earliest first (ties by key); a key stays due until a write moves it. */
  due(nowMs: number): string[] {
    const out: { due: number; key: string }[] = [];
    for (const k of this.byDue.getKeys() as Iterable<[number, string]>) {
      if (k[0] > nowMs) break;
      if (!this.overlay.has(k[1])) out.push({ due: k[0], key: k[1] });
    }
    for (const [key, due] of this.overlay) if (due !== DELETED && due <= nowMs) out.push({ due, key });
    out.sort((a, b) => a.due - b.due || (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
    return out.map((e) => e.key);
  }

  markFresh(key: string): void {
    this.fresh.add(key);
  }

  write(): void {
    for (const [key, due] of this.overlay) {
      const before = this.fresh.has(key) ? undefined : this.dueOf.get(key);
      if (before !== undefined) this.byDue.removeSync([before, key]);
      if (due === DELETED) this.dueOf.removeSync(key);
      else {
        this.dueOf.putSync(key, due);
        this.byDue.putSync([due, key], true);
      }
    }
  }

  written(): void {
    this.overlay.clear();
    this.fresh.clear();
  }

  rollback(): void {
    this.overlay.clear();
    this.fresh.clear();
  }
}
