import { Body, Controller, Get, Headers, HttpCode, Post, Res } from '@nestjs/common';
import { errorMessage, ErrorCode, Logger, SrpoError } from '@srpo/core';
import { OpenAiError, parseRequest, type HttpResponse as Response, type ParsedRequest } from '@srpo/serving';
import { ServeService } from './serve.service';

/** The header naming the policy version that produced a response (also in `system_fingerprint`). */
export const VERSION_HEADER = 'x-srpo-policy-version';

/**
 * OpenAI's `/v1/models`, `/v1/chat/completions` and `/v1/completions`. Streaming answers are
 * server-sent events ending in `data: [DONE]`. Every failure leaves in OpenAI's error shape;
 * no prompt or completion text, and no key, is logged. With API keys configured every route but
 * `/health` needs `Authorization: Bearer <key>` (the LoRA routes an admin key, `["*"]`). A
 * request whose client disconnects stops generating at once.
 */
@Controller()
export class CompletionsController {
  private readonly log = new Logger('serve-http');

  constructor(private readonly serve: ServeService) {}

  @Get('v1/models')
  models(@Headers('authorization') authorization: string | undefined): Record<string, unknown> {
    return this.serve.listModels(this.serve.keys.authorize(authorization, undefined));
  }

  @Get('health')
  health(): Record<string, unknown> {
    return { status: 'ok', versions: this.serve.versions(), ...this.serve.stats() };
  }

  @Post('v1/chat/completions')
  @HttpCode(200)
  async chat(@Body() body: unknown, @Headers('authorization') authorization: string | undefined, @Res() res: Response): Promise<void> {
    await this.handle('chat', body, authorization, res);
  }

  @Post('v1/completions')
  @HttpCode(200)
  async completions(@Body() body: unknown, @Headers('authorization') authorization: string | undefined, @Res() res: Response): Promise<void> {
    await this.handle('completions', body, authorization, res);
  }

  /**
   * vLLM's `POST /v1/load_lora_adapter` `{lora_name, lora_path}`: 200 with a text body
   * `Success: LoRA adapter '<name>' added successfully.`; refusals in vLLM's error shape
   * (400 `InvalidUserInput` for a missing field or a name already loaded, 404 `NotFoundError`
   * for a path with no adapter, 400 `BadRequestError` for an adapter that does not fit).
   */
  @Post('v1/load_lora_adapter')
  loadLora(@Body() body: unknown, @Headers('authorization') authorization: string | undefined, @Res() res: Response): void {
    this.lora(res, authorization, () => {
      const b = loraBody(body);
      const { evicted } = this.serve.loadLora(b.lora_name, b.lora_path);
      if (evicted.length > 0) this.log.info('adapters unloaded to stay within --max-loras', { evicted });
      return `Success: LoRA adapter '${String(b.lora_name)}' added successfully.`;
    });
  }

  /** vLLM's `POST /v1/unload_lora_adapter` `{lora_name}`: 200 `Success: LoRA adapter '<name>' removed successfully.`, 404 `NotFoundError` when not loaded. */
  @Post('v1/unload_lora_adapter')
  unloadLora(@Body() body: unknown, @Headers('authorization') authorization: string | undefined, @Res() res: Response): void {
    this.lora(res, authorization, () => {
      const b = loraBody(body);
      this.serve.unloadLora(b.lora_name);
      return `Success: LoRA adapter '${String(b.lora_name)}' removed successfully.`;
    });
  }

  private lora(res: Response, authorization: string | undefined, run: () => string): void {
    if (!this.serve.runtimeLora) {
      res.status(404).json({ detail: 'Not Found' });
      return;
    }
    // Loading reads a directory the caller names: with keys configured, only an admin key may.
    this.serve.keys.authorizeAdmin(authorization);
    try {
      const text = run();
      res.status(200).setHeader('content-type', 'text/plain; charset=utf-8');
      res.write(text);
      res.end();
    } catch (e) {
      const { status, type } = vllmLoraError(e);
      if (status >= 500) this.log.error('LoRA adapter request failed', { error: errorMessage(e) });
      res.status(status).json({ error: { message: errorMessage(e), type, param: null, code: status } });
    }
  }

