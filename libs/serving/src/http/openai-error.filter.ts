import { ArgumentsHost, Catch, ExceptionFilter, HttpException } from '@nestjs/common';
import { OpenAiError } from '../openai-protocol';
import type { HttpRequest, HttpResponse } from './http-types';

/**
 * Errors raised before a handler runs (a body that is not JSON, an unknown route) in OpenAI's
 * error shape, so that clients parse them like any other refusal. Anything that is not one of
 * Nest's HTTP exceptions goes through the app's own mapping (`toOpenAiError`), the one its
 * controller answers with, so both paths agree. Register with
 * `{ provide: APP_FILTER, useValue: new OpenAiErrorFilter(toOpenAiError) }`.
 */
@Catch()
export class OpenAiErrorFilter implements ExceptionFilter {
  constructor(private readonly toOpenAiError: (e: unknown) => OpenAiError) {}

  catch(exception: unknown, host: ArgumentsHost): void {
    const res = host.switchToHttp().getResponse<HttpResponse>();
    const err =
      exception instanceof HttpException ? fromHttpException(exception, host.switchToHttp().getRequest<HttpRequest>()) : this.toOpenAiError(exception);
    if (res.headersSent) return;
    for (const [k, v] of Object.entries(err.headers)) res.setHeader(k, v);
    res.status(err.status).json(err.body());
  }
}

/** Nest's own refusals (bad JSON, unknown URL, body too large) with OpenAI's wording and codes. */
function fromHttpException(exception: HttpException, req: HttpRequest): OpenAiError {
  const status = exception.getStatus();
  if (status === 404) return new OpenAiError(404, `Unknown request URL: ${req.method} ${req.url}`, null, 'unknown_url');
  if (status === 400) return new OpenAiError(400, `We could not parse the JSON body of your request. (${exception.message})`, null, 'invalid_json');
  return new OpenAiError(status, exception.message, null, status === 413 ? 'request_too_large' : null);
}
