import { ValidationError } from '@srpo/core';
import { OpenAiError } from '../openai-protocol';

/** Bearer API keys, each allowed a set of policies (`*`: all). */
export class ApiKeys {
  private constructor(private readonly keys: ReadonlyMap<string, ReadonlySet<string>> | undefined) {}

  /** No keys: every request is allowed (the gateway warns at start). */
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
    const keys = new Map<string, Set<string>>();
    for (const [k, v] of Object.entries(raw)) {
      if (k.length < 16) throw new ValidationError(field, `key "${k.slice(0, 4)}…" is shorter than 16 characters`);
      if (!Array.isArray(v) || v.length === 0 || !v.every((p) => typeof p === 'string' && p !== ''))
        throw new ValidationError(field, `key "${k.slice(0, 4)}…" must map to a non-empty list of policy ids`);
      keys.set(k, new Set(v as string[]));
    }
    return new ApiKeys(keys);
  }

  get enabled(): boolean {
    return this.keys !== undefined;
  }

  /** Refuses all but an admin key (`["*"]`) when keys are configured (401, or 403 for another key). */
  authorizeAdmin(authorization: string | undefined): void {
    if (!this.keys) return;
    this.authorize(authorization, undefined);
    const m = /^Bearer\s+(\S+)$/i.exec(authorization ?? '') as RegExpExecArray;
    if (!this.keys.get(m[1])?.has('*')) throw new OpenAiError(403, 'This API key is not an admin key (["*"]).', null, 'admin_required');
  }

  /** Refuses (401: no or unknown key; 403: the key may not use `policyId`). */
  authorize(authorization: string | undefined, policyId: string | undefined): void {
    if (!this.keys) return;
    const m = /^Bearer\s+(\S+)$/i.exec(authorization ?? '');
    if (!m) throw new OpenAiError(401, 'You didn\'t provide an API key. Send it as "Authorization: Bearer <key>".', null, 'missing_api_key');
    const allowed = this.keys.get(m[1]);
    if (!allowed) throw new OpenAiError(401, 'Incorrect API key provided.', null, 'invalid_api_key');
    if (policyId !== undefined && !allowed.has('*') && !allowed.has(policyId)) {
      throw new OpenAiError(403, `This API key may not use the model '${policyId}'.`, 'model', 'model_not_allowed');
    }
  }
}
