import { ArgumentsHost, Catch, ExceptionFilter, HttpException } from '@nestjs/common';
import { OpenAiError } from '@srpo/serving';
import type { HttpRequest, HttpResponse } from './http-response';

/** Errors raised before a handler runs (a body that is not JSON, an unknown route) in OpenAI's error shape. */
@Catch()
export class OpenAiErrorFilter implements ExceptionFilter {
  catch(exception: unknown, host: ArgumentsHost): void {
    const res = host.switchToHttp().getResponse<HttpResponse>();
    const req = host.switchToHttp().getRequest<HttpRequest>();
    let err: OpenAiError;
    if (exception instanceof HttpException) {
      const status = exception.getStatus();
      if (status === 404) err = new OpenAiError(404, `Unknown request URL: ${req.method} ${req.url}`, null, 'unknown_url');
      else if (status === 400) err = new OpenAiError(400, `We could not parse the JSON body of your request. (${exception.message})`, null, 'invalid_json');
      else err = new OpenAiError(status, exception.message, null, status === 413 ? 'request_too_large' : null);
    } else {
      err = exception instanceof OpenAiError ? exception : new OpenAiError(500, 'The gateway had an error while processing your request.', null, 'internal_error');
    }
    if (!res.headersSent) res.status(err.status).json(err.body());
  }
}
