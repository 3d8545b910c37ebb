import { Logger } from '@srpo/core';
import { createStoreTarget, STORE_KINDS, type StoreTarget } from '../../test/store-targets';
import { KeyStore } from '../key-store.service';
import { ErasureRepository, MAX_ERASURE_LIST_LIMIT } from './erasure.repository';

Logger.configure({ level: 'warn' });

const T0 = 1_767_225_600_000;

describe.each(STORE_KINDS)('erasure log, newest first, on %s', (kind) => {
  let target: StoreTarget;
  let keys: KeyStore;

  beforeEach(async () => {
    target = await createStoreTarget(kind, 'erasures');
    keys = await KeyStore.open(target.config);
  });

  afterEach(async () => {
    await keys.close();
    await target.dispose();
  });

  it('is empty before any erasure', async () => {
    expect(await keys.recentErasures()).toEqual({ erasures: [], total: 0 });
  });

  it('lists the newest erasures first (time, then id, descending) with every key id, up to limit, and counts them all', async () => {
    const a1 = await keys.keyFor('alice', 'ep1', T0);
    const a2 = await keys.keyFor('alice', 'ep2', T0);
    const anon = await keys.keyFor(null, 'ep3', T0);
    await keys.erase({ episodeId: 'ep3' }, 'er-a', T0 + 10);
    await keys.erase({ subjectId: 'alice' }, 'er-b', T0 + 20);
    // Same time as er-b: the id breaks the tie. Nothing left to delete: an erasure of no key.
    await keys.erase({ subjectId: 'bob' }, 'er-c', T0 + 20);

    const all = await keys.recentErasures();
    expect(all.total).toBe(3);
    expect(all.erasures).toEqual([
      { erasureId: 'er-c', scope: 'subject', target: 'bob', keyIds: [], erasedAtMs: T0 + 20 },
      { erasureId: 'er-b', scope: 'subject', target: 'alice', keyIds: [a1.keyId, a2.keyId].sort(), erasedAtMs: T0 + 20 },
      { erasureId: 'er-a', scope: 'episode', target: 'ep3', keyIds: [anon.keyId], erasedAtMs: T0 + 10 },
    ]);
    // The oldest-first list reads the same rows.
    expect((await keys.erasures()).map((e) => e.erasureId)).toEqual(['er-a', 'er-b', 'er-c']);

    const page = await keys.recentErasures(2);
    expect(page.total).toBe(3);
    expect(page.erasures.map((e) => e.erasureId)).toEqual(['er-c', 'er-b']);
    expect(await new ErasureRepository(keys.dataSource.manager).recent(1)).toEqual({ erasures: [all.erasures[0]], total: 3 });
  });

  it('refuses a limit out of [1, MAX_ERASURE_LIST_LIMIT]', async () => {
    for (const limit of [0, -1, 1.5, MAX_ERASURE_LIST_LIMIT + 1]) {
      await expect(keys.recentErasures(limit)).rejects.toThrow(/limit.*must be an integer in \[1, 1000\]/);
    }
    await expect(keys.recentErasures(MAX_ERASURE_LIST_LIMIT)).resolves.toEqual({ erasures: [], total: 0 });
  });
});
