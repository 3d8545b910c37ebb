import { ArgumentsHost, Catch, ExceptionFilter, HttpException, HttpStatus } from '@nestjs/common';
import type { HttpResponse as Response } from './http-types';
import { ErrorCode, Logger, SrpoError } from '@srpo/core';

/** HTTP status for each error code; a Record so a new code cannot be forgotten here. */
export const STATUS_BY_CODE: Record<ErrorCode, number> = {
  [ErrorCode.CONFIG_INVALID]: HttpStatus.INTERNAL_SERVER_ERROR,
  [ErrorCode.VALIDATION_FAILED]: HttpStatus.BAD_REQUEST,
  [ErrorCode.DECODE_FAILED]: HttpStatus.BAD_REQUEST,
  [ErrorCode.UNKNOWN_SCHEMA]: HttpStatus.BAD_REQUEST,
  [ErrorCode.PAYLOAD_TOO_LARGE]: HttpStatus.PAYLOAD_TOO_LARGE,
  [ErrorCode.INVARIANT_VIOLATED]: HttpStatus.UNPROCESSABLE_ENTITY,
  [ErrorCode.UNAVAILABLE]: HttpStatus.SERVICE_UNAVAILABLE,
  [ErrorCode.FENCED]: HttpStatus.CONFLICT,
  [ErrorCode.INTEGRITY_FAILED]: HttpStatus.INTERNAL_SERVER_ERROR,
  [ErrorCode.NOT_FOUND]: HttpStatus.NOT_FOUND,
  [ErrorCode.CONFLICT]: HttpStatus.CONFLICT,
  [ErrorCode.UNAUTHORIZED]: HttpStatus.UNAUTHORIZED,
  [ErrorCode.ENVIRONMENT]: HttpStatus.INTERNAL_SERVER_ERROR,
};

/**
 * Maps errors to JSON responses: HttpExceptions (thrown by controllers and
 * guards) keep their status; SrpoErrors (thrown by services) get the status of
 * their code and expose code, message and field; anything else is a 500 with
 * a generic message (the details go to the log, not to the client).
 */
@Catch()
export class SrpoExceptionFilter implements ExceptionFilter {
  private readonly log = new Logger('http');

  catch(exception: unknown, host: ArgumentsHost): void {
    const res = host.switchToHttp().getResponse<Response>();
    if (exception instanceof HttpException) {
      const body = exception.getResponse();
      res.status(exception.getStatus()).json(typeof body === 'string' ? { statusCode: exception.getStatus(), message: body } : body);
      return;
    }
    if (exception instanceof SrpoError) {
      const status = STATUS_BY_CODE[exception.code] ?? HttpStatus.INTERNAL_SERVER_ERROR;
      if (status >= 500) this.log.error('request failed', { code: exception.code, error: exception });
      res.status(status).json({
        statusCode: status,
        error: exception.code,
        message: exception.message,
        ...(exception.field === undefined ? {} : { field: exception.field }),
      });
      return;
    }
    this.log.error('unexpected error', { error: exception instanceof Error ? exception : String(exception) });
    res.status(HttpStatus.INTERNAL_SERVER_ERROR).json({ statusCode: 500, message: 'internal error' });
  }
}
