import { createHash, timingSafeEqual } from 'crypto';
import { ValidationError } from '@srpo/core';
import { OpenAiError } from '../openai-protocol';

interface Key {
  /** SHA-256 of the key: every comparison is of 32 bytes, whatever the lengths sent. */
  digest: Buffer;
  policies: ReadonlySet<string>;
}

/**
 * Bearer API keys, each allowed a set of policies (`*`: all); the gateway's
 * `SRPO_GATEWAY_API_KEYS` and serve's `SRPO_SERVE_API_KEYS`. A presented key is compared with
 * every configured key in constant time, so the time of a refusal tells nothing of how close a
 * guess came; no message or log carries a key or a part of one.
 */
export class ApiKeys {
  private constructor(private readonly keys: readonly Key[] | undefined) {}

  /** No keys: every request is allowed (the app warns at start). */
  static open(): ApiKeys {
    return new ApiKeys(undefined);
  }

  /** `{"<key>": ["policyA", "policyB"], "<admin key>": ["*"]}`. */
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
    const keys: Key[] = [];
    Object.entries(raw).forEach(([k, v], i) => {
      // Keys are named by position: even a prefix of a key is a secret's part.
      if (k.length < 16) throw new ValidationError(field, `key #${i + 1} is shorter than 16 characters`);
      if (!Array.isArray(v) || v.length === 0 || !v.every((p) => typeof p === 'string' && p !== ''))
        throw new ValidationError(field, `key #${i + 1} must map to a non-empty list of policy ids`);
      keys.push({ digest: digestOf(k), policies: new Set(v as string[]) });
    });
    return new ApiKeys(keys);
  }

  get enabled(): boolean {
    return this.keys !== undefined;
  }

  /** Refuses all but an admin key (`["*"]`) when keys are configured (401, or 403 for another key). */
  authorizeAdmin(authorization: string | undefined): void {
    if (!this.keys) return;
    if (!this.find(authorization).has('*')) throw new OpenAiError(403, 'This API key is not an admin key (["*"]).', null, 'admin_required');
  }

  /** Refuses (401: no or unknown key; 403: the key may not use `policyId`). */
  authorize(authorization: string | undefined, policyId: string | undefined): void {
    if (!this.keys) return;
    const allowed = this.find(authorization);
    if (policyId !== undefined && !allowed.has('*') && !allowed.has(policyId)) {
      throw new OpenAiError(403, `This API key may not use the model '${policyId}'.`, 'model', 'model_not_allowed');
    }
  }

  /** The policies of the key in an `Authorization: Bearer <key>` header; 401 when there is none or it is unknown. */
  private find(authorization: string | undefined): ReadonlySet<string> {
    const m = /^Bearer\s+(\S+)$/i.exec(authorization ?? '');
    if (!m) throw new OpenAiError(401, 'You didn\'t provide an API key. Send it as "Authorization: Bearer <key>".', null, 'missing_api_key');
    const digest = digestOf(m[1]);
    let found: Key | undefined;
    // Every key is compared, with no early exit, so the time taken does not depend on which matched.
    for (const k of this.keys ?? []) if (timingSafeEqual(k.digest, digest) && !found) found = k;
    if (!found) throw new OpenAiError(401, 'Incorrect API key provided.', null, 'invalid_api_key');
    return found.policies;
  }
}

function digestOf(key: string): Buffer {
  return createHash('sha256').update(key, 'utf8').digest();
}
