import { CanActivate, ExecutionContext, ForbiddenException, Inject, Injectable, UnauthorizedException } from '@nestjs/common';
import { createHash, timingSafeEqual } from 'crypto';
import type { HttpRequest as Request, HttpResponse as Response } from './http-types';
import type { LearnerConfig } from '../learner-config';
import { LEARNER_CONFIG } from '../learner-tokens';

function bearer(req: Request): string | undefined {
  const header = req.headers.authorization;
  if (typeof header !== 'string') return undefined;
  const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
  return match ? match[1] : undefined;
}

/** Constant-time comparison (hashing first makes the lengths equal). */
function same(a: string, b: string): boolean {
  return timingSafeEqual(createHash('sha256').update(a).digest(), createHash('sha256').update(b).digest());
}

function unauthorized(ctx: ExecutionContext, message: string): UnauthorizedException {
  ctx.switchToHttp().getResponse<Response>().setHeader('WWW-Authenticate', 'Bearer realm="srpo-learner"');
  return new UnauthorizedException(message);
}

/**
 * State-changing endpoints: `Authorization: Bearer <SRPO_API_TOKEN>`. Without
 * SRPO_API_TOKEN they are disabled (403), so an unconfigured learner can never
 * be controlled anonymously.
 */
@Injectable()
export class WriteTokenGuard implements CanActivate {
  constructor(@Inject(LEARNER_CONFIG) private readonly config: LearnerConfig) {}

  canActivate(ctx: ExecutionContext): boolean {
    const expected = this.config.apiToken;
    if (expected === undefined) throw new ForbiddenException('state-changing endpoints are disabled: SRPO_API_TOKEN is not set');
    const given = bearer(ctx.switchToHttp().getRequest<Request>());
    if (given === undefined) throw unauthorized(ctx, 'missing bearer token');
    if (!same(given, expected)) throw unauthorized(ctx, 'invalid bearer token');
    return true;
  }
}

/** Read-only endpoints: open unless SRPO_API_READ_TOKEN is set; then it (or the write token) is required. */
@Injectable()
export class ReadTokenGuard implements CanActivate {
  constructor(@Inject(LEARNER_CONFIG) private readonly config: LearnerConfig) {}

  canActivate(ctx: ExecutionContext): boolean {
    const expected = this.config.apiReadToken;
    if (expected === undefined) return true;
    const given = bearer(ctx.switchToHttp().getRequest<Request>());
    if (given === undefined) throw unauthorized(ctx, 'missing bearer token');
    const write = this.config.apiToken;
    if (!same(given, expected) && !(write !== undefined && same(given, write))) throw unauthorized(ctx, 'invalid bearer token');
    return true;
  }
}
