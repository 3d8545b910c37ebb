import type { EntityManager } from 'typeorm';
import { ValidationError } from '@srpo/core';
import { ErasureEntity } from '../entities';
import { checkEpochMs, checkNonEmpty } from './field-checks';
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
}
