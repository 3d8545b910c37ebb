import type { EntityManager, EntityTarget, ObjectLiteral } from 'typeorm';

/** Ids per IN (...) list; well under SQLite's and PostgreSQL's bound-parameter limits. */
export const IN_CHUNK = 500;

/**
 * Typed insert: rows must be complete entities (the generic keeps TypeORM's
 * deep partial types from exploding). No rows, no statement: an empty INSERT
 * is not valid SQL.
 */
export async function insertRows<T extends ObjectLiteral>(em: EntityManager, target: EntityTarget<T>, rows: readonly T[]): Promise<void> {
  if (rows.length === 0) return;
  await em.insert(target, rows as T[]);
}

/** `ids` without repeats, in slices of at most {@link IN_CHUNK}. */
export function idChunks(ids: readonly string[]): string[][] {
  const unique = [...new Set(ids)];
  const out: string[][] = [];
  for (let i = 0; i < unique.length; i += IN_CHUNK) out.push(unique.slice(i, i + IN_CHUNK));
  return out;
}
