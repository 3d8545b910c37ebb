import { generateKeyPairSync, randomBytes } from 'crypto';
import type { DataSource } from 'typeorm';
import { ErrorCode, errorMessage, Logger, SrpoError } from '@srpo/core';
import { CONTENT_KEY_BYTES, type ContentKey } from '@srpo/events';
import { createDataSource } from './data-source';
import { SigningKeyEntity } from './entities';
import { ErasureRepository, type ErasureRecord, type RecentErasures } from './repositories/erasure.repository';
import { SubjectKeyRepository, type ErasureScope } from './repositories/subject-key.repository';
import { dbError, isUniqueViolation } from './store-errors';
import { describeStore, type StoreConfig } from './store-config';

export interface KeyStoreOptions {
  /**
   * How long a key read from the store is reused without asking again (ms). It bounds how long a
   * reader may still open, and a writer still seal with, a key after `srpo erase` deleted it.
   */
  cacheMs?: number;
  /** Most keys held in memory; the oldest go first. */
  maxCached?: number;
}

/** The store's signing key: the PEM of both halves (the private one never leaves the process but to sign). */
export interface StoreSigningKey {
  keyId: string;
  privateKeyPem: string;
  publicKeyPem: string;
}

/** What one erasure did. */
export interface ErasureResult {
  erasure: ErasureRecord;
  /**
   * What was done so that the deleted keys leave no copy in the store's files: `wal-truncated`
   * (SQLite: secure_delete zeroed the rows, the WAL was checkpointed and emptied), `wal-busy`
   * (SQLite: another connection held the WAL; its frames are overwritten or truncated at the next
   * checkpoint), `vacuumed` (PostgreSQL: the table was vacuumed; see docs/erasure.md for WAL and backups).
   */
  scrub: 'wal-truncated' | 'wal-busy' | 'vacuumed';
}

export const DEFAULT_KEY_CACHE_MS = 30_000;

/**
 * The content keys of crypto-shredding (docs/erasure.md) and the log of erasures, in the audit
 * store's database (its own connection). Writers (the gateway, the SDK) get or make a key per
 * (subject, episode); readers (the learner, replay, audit) fetch keys by id; `srpo erase` deletes
 * them. Keys never leave this class but as {@link ContentKey}s to seal or open with, and never
 * reach a log line or an error message.
 */
export class KeyStore {
  private readonly log = new Logger('key-store');
  private readonly cacheMs: number;
  private readonly maxCached: number;
  /** keyId → key, or null for a key the store does not have (erased). */
  private readonly byId = new Map<string, { key: Buffer | null; atMs: number }>();
  /** `${subject}\0${episode}` → key, for writers. */
  private readonly bySubjectEpisode = new Map<string, { key: ContentKey; atMs: number }>();
  /** See AuditStore: TypeORM's better-sqlite3 driver has one connection, so SQLite operations run one at a time. */
  private readonly exclusive: boolean;
  private tail: Promise<unknown> = Promise.resolve();

  constructor(
    readonly dataSource: DataSource,
    options: KeyStoreOptions = {},
  ) {
    this.cacheMs = options.cacheMs ?? DEFAULT_KEY_CACHE_MS;
    this.maxCached = options.maxCached ?? 100_000;
    const type = dataSource.options.type;
    this.exclusive = type === 'better-sqlite3' || type === 'sqlite';
  }

  static async open(config: StoreConfig, options: KeyStoreOptions = {}): Promise<KeyStore> {
    const ds = createDataSource(config);
    try {
      await ds.initialize();
    } catch (e) {
      throw new SrpoError(ErrorCode.UNAVAILABLE, `key store ${describeStore(config)}: cannot open: ${errorMessage(e)}`, { retriable: true, cause: e });
    }
    return new KeyStore(ds, options);
  }

  async close(): Promise<void> {
    if (this.dataSource.isInitialized) await this.dataSource.destroy();
  }

  /** The key that seals content of `subjectId` in `episodeId`, made on first use. */
  async keyFor(subjectId: string | null, episodeId: string, nowMs: number): Promise<ContentKey> {
    const slot = `${subjectId ?? ''}\0${episodeId}`;
    const cached = this.bySubjectEpisode.get(slot);
    if (cached && this.fresh(cached.atMs)) return cached.key;
    const key = await this.run('keyFor', async () => {
      const repo = new SubjectKeyRepository(this.dataSource.manager);
      const found = await repo.find(subjectId, episodeId);
      if (found) return found;
      const made = { keyId: randomBytes(16).toString('hex'), subjectId, episodeId, key: randomBytes(CONTENT_KEY_BYTES), createdAtMs: nowMs };
      SubjectKeyRepository.validate(made);
      try {
        await repo.insert(made);
        return made;
      } catch (e) {
        // Another writer made this (subject, episode)'s key first: use theirs.
        if (!isUniqueViolation(e)) throw e;
        const theirs = await repo.find(subjectId, episodeId);
        if (!theirs)
          throw new SrpoError(ErrorCode.INTEGRITY_FAILED, `content key of episode ${episodeId} vanished right after it was made`, { retriable: true });
        return theirs;
      }
    });
    const out = { keyId: key.keyId, key: key.key };
    this.remember(this.bySubjectEpisode, slot, { key: out, atMs: performance.now() });
    return out;
  }

