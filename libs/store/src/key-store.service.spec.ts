import * as fs from 'fs';
import * as path from 'path';
import { DataSource } from 'typeorm';
import { Logger } from '@srpo/core';
import { createStoreTarget, STORE_KINDS, type StoreTarget } from '../test/store-targets';
import { KeyStore } from './key-store.service';

Logger.configure({ level: 'warn' });

const T0 = 1_767_225_600_000;

describe.each(STORE_KINDS)('KeyStore on %s', (kind) => {
  let target: StoreTarget;
  let keys: KeyStore;

  beforeEach(async () => {
    target = await createStoreTarget(kind, 'keys');
    keys = await KeyStore.open(target.config);
  });

  afterEach(async () => {
    await keys.close();
    await target.dispose();
  });

  it('makes one key per (subject, episode) and gives the same one to every writer', async () => {
    const other = await KeyStore.open(target.config);
    try {
      const [a, b] = await Promise.all([keys.keyFor('u1', 'ep1', T0), other.keyFor('u1', 'ep1', T0)]);
      expect(a.keyId).toBe(b.keyId);
      expect(a.key.equals(b.key)).toBe(true);
      expect(a.key).toHaveLength(32);
      const c = await keys.keyFor('u1', 'ep2', T0);
      const d = await keys.keyFor(null, 'ep1', T0);
      expect(new Set([a.keyId, c.keyId, d.keyId]).size).toBe(3);
      expect((await other.keysById([a.keyId, c.keyId, 'nope'])).get(c.keyId)?.equals(c.key)).toBe(true);
      expect([...(await other.keysById([a.keyId, 'nope'])).keys()]).toEqual([a.keyId]);
    } finally {
      await other.close();
    }
  });

  it('erases a subject (every episode) or an episode (every subject), records it, and readers stop getting the keys', async () => {
    const u1e1 = await keys.keyFor('u1', 'ep1', T0);
    const u1e2 = await keys.keyFor('u1', 'ep2', T0);
    const u2e1 = await keys.keyFor('u2', 'ep1', T0);
    const anon3 = await keys.keyFor(null, 'ep3', T0);
    const reader = await KeyStore.open(target.config, { cacheMs: 0 });
    try {
      expect((await reader.keysById([u1e1.keyId, u1e2.keyId, u2e1.keyId])).size).toBe(3);
      const byUser = await keys.erase({ subjectId: 'u1' }, 'er-1', T0 + 5);
      expect(byUser.erasure).toEqual({ erasureId: 'er-1', scope: 'subject', target: 'u1', keyIds: [u1e1.keyId, u1e2.keyId].sort(), erasedAtMs: T0 + 5 });
      expect([...(await reader.keysById([u1e1.keyId, u1e2.keyId, u2e1.keyId, anon3.keyId])).keys()].sort()).toEqual([u2e1.keyId, anon3.keyId].sort());
      // The eraser's own cache forgets at once.
      expect((await keys.keysById([u1e1.keyId])).size).toBe(0);
      const byEpisode = await keys.erase({ episodeId: 'ep3' }, 'er-2', T0 + 6);
      expect(byEpisode.erasure.keyIds).toEqual([anon3.keyId]);
      expect([...(await reader.keysById([u2e1.keyId, anon3.keyId])).keys()]).toEqual([u2e1.keyId]);
      expect((await keys.erasures()).map((e) => [e.erasureId, e.scope, e.target])).toEqual([
        ['er-1', 'subject', 'u1'],
        ['er-2', 'episode', 'ep3'],
      ]);
      // A subject who comes back after the erasure gets a new key: erasure covers what was written before it.
      const again = await keys.keyFor('u1', 'ep1', T0 + 7);
      expect(again.keyId).not.toBe(u1e1.keyId);
      await expect(keys.dataSource.query(`DELETE FROM ${target.table('erasures')}`)).rejects.toThrow(/erasures is append-only: DELETE refused/);
    } finally {
      await reader.close();
    }
  });

  it('makes one signing key for the store, on first use, and every process gets the same', async () => {
    const other = await KeyStore.open(target.config);
    try {
      const a = await keys.signingKey(T0);
      expect(a.publicKeyPem).toMatch(/^-----BEGIN PUBLIC KEY-----/);
      expect(a.privateKeyPem).toMatch(/^-----BEGIN PRIVATE KEY-----/);
      expect(await other.signingKey(T0 + 1)).toEqual(a);
    } finally {
      await other.close();
    }
  });

  it('leaves no copy of an erased key in the store files (scanned byte by byte)', async () => {
    const key = await keys.keyFor('u9', 'ep9', T0);
    const needles = [Buffer.from(key.key.toString('hex'), 'ascii'), key.key];
    const { files, close } = await storeFiles(keys, target);
    try {
      // The scan can fail: before the erasure, the key is in the files.
      expect(findIn(await files(), needles).length).toBeGreaterThan(0);
      const { scrub } = await keys.erase({ subjectId: 'u9' }, 'er-9', T0 + 1);
      expect(scrub).toBe(kind === 'sqlite' ? 'wal-truncated' : 'vacuumed');
      expect(findIn(await files(), needles)).toEqual([]);
    } finally {
      await close();
    }
  });
});

/**
 * The files that hold the key table: SQLite's database with its WAL and journal; PostgreSQL's
 * relation file, read after a CHECKPOINT (as the cluster's superuser, which infra/postgres trusts
 * on loopback: reading `data_directory` and checkpointing need it).
 */
async function storeFiles(keys: KeyStore, target: StoreTarget): Promise<{ files: () => Promise<string[]>; close: () => Promise<void> }> {
  const config = target.config;
  if (config.kind === 'sqlite') {
    const db = config.path;
    return { files: async () => [db, `${db}-wal`, `${db}-shm`, `${db}-journal`].filter((f) => fs.existsSync(f)), close: async () => undefined };
  }
  const url = new URL(config.url);
  url.username = 'postgres';
  url.password = '';
  const admin = new DataSource({ type: 'postgres', url: url.toString() });
  await admin.initialize();
  const [{ dir }] = await admin.query<{ dir: string }[]>(`SELECT current_setting('data_directory') AS dir`);
  const [{ file }] = await keys.dataSource.query<{ file: string }[]>(`SELECT pg_relation_filepath('${target.table('subject_keys')}') AS file`);
  return {
    files: async () => {
      await admin.query('CHECKPOINT');
      return [path.join(dir, file)];
    },
    close: () => admin.destroy(),
  };
}

function findIn(files: string[], needles: Buffer[]): string[] {
  return files.filter((f) => {
    const bytes = fs.readFileSync(f);
    return needles.some((n) => bytes.includes(n));
  });
}
