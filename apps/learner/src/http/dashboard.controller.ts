import { BadRequestException, Controller, Get, Header, Inject, NotFoundException, Param, Query, Res, UseGuards } from '@nestjs/common';
import { DEFAULT_GROUP_STATS_LIMIT, MAX_GROUP_STATS_LIMIT, type AuditStore, type GroupStatsRecord } from '@srpo/store';
import { AUDIT_STORE } from '../learner-tokens';
import { ReadTokenGuard } from './api-token.guard';
import { dashboardAsset } from './dashboard-assets';
import { DASHBOARD_HTML } from './dashboard-page';
import type { HttpResponse as Response } from './http-types';
import { parseLimitParam, parseStringParam, parseTimeParam } from './query-params';

/**
 * The dashboard: `GET /` (the page), `GET /assets/:name` (its chart library)
 * and `GET /group-stats` (its per-group data). The page and the assets are left
 * open, whatever token is configured: they hold no data; everything shown comes
 * from the guarded JSON endpoints.
 */
@Controller()
export class DashboardController {
  constructor(@Inject(AUDIT_STORE) private readonly store: AuditStore) {}

  @Get()
  @Header('Content-Type', 'text/html; charset=utf-8')
  @Header('Cache-Control', 'no-store')
  page(): string {
    return DASHBOARD_HTML;
  }

  /** The chart library from the learner's own node_modules; 404 for any other name. */
  @Get('assets/:name')
  asset(@Param('name') name: string, @Res({ passthrough: true }) res: Response): string {
    const asset = dashboardAsset(name);
    if (!asset) throw new NotFoundException(`no asset ${name}`);
    res.setHeader('Content-Type', asset.contentType);
    res.setHeader('Cache-Control', 'public, max-age=3600');
    return asset.body;
  }

  /**
   * `GET /group-stats?policy=&from=&to=&limit=`: statistics of trained groups
   * (reward, success, workflow kind, policy lag, group-fill latency) whose
   * update committed in `[from, to)`, oldest first.
   */
  @Get('group-stats')
  @UseGuards(ReadTokenGuard)
  groupStats(@Query() query: Record<string, unknown>): Promise<GroupStatsRecord[]> {
    const from = parseTimeParam('from', query.from);
    const to = parseTimeParam('to', query.to);
    if (from !== undefined && to !== undefined && to < from) throw new BadRequestException('to: must not be before from');
    return this.store.listGroupStats({
      policyId: parseStringParam('policy', query.policy),
      from,
      to,
      limit: parseLimitParam(query.limit, DEFAULT_GROUP_STATS_LIMIT, MAX_GROUP_STATS_LIMIT),
    });
  }
}
