import { Body, Controller, Get, Post, Req, Res } from '@nestjs/common';
import { errorMessage, Logger } from '@srpo/core';
import { CompletionGateway, OpenAiError, ResponsesGateway, type HttpRequest, type HttpResponse, type Responder } from '@srpo/serving';

/**
 * The gateway's routes: OpenAI's completion endpoints (recorded) and the SDK's other two
 * events. Refusals leave in OpenAI's error shape; no prompt or completion text is logged.
 */
@Controller()
export class GatewayController {
  private readonly log = new Logger('gateway-http');

  constructor(
    private readonly gateway: CompletionGateway,
    private readonly responsesApi: ResponsesGateway,
  ) {}

  @Get('health')
  health(): Record<string, unknown> {
    return { status: 'ok', ...this.gateway.stats(), storedResponses: this.responsesApi.store.size };
  }

  @Get('v1/models')
  async models(@Req() req: HttpRequest, @Res() res: HttpResponse): Promise<void> {
    await this.answer(res, async () => res.status(200).json(await this.gateway.models(req.headers)));
  }

  @Post('v1/chat/completions')
  async chat(@Req() req: HttpRequest, @Body() body: unknown, @Res() res: HttpResponse): Promise<void> {
    await this.answer(res, () => this.gateway.complete('chat', req.headers, body, responder(res)));
  }

  @Post('v1/completions')
  async completions(@Req() req: HttpRequest, @Body() body: unknown, @Res() res: HttpResponse): Promise<void> {
    await this.answer(res, () => this.gateway.complete('completions', req.headers, body, responder(res)));
  }

  @Post('v1/responses')
  async responses(@Req() req: HttpRequest, @Body() body: unknown, @Res() res: HttpResponse): Promise<void> {
    await this.answer(res, () => this.responsesApi.respond(req.headers, body, responder(res)));
  }

  @Post('v1/srpo/transitions')
  async transitions(@Req() req: HttpRequest, @Body() body: unknown, @Res() res: HttpResponse): Promise<void> {
    await this.answer(res, async () => res.status(200).json(await this.gateway.record('Transition', req.headers, body)));
  }

  @Post('v1/srpo/outcomes')
  async outcomes(@Req() req: HttpRequest, @Body() body: unknown, @Res() res: HttpResponse): Promise<void> {
    await this.answer(res, async () => res.status(200).json(await this.gateway.record('EpisodeOutcome', req.headers, body)));
  }

  @Post('v1/srpo/served-models')
  async setServed(@Req() req: HttpRequest, @Body() body: unknown, @Res() res: HttpResponse): Promise<void> {
    await this.answer(res, () => Promise.resolve(void res.status(200).json(this.gateway.setServed(req.headers, body))));
  }

  @Get('v1/srpo/served-models')
  async served(@Req() req: HttpRequest, @Res() res: HttpResponse): Promise<void> {
    await this.answer(res, () => Promise.resolve(void res.status(200).json(this.gateway.servedModels(req.headers))));
  }

  private async answer(res: HttpResponse, run: () => Promise<void>): Promise<void> {
    try {
      await run();
    } catch (e) {
      const err = toGatewayError(e);
      if (err.status === 499) {
        this.log.info('the client went away; its upstream request was cancelled');
        if (!res.writableEnded) res.end();
        return;
      }
      if (!(e instanceof OpenAiError)) this.log.error('request failed', { error: errorMessage(e) });
      if (!res.headersSent) {
        for (const [k, v] of Object.entries(err.headers)) res.setHeader(k, v);
        res.status(err.status).json(err.body());
      } else if (!res.writableEnded) res.end();
    }
  }
}

/** Any failure as OpenAI's error: the gateway's own refusals as they are, the rest a 500 (also the error filter's mapping). */
export function toGatewayError(e: unknown): OpenAiError {
  return e instanceof OpenAiError ? e : new OpenAiError(500, 'The gateway had an error while processing your request.', null, 'internal_error');
}

/** The gateway's view of an Express response; `write` waits for `drain`, so a slow client slows the relay instead of growing memory. */
function responder(res: HttpResponse): Responder {
  const gone = new AbortController();
  // 'close' also follows a response that ended; one that closes before its end is a client that went away.
  res.once('close', () => {
    if (!res.writableEnded) gone.abort();
  });
  return {
    gone: gone.signal,
    json: (status, body, headers = {}) => {
      for (const [k, v] of Object.entries(headers)) res.setHeader(k, v);
      res.status(status).json(body);
    },
    startStream: (headers) => {
      res.status(200);
      res.setHeader('content-type', 'text/event-stream; charset=utf-8');
      res.setHeader('cache-control', 'no-cache');
      for (const [k, v] of Object.entries(headers)) res.setHeader(k, v);
      res.flushHeaders();
    },
    write: (data) =>
      new Promise<void>((resolve) => {
        // A closed response takes nothing more: its 'close' has already been emitted, so nothing would wake the wait.
        if (res.writableEnded || res.destroyed || res.write(data)) resolve();
        else {
          res.once('drain', resolve);
          res.once('close', resolve);
        }
      }),
    end: () => {
      if (!res.writableEnded) res.end();
    },
  };
}
