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

/** What a request may read: `open` (no token configured), `granted` (a configured token given), or why not. */
export type ReadAccess = 'open' | 'granted' | 'missing' | 'invalid';

/**
 * Reads are open only while no token is configured at all. Once SRPO_API_READ_TOKEN or
 * SRPO_API_TOKEN is set, either of them is required: a learner someone thought to protect
 * with a write token must not hand its audit record and metrics to anyone who asks.
 */
export function readAccess(config: Pick<LearnerConfig, 'apiToken' | 'apiReadToken'>, req: Request): ReadAccess {
  const accepted = [config.apiReadToken, config.apiToken].filter((t): t is string => t !== undefined);
  if (accepted.length === 0) return 'open';
  const given = bearer(req);
  if (given === undefined) return 'missing';
  // Compared with every accepted token, so the time taken does not tell which one matched.
  const matches = accepted.map((t) => same(given, t));
  return matches.includes(true) ? 'granted' : 'invalid';
}

/** Read-only endpoints: see {@link readAccess}. */
@Injectable()
export class ReadTokenGuard implements CanActivate {
  constructor(@Inject(LEARNER_CONFIG) private readonly config: LearnerConfig) {}

  canActivate(ctx: ExecutionContext): boolean {
    const access = readAccess(this.config, ctx.switchToHttp().getRequest<Request>());
    if (access === 'missing') throw unauthorized(ctx, 'missing bearer token');
    if (access === 'invalid') throw unauthorized(ctx, 'invalid bearer token');
    return true;
  }
}
