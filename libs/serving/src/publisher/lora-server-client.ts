import { ErrorCode, errorMessage, SrpoError } from '@srpo/core';

/**
 * vLLM's runtime LoRA endpoints, as a client (`vllm/entrypoints/openai/serving_models.py`,
 * answered by vLLM with `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True` and by `srpo serve`):
 *
 *   POST /v1/load_lora_adapter   {"lora_name", "lora_path"}  200 text; 400 InvalidUserInput (missing field,
 *                                                             name already loaded); 404 NotFoundError; 400 BadRequestError
 *   POST /v1/unload_lora_adapter {"lora_name"}               200 text; 404 NotFoundError (not loaded)
 *
 * Errors come as `{"error": {message, type, param, code}}` (vLLM ≥ 0.10) or, from older
 * releases, `{"object": "error", message, type, code}`; both are read. A name already loaded
 * counts as loaded, and a name already gone as unloaded, so every call can be repeated.
 * Failures that another attempt may cure (the server unreachable, a timeout, a 5xx, 429) are
 * retriable `UNAVAILABLE` errors; a refusal is a non-retriable `VALIDATION_FAILED` naming
 * the server and its message.
 */
export class LoraServerClient {
  constructor(
    private readonly timeoutMs = 60_000,
    private readonly apiKey?: string,
  ) {}

  async load(server: string, loraName: string, loraPath: string): Promise<'loaded' | 'already-loaded'> {
    const { status, text } = await this.post(server, 'load_lora_adapter', { lora_name: loraName, lora_path: loraPath });
    if (status === 200) return 'loaded';
    const msg = errorText(text);
    if (status === 400 && /has already been loaded/.test(msg)) return 'already-loaded';
    throw refusal(server, 'load_lora_adapter', status, msg);
  }

  async unload(server: string, loraName: string): Promise<'unloaded' | 'not-loaded'> {
    const { status, text } = await this.post(server, 'unload_lora_adapter', { lora_name: loraName });
    if (status === 200) return 'unloaded';
    if (status === 404) return 'not-loaded';
    throw refusal(server, 'unload_lora_adapter', status, errorText(text));
  }

  private async post(server: string, route: string, body: Record<string, string>): Promise<{ status: number; text: string }> {
    const url = `${serverBase(server)}/v1/${route}`;
    let res: Response;
    try {
      res = await fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...(this.apiKey ? { authorization: `Bearer ${this.apiKey}` } : {}) },
        body: JSON.stringify(body),
        signal: AbortSignal.timeout(this.timeoutMs),
      });
    } catch (e) {
      throw new SrpoError(ErrorCode.UNAVAILABLE, `${url}: unreachable (${errorMessage(e)})`, { retriable: true, cause: e });
    }
    return { status: res.status, text: await res.text().catch(() => '') };
  }
}

/** A server's root URL from what a user may write: `http://a:8000`, `http://a:8000/`, `http://a:8000/v1`. */
export function serverBase(server: string): string {
  return server.replace(/\/+$/, '').replace(/\/v1$/, '');
}

function refusal(server: string, route: string, status: number, message: string): SrpoError {
  const retriable = status >= 500 || status === 429 || status === 408;
  return new SrpoError(retriable ? ErrorCode.UNAVAILABLE : ErrorCode.VALIDATION_FAILED, `${serverBase(server)} ${route} answered ${status}: ${message}`, {
    retriable,
  });
}

function errorText(text: string): string {
  try {
    const j = JSON.parse(text) as { error?: { message?: unknown }; message?: unknown; detail?: unknown };
    const m = j.error?.message ?? j.message ?? j.detail;
    if (typeof m === 'string') return m;
  } catch {
    // not JSON: the text itself
  }
  return text.slice(0, 300);
}
