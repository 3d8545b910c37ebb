import { BadRequestException, Controller, Get, HttpCode, Inject, Param, Post, Query, UseGuards } from '@nestjs/common';
import { DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT, type AuditStore, type UpdateDetail, type UpdateRecord } from '@srpo/store';
import type { AuditService, VerifyReport } from '@srpo/audit';
import { AUDIT_SERVICE, AUDIT_STORE } from '../learner-tokens';
import { ReadTokenGuard } from './api-token.guard';
import { VerifyGate } from './verify-gate';
import { parseLimitParam, parseStringParam, parseTimeParam } from './query-params';

@Controller('updates')
@UseGuards(ReadTokenGuard)
export class UpdatesController {
  constructor(
    @Inject(AUDIT_STORE) private readonly store: AuditStore,
    @Inject(AUDIT_SERVICE) private readonly audit: AuditService,
    private readonly verifyGate: VerifyGate,
  ) {}

  /**
   * `GET /updates?policy=&from=&to=&limit=`: updates with `from <= committed < to`
   * (epoch ms or ISO 8601), oldest first.
   */
  @Get()
  list(@Query() query: Record<string, unknown>): Promise<UpdateRecord[]> {
    const from = parseTimeParam('from', query.from);
    const to = parseTimeParam('to', query.to);
    if (from !== undefined && to !== undefined && to < from) throw new BadRequestException('to: must not be before from');
    return this.store.listUpdates({
      policyId: parseStringParam('policy', query.policy),
      from,
      to,
      limit: parseLimitParam(query.limit, DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT),
    });
  }

  /** The whole audit record with its groups and their source coordinates; 404 if unknown. */
  @Get(':id')
  get(@Param('id') id: string): Promise<UpdateDetail> {
    return this.store.getUpdate(id);
  }

  /**
   * `POST /updates/:id/verify`: recomputes the update from its recorded source
   * events and checkpoint. 200 with the report either way (`ok` says whether the
   * weights hash matched); 404 for an unknown update. Read guard: it changes
   * nothing, it only costs one training step; so one runs at a time (429 while
   * another does, {@link VerifyGate}).
   */
  @Post(':id/verify')
  @HttpCode(200)
  verify(@Param('id') id: string): Promise<VerifyReport> {
    return this.verifyGate.run(id, () => this.audit.verify(id));
  }
}
