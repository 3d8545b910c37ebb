import type { EntityManager } from 'typeorm';
import { ValidationError } from '@srpo/core';
import { ErasureEntity } from '../entities';
import { checkEpochMs, checkLimit, checkNonEmpty } from './field-checks';
import { insertRows } from './repository-helpers';

/** One recorded erasure. */
export interface ErasureRecord {
  erasureId: string;
  scope: 'subject' | 'episode';
  /** The subject id or episode id. */
  target: string;
  /** Ids of the keys it deleted (ids, never keys). */
  keyIds: string[];
  erasedAtMs: number;
}

/** Default number of erasures {@link ErasureRepository.recent} returns. */
export const DEFAULT_ERASURE_LIST_LIMIT = 100;
/** Most erasures {@link ErasureRepository.recent} returns at once. */
export const MAX_ERASURE_LIST_LIMIT = 1000;

/** A page of the erasure log, newest first, and how many erasures the log holds in all. */
export interface RecentErasures {
  erasures: ErasureRecord[];
  total: number;
}

/** The `erasures` table: append-only, like the audit tables (the database refuses UPDATE and DELETE). */
export class ErasureRepository {
  constructor(private readonly em: EntityManager) {}

  static validate(r: ErasureRecord): void {
    checkNonEmpty(r.erasureId, 'erasureId', 64);
    if (r.scope !== 'subject' && r.scope !== 'episode') throw new ValidationError('scope', `must be subject or episode, got ${String(r.scope)}`);
    checkNonEmpty(r.target, 'target', 256);
    r.keyIds.forEach((k, i) => checkNonEmpty(k, `keyIds[${i}]`, 64));
    checkEpochMs(r.erasedAtMs, 'erasedAtMs');
  }

  static fromRow(e: ErasureEntity): ErasureRecord {
    return {
      erasureId: e.erasureId,
      scope: e.scope === 'episode' ? 'episode' : 'subject',
      target: e.target,
      keyIds: JSON.parse(e.keyIds) as string[],
      erasedAtMs: e.erasedAtMs,
    };
  }

  async insert(r: ErasureRecord): Promise<void> {
    await insertRows(this.em, ErasureEntity, [
      { erasureId: r.erasureId, scope: r.scope, target: r.target, keyIds: JSON.stringify(r.keyIds), erasedAtMs: r.erasedAtMs },
    ]);
  }

  /** Every erasure, oldest first. */
  async list(): Promise<ErasureRecord[]> {
    const rows = await this.em.find(ErasureEntity, { order: { erasedAtMs: 'ASC', erasureId: 'ASC' } });
    return rows.map((r) => ErasureRepository.fromRow(r));
  }

  /**
   * The `limit` newest erasures (by time, then id, both descending) and the count of all: what a
   * dashboard shows. Key ids come with each record; callers that show it count them.
   */
  async recent(limit: number = DEFAULT_ERASURE_LIST_LIMIT): Promise<RecentErasures> {
    const take = checkLimit(limit, MAX_ERASURE_LIST_LIMIT);
    const [rows, total] = await this.em.findAndCount(ErasureEntity, { order: { erasedAtMs: 'DESC', erasureId: 'DESC' }, take });
    return { erasures: rows.map((r) => ErasureRepository.fromRow(r)), total };
  }
}
