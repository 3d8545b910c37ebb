import { createHash, timingSafeEqual } from 'crypto';
import { ValidationError } from '@srpo/core';
import { OpenAiError } from '../openai-protocol';

/** A caller the gateway knows. Logs and per-key state (episode owners, rate budgets) use `id`, never the key. */
export interface ApiKeyIdentity {
  /** `key-` and the first 8 hex digits of the key's SHA-256: stable, and reveals nothing usable about the key. */
  readonly id: string;
  /** The policies the key may use; `*`: every policy. */
  readonly policies: ReadonlySet<string>;
}

interface StoredKey {
  readonly digest: Buffer;
  readonly identity: ApiKeyIdentity;
}

const HASHED = /^sha256:([0-9a-f]{64})$/;

/** Whether `key` may use `policyId`: always without keys (undefined), else a key listing it or `*`. */
export function keyAllows(key: ApiKeyIdentity | undefined, policyId: string): boolean {
  return key === undefined || key.policies.has('*') || key.policies.has(policyId);
}

/**
 * Bearer API keys (the gateway's `SRPO_GATEWAY_API_KEYS`, serve's `SRPO_SERVE_API_KEYS`), each
 * allowed a set of policies (`*`: all). Only SHA-256 digests of the keys
 * are kept. A fast hash is enough because keys are random secrets of at least 16 characters,
 * not passwords: no dictionary to try, and a slow KDF would only cost every request. A
 * presented key is hashed and compared with `timingSafeEqual` against every stored digest (no
 * early exit), so the time taken tells nothing about how close a guess came.
 */
export class ApiKeys {
  private constructor(private readonly keys: readonly StoredKey[] | undefined) {}

  /** No keys: every request is allowed (the gateway warns at start). */
  static open(): ApiKeys {
    return new ApiKeys(undefined);
  }

  /**
   * `{"<key>": ["policyA", "policyB"], "<admin key>": ["*"]}`. A key may be given as
   * `sha256:<64 hex digits>` of itself, so the plain key need not sit in the environment.
   * Errors name a key by its position and id only.
   */
  static parse(json: string, field: string): ApiKeys {
    let raw: unknown;
    try {
      raw = JSON.parse(json);
    } catch (e) {
      throw new ValidationError(field, `is not valid JSON (${(e as Error).message})`);
    }
    if (typeof raw !== 'object' || raw === null || Array.isArray(raw) || Object.keys(raw).length === 0) {
      throw new ValidationError(field, 'must be a non-empty JSON object of key → list of policy ids, e.g. {"sk-agent-1": ["actor"]}');
    }
    const keys: StoredKey[] = [];
    Object.entries(raw).forEach(([k, v], i) => {
      const hashed = HASHED.exec(k);
      const digest = hashed ? Buffer.from(hashed[1], 'hex') : sha256(k);
      const name = `key #${i + 1} (${idOf(digest)})`;
      if (!hashed && k.length < 16) throw new ValidationError(field, `${name} is shorter than 16 characters`);
      if (!Array.isArray(v) || v.length === 0 || !v.every((p) => typeof p === 'string' && p !== ''))
        throw new ValidationError(field, `${name} must map to a non-empty list of policy ids`);
      if (keys.some((s) => s.digest.equals(digest))) throw new ValidationError(field, `${name} is given twice (plain and as its sha256)`);
      keys.push({ digest, identity: { id: idOf(digest), policies: new Set(v as string[]) } });
    });
    return new ApiKeys(keys);
  }

  get enabled(): boolean {
    return this.keys !== undefined;
  }

  /** The configured keys' ids, in their order (`key-` + the first 8 hex digits of `sha256sum` of the key). */
  get ids(): string[] {
    return (this.keys ?? []).map((k) => k.identity.id);
  }

  /** Refuses all but an admin key (`["*"]`) when keys are configured (401, or 403 for another key). */
  authorizeAdmin(authorization: string | undefined): void {
    const key = this.authorize(authorization, undefined);
    if (key && !key.policies.has('*')) throw new OpenAiError(403, 'This API key is not an admin key (["*"]).', null, 'admin_required');
  }

  /**
   * The caller's identity, undefined when no keys are configured. Refuses (401: no or unknown
   * key; 403: the key may not use `policyId`).
   */
  authorize(authorization: string | undefined, policyId: string | undefined): ApiKeyIdentity | undefined {
    if (!this.keys) return undefined;
    const m = /^Bearer\s+(\S+)$/i.exec(authorization ?? '');
    if (!m) throw new OpenAiError(401, 'You didn\'t provide an API key. Send it as "Authorization: Bearer <key>".', null, 'missing_api_key');
    const key = this.find(sha256(m[1]));
    if (!key) throw new OpenAiError(401, 'Incorrect API key provided.', null, 'invalid_api_key');
    if (policyId !== undefined && !keyAllows(key, policyId)) {
      throw new OpenAiError(403, `This API key may not use the model '${policyId}'.`, 'model', 'model_not_allowed');
    }
    return key;
  }

  private find(digest: Buffer): ApiKeyIdentity | undefined {
    let found: ApiKeyIdentity | undefined;
    // Every stored digest is compared, also after a match: the loop takes as long for a good key as for a bad one.
    for (const k of this.keys ?? []) if (timingSafeEqual(k.digest, digest)) found = k.identity;
    return found;
  }
}

function sha256(text: string): Buffer {
  return createHash('sha256').update(text, 'utf8').digest();
}

function idOf(digest: Buffer): string {
  return `key-${digest.subarray(0, 4).toString('hex')}`;
}
