import { BadRequestException, Controller, Get, Inject, Param, Query, UseGuards } from '@nestjs/common';
import { DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT, type AuditStore, type UpdateDetail, type UpdateRecord } from '@srpo/store';
import { AUDIT_STORE } from '../learner-tokens';
import { ReadTokenGuard } from './api-token.guard';
import { parseLimitParam, parseStringParam, parseTimeParam } from './query-params';

@Controller('updates')
@UseGuards(ReadTokenGuard)
export class UpdatesController {
  constructor(@Inject(AUDIT_STORE) private readonly store: AuditStore) {}

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
}