  /** The keys of `keyIds` the store still has; an erased key is absent from the map. */
  async keysById(keyIds: readonly string[]): Promise<Map<string, Buffer>> {
    const out = new Map<string, Buffer>();
    const missing: string[] = [];
    for (const id of new Set(keyIds)) {
      const c = this.byId.get(id);
      if (c && this.fresh(c.atMs)) {
        if (c.key) out.set(id, c.key);
      } else missing.push(id);
    }
    if (missing.length === 0) return out;
    const found = await this.run('keysById', () => new SubjectKeyRepository(this.dataSource.manager).byIds(missing));
    const atMs = performance.now();
    for (const id of missing) {
      const key = found.get(id) ?? null;
      this.remember(this.byId, id, { key, atMs });
      if (key) out.set(id, key);
    }
    return out;
  }

  /** Ids of the keys an erasure of `scope` would delete. */
  async keyIdsOf(scope: ErasureScope): Promise<string[]> {
    return this.run('keyIdsOf', () => new SubjectKeyRepository(this.dataSource.manager).idsOf(scope));
  }

  /**
   * Deletes every key of `scope` and records the erasure, in one transaction, then scrubs the
   * store's files of the deleted rows ({@link ErasureResult.scrub}).
   */
  async erase(scope: ErasureScope, erasureId: string, nowMs: number): Promise<ErasureResult> {
    const erasure = await this.run('erase', () =>
      this.dataSource.transaction(async (em) => {
        const keys = new SubjectKeyRepository(em);
        const keyIds = await keys.idsOf(scope);
        const record: ErasureRecord = {
          erasureId,
          scope: 'subjectId' in scope ? 'subject' : 'episode',
          target: 'subjectId' in scope ? scope.subjectId : scope.episodeId,
          keyIds,
          erasedAtMs: nowMs,
        };
        ErasureRepository.validate(record);
        await keys.delete(keyIds);
        await new ErasureRepository(em).insert(record);
        return record;
      }),
    );
    for (const id of erasure.keyIds) this.byId.set(id, { key: null, atMs: performance.now() });
    for (const [slot, c] of this.bySubjectEpisode) if (erasure.keyIds.includes(c.key.keyId)) this.bySubjectEpisode.delete(slot);
    const scrub = await this.run('scrub', () => this.scrub());
    this.log.info('erased', { erasureId, scope: erasure.scope, keys: erasure.keyIds.length, scrub });
    return { erasure, scrub };
  }

  /**
   * The store's Ed25519 signing key, made on first use; it signs erasure certificates. Its
   * public half is what an auditor pins (`srpo erase --public-key`).
   */
  async signingKey(nowMs: number): Promise<StoreSigningKey> {
    return this.run('signingKey', async () => {
      const em = this.dataSource.manager;
      const found = await em.find(SigningKeyEntity, { order: { createdAtMs: 'ASC', keyId: 'ASC' }, take: 1 });
      if (found.length > 0) return found[0];
      const pair = generateKeyPairSync('ed25519');
      const made: SigningKeyEntity = {
        keyId: randomBytes(8).toString('hex'),
        privateKeyPem: pair.privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
        publicKeyPem: pair.publicKey.export({ type: 'spki', format: 'pem' }).toString(),
        createdAtMs: nowMs,
      };
      await em.insert(SigningKeyEntity, made);
      // Two processes making the first key at once: both read back the oldest, so one key signs.
      return (await em.find(SigningKeyEntity, { order: { createdAtMs: 'ASC', keyId: 'ASC' }, take: 1 }))[0];
    });
  }

  async erasures(): Promise<ErasureRecord[]> {
    return this.run('erasures', () => new ErasureRepository(this.dataSource.manager).list());
  }

  /** The `limit` newest erasures and how many there are in all (read-only; the dashboard's view, docs/learner.md). */
  async recentErasures(limit?: number): Promise<RecentErasures> {
    return this.run('recentErasures', () => new ErasureRepository(this.dataSource.manager).recent(limit));
  }

  private async scrub(): Promise<ErasureResult['scrub']> {
    if (this.exclusive) {
      // secure_delete (set on every connection, data-source.ts) zeroed the deleted rows in their
      // pages; the WAL still holds the pages as they were until it is checkpointed and truncated.
      const rows = await this.dataSource.query<{ busy: number }[]>('PRAGMA wal_checkpoint(TRUNCATE)');
      return rows[0]?.busy === 0 ? 'wal-truncated' : 'wal-busy';
    }
    const schema = (this.dataSource.driver as { schema?: string }).schema;
    await this.dataSource.query(`VACUUM ${schema ? `"${schema.replace(/"/g, '""')}".` : ''}"subject_keys"`);
    return 'vacuumed';
  }

  private fresh(atMs: number): boolean {
    return performance.now() - atMs < this.cacheMs;
  }

  private remember<V>(map: Map<string, V>, k: string, v: V): void {
    map.delete(k);
    map.set(k, v);
    if (map.size > this.maxCached) map.delete(map.keys().next().value as string);
  }

  private run<T>(op: string, f: () => Promise<T>): Promise<T> {
    const attempt = async (): Promise<T> => {
      try {
        return await f();
      } catch (e) {
        throw e instanceof SrpoError ? e : dbError(op, e);
      }
    };
    if (!this.exclusive) return attempt();
    const next = this.tail.then(attempt, attempt);
    this.tail = next.catch(() => undefined);
    return next;
  }
}
