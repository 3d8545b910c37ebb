import type { LoggerService } from '@nestjs/common';
import { Logger } from '@srpo/core';

/** Routes NestJS's own log lines into the structured logger. */
export class NestLoggerAdapter implements LoggerService {
  private readonly out = new Logger('nest');

  log(message: unknown, context?: string): void {
    this.out.info(String(message), { context });
  }
  error(message: unknown, trace?: string, context?: string): void {
    this.out.error(String(message), { context, trace });
  }
  warn(message: unknown, context?: string): void {
    this.out.warn(String(message), { context });
  }
  debug(message: unknown, context?: string): void {
    this.out.debug(String(message), { context });
  }
  verbose(message: unknown, context?: string): void {
    this.out.debug(String(message), { context });
  }
}