  private async handle(endpoint: ParsedRequest['endpoint'], body: unknown, authorization: string | undefined, res: Response): Promise<void> {
    let streaming = false;
    const gone = new AbortController();
    // 'close' also follows a response that ended; one that closes before its end is a client that went away.
    res.once('close', () => {
      if (!res.writableEnded) gone.abort();
    });
    try {
      this.serve.keys.authorize(authorization, undefined);
      const req = parseRequest(endpoint, body);
      this.serve.keys.authorize(authorization, req.model);
      if (!req.stream) {
        const { body: out, result } = await this.serve.run(req, undefined, gone.signal);
        res.setHeader(VERSION_HEADER, `${result.policyId}@${result.policyVersion}`);
        res.status(200).json(out);
        return;
      }
      const { result } = await this.serve.run(
        req,
        (chunk) => {
          if (!streaming) {
            streaming = true;
            // eslint-disable-next-line @typescript-eslint/no-base-to-string -- a field of the upstream JSON, a string when present
            const fp = String(chunk.system_fingerprint ?? '');
            res.status(200);
            res.setHeader('content-type', 'text/event-stream; charset=utf-8');
            res.setHeader('cache-control', 'no-cache');
            res.setHeader(VERSION_HEADER, fp.replace(/^srpo-(.*)-v(\d+)$/, '$1@$2'));
            res.flushHeaders();
          }
          res.write(`data: ${JSON.stringify(chunk)}\n\n`);
        },
        gone.signal,
      );
      if (!streaming) res.status(200).setHeader(VERSION_HEADER, `${result.policyId}@${result.policyVersion}`);
      res.write('data: [DONE]\n\n');
      res.end();
    } catch (e) {
      if (gone.signal.aborted) {
        // Nobody is left to answer: the request's choices have left the batch (GenerationCancelled).
        this.log.debug('client went away; generation cancelled', { endpoint });
        return;
      }
      const err = toOpenAiError(e);
      if (err.status >= 500) this.log.error('completion failed', { endpoint, error: errorMessage(e) });
      if (streaming) {
        res.write(`data: ${JSON.stringify(err.body())}\n\n`);
        res.end();
      } else {
        res.status(err.status).json(err.body());
      }
    }
  }
}

/** Any failure as OpenAI's error: request errors keep their status; capacity is 503; the rest is 500. */
export function toOpenAiError(e: unknown): OpenAiError {
  if (e instanceof OpenAiError) return e;
  if (e instanceof SrpoError) {
    if (e.code === ErrorCode.VALIDATION_FAILED) return new OpenAiError(400, e.message, e.field ?? null, 'invalid_value');
    if (e.code === ErrorCode.UNAVAILABLE) return new OpenAiError(503, e.message, null, 'overloaded');
    if (e.code === ErrorCode.NOT_FOUND) return new OpenAiError(404, e.message, e.field ?? null, 'not_found');
  }
  return new OpenAiError(500, 'The server had an error while processing your request.', null, 'internal_error');
}

function loraBody(body: unknown): Record<string, unknown> {
  return typeof body === 'object' && body !== null && !Array.isArray(body) ? (body as Record<string, unknown>) : {};
}

/** vLLM's status and error type for a LoRA request's failure (serving_models.py). */
export function vllmLoraError(e: unknown): { status: number; type: string } {
  if (e instanceof SrpoError) {
    if (e.code === ErrorCode.NOT_FOUND) return { status: 404, type: 'NotFoundError' };
    if (e.code === ErrorCode.CONFLICT || (e.code === ErrorCode.VALIDATION_FAILED && e.field === 'lora_name')) return { status: 400, type: 'InvalidUserInput' };
    if (e.code === ErrorCode.VALIDATION_FAILED || e.code === ErrorCode.CONFIG_INVALID) return { status: 400, type: 'BadRequestError' };
  }
  return { status: 500, type: 'InternalServerError' };
}
