import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { Logger } from '@srpo/core';
import { AuditStore } from './audit-store.service';

Logger.configure({ level: 'warn' });

/** SQLite's `PRAGMA synchronous` values. */
const SYNCHRONOUS = { OFF: 0, NORMAL: 1, FULL: 2, EXTRA: 3 } as const;

describe('the SQLite audit store (real better-sqlite3)', () => {
  let dir: string;

  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-store-pragmas-'));
  });

  afterEach(() => {
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('runs WAL with synchronous=FULL, so a committed ledger row survives a power cut', async () => {
    const store = await AuditStore.open({ kind: 'sqlite', path: path.join(dir, 'learner.sqlite') });
    try {
      // The store's own connection: TypeORM's better-sqlite3 driver has exactly one.
      const [{ journal_mode }] = await store.dataSource.query<[{ journal_mode: string }]>('PRAGMA journal_mode');
      const [{ synchronous }] = await store.dataSource.query<[{ synchronous: number }]>('PRAGMA synchronous');
      expect({ journal_mode, synchronous }).toEqual({ journal_mode: 'wal', synchronous: SYNCHRONOUS.FULL });
    } finally {
      await store.close();
    }
  });

  it('keeps them when an existing store is reopened', async () => {
    const file = path.join(dir, 'learner.sqlite');
    await (await AuditStore.open({ kind: 'sqlite', path: file })).close();
    const store = await AuditStore.open({ kind: 'sqlite', path: file });
    try {
      const [{ synchronous }] = await store.dataSource.query<[{ synchronous: number }]>('PRAGMA synchronous');
      expect(synchronous).toBe(SYNCHRONOUS.FULL);
    } finally {
      await store.close();
    }
  });
});
