import { ArgumentsHost, Catch, ExceptionFilter, HttpException } from '@nestjs/common';
import type { HttpResponse as Response } from './http-response';
import { OpenAiError } from '@srpo/serving';
import { toOpenAiError } from './completions.controller';

/**
 * Errors raised before a handler runs (a body that is not JSON, an unknown route) in
 * OpenAI's error shape, so that clients parse them like any other refusal.
 */
@Catch()
export class OpenAiErrorFilter implements ExceptionFilter {
  catch(exception: unknown, host: ArgumentsHost): void {
    const res = host.switchToHttp().getResponse<Response>();
    let err: OpenAiError;
    if (exception instanceof HttpException) {
      const status = exception.getStatus();
      const message = status === 404 ? `Unknown request URL: ${host.switchToHttp().getRequest<{ method: string; url: string }>().method} ${host.switchToHttp().getRequest<{ url: string }>().url}` : exception.message;
      err = new OpenAiError(status, status === 400 ? `We could not parse the JSON body of your request. (${exception.message})` : message, null, status === 404 ? 'unknown_url' : status === 413 ? 'request_too_large' : null);
    } else {
      err = toOpenAiError(exception);
    }
    if (!res.headersSent) res.status(err.status).json(err.body());
  }
}
