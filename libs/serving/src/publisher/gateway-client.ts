import { ErrorCode, errorMessage, SrpoError } from '@srpo/core';
import { serverBase } from './lora-server-client';

/**
 * `srpo gateway`'s served-models endpoint, as a client: `POST /v1/srpo/served-models`
 * `{policy_id, model, version}` makes `model` the policy's current served name (an admin key);
 * `GET` lists what is set. Unreachable, 5xx and 429 are retriable `UNAVAILABLE` errors.
 */
export class GatewayClient {
  constructor(
    private readonly timeoutMs = 60_000,
    private readonly apiKey?: string,
  ) {}

  async setServed(gateway: string, policyId: string, model: string, version: number): Promise<void> {
    const url = `${serverBase(gateway)}/v1/srpo/served-models`;
    let res: Response;
    try {
      res = await fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...this.auth() },
        body: JSON.stringify({ policy_id: policyId, model, version }),
        signal: AbortSignal.timeout(this.timeoutMs),
      });
    } catch (e) {
      throw new SrpoError(ErrorCode.UNAVAILABLE, `${serverBase(gateway)}: unreachable (${errorMessage(e)})`, { retriable: true, cause: e });
    }
    if (res.ok) return;
    const text = await res.text().catch(() => '');
    const retriable = res.status >= 500 || res.status === 429;
    throw new SrpoError(retriable ? ErrorCode.UNAVAILABLE : ErrorCode.VALIDATION_FAILED, `${url} answered ${res.status}: ${text.slice(0, 300)}`, { retriable });
  }

  /** policy → the version the gateway serves. */
  async served(gateway: string): Promise<Map<string, { model: string; version: number }>> {
    const url = `${serverBase(gateway)}/v1/srpo/served-models`;
    let res: Response;
    try {
      res = await fetch(url, { headers: this.auth(), signal: AbortSignal.timeout(this.timeoutMs) });
    } catch (e) {
      throw new SrpoError(ErrorCode.UNAVAILABLE, `${serverBase(gateway)}: unreachable (${errorMessage(e)})`, { retriable: true, cause: e });
    }
    if (!res.ok) throw new SrpoError(ErrorCode.UNAVAILABLE, `${url} answered ${res.status}`, { retriable: res.status >= 500 });
    const body = (await res.json()) as { data?: { policy_id?: unknown; model?: unknown; version?: unknown }[] };
    return new Map((body.data ?? []).map((d) => [String(d.policy_id), { model: String(d.model), version: Number(d.version) }] as const));
  }

  private auth(): Record<string, string> {
    return this.apiKey ? { authorization: `Bearer ${this.apiKey}` } : {};
  }
}
