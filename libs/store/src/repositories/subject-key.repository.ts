import { In, type EntityManager } from 'typeorm';
import { ValidationError } from '@srpo/core';
import { SubjectKeyEntity } from '../entities';
import { checkEpochMs, checkNonEmpty } from './field-checks';
import { idChunks, insertRows } from './repository-helpers';

/** A content key row as the store gives it out; `subjectId` null for events that name none. */
export interface ContentKeyRecord {
  keyId: string;
  subjectId: string | null;
  episodeId: string;
  key: Buffer;
  createdAtMs: number;
}

/** What an erasure deletes: every key of a subject, or every key of an episode. */
export type ErasureScope = { subjectId: string } | { episodeId: string };

const MAX_KEY_ID = 64;
const MAX_SUBJECT = 256;
const KEY_BYTES = 32;

/**
 * The `subject_keys` table: one content key per (subject, episode). Rows are inserted once and
 * deleted by erasure, never changed; the key is hex in a varchar so both dialects store it alike.
 */
export class SubjectKeyRepository {
  constructor(private readonly em: EntityManager) {}

  static validate(r: ContentKeyRecord): void {
    checkNonEmpty(r.keyId, 'keyId', MAX_KEY_ID);
    if (r.subjectId !== null) checkNonEmpty(r.subjectId, 'subjectId', MAX_SUBJECT);
    checkNonEmpty(r.episodeId, 'episodeId', MAX_SUBJECT);
    if (!Buffer.isBuffer(r.key) || r.key.length !== KEY_BYTES) throw new ValidationError('key', `must be ${KEY_BYTES} bytes`);
    checkEpochMs(r.createdAtMs, 'createdAtMs');
  }

  static toRow(r: ContentKeyRecord): SubjectKeyEntity {
    return { keyId: r.keyId, subjectId: r.subjectId ?? '', episodeId: r.episodeId, keyHex: r.key.toString('hex'), createdAtMs: r.createdAtMs };
  }

  static fromRow(e: SubjectKeyEntity): ContentKeyRecord {
    return {
      keyId: e.keyId,
      subjectId: e.subjectId === '' ? null : e.subjectId,
      episodeId: e.episodeId,
      key: Buffer.from(e.keyHex, 'hex'),
      createdAtMs: e.createdAtMs,
    };
  }

  async find(subjectId: string | null, episodeId: string): Promise<ContentKeyRecord | null> {
    const row = await this.em.findOne(SubjectKeyEntity, { where: { subjectId: subjectId ?? '', episodeId } });
    return row ? SubjectKeyRepository.fromRow(row) : null;
  }

  /** The keys of `keyIds` that exist; an erased (or never made) key is simply absent. */
  async byIds(keyIds: readonly string[]): Promise<Map<string, Buffer>> {
    const out = new Map<string, Buffer>();
    for (const chunk of idChunks(keyIds)) {
      for (const row of await this.em.find(SubjectKeyEntity, { where: { keyId: In(chunk) } })) out.set(row.keyId, Buffer.from(row.keyHex, 'hex'));
    }
    return out;
  }

  /** The ids (never the keys) of the keys an erasure of `scope` deletes, sorted. */
  async idsOf(scope: ErasureScope): Promise<string[]> {
    const where = 'subjectId' in scope ? { subjectId: scope.subjectId } : { episodeId: scope.episodeId };
    const rows = await this.em.find(SubjectKeyEntity, { select: { keyId: true }, where, order: { keyId: 'ASC' } });
    return rows.map((r) => r.keyId);
  }

  async insert(r: ContentKeyRecord): Promise<void> {
    await insertRows(this.em, SubjectKeyEntity, [SubjectKeyRepository.toRow(r)]);
  }

  async delete(keyIds: readonly string[]): Promise<void> {
    for (const chunk of idChunks(keyIds)) await this.em.delete(SubjectKeyEntity, { keyId: In(chunk) });
  }
}
