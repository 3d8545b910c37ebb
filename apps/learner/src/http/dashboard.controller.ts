import { BadRequestException, Controller, Get, Header, Inject, NotFoundException, Param, Query, Res, UseGuards } from '@nestjs/common';
import {
  DEFAULT_ERASURE_LIST_LIMIT,
  DEFAULT_GROUP_STATS_LIMIT,
  KeyStore,
  MAX_ERASURE_LIST_LIMIT,
  MAX_GROUP_STATS_LIMIT,
  type AuditStore,
  type GroupStatsRecord,
} from '@srpo/store';
import { LearnerMetrics } from '@srpo/trainer';
import type { LearnerConfig } from '../learner-config';
import { AUDIT_STORE, LEARNER_CONFIG } from '../learner-tokens';
import { ReadTokenGuard } from './api-token.guard';
import { dashboardAsset } from './dashboard-assets';
import { DASHBOARD_HTML } from './dashboard-page';
import { erasuresView, type ErasuresView } from './erasures-view';
import type { HttpResponse as Response } from './http-types';
import { parseLimitParam, parseStringParam, parseTimeParam } from './query-params';

/**
 * The dashboard: `GET /` (the page), `GET /assets/:name` (its chart library),
 * `GET /group-stats` (its per-group data) and `GET /erasures` (its erasures
 * panel). The page and the assets are left open, whatever token is configured:
 * they hold no data; everything shown comes from the guarded JSON endpoints.
 */
@Controller()
export class DashboardController {
  /** Reads the erasure log only; on the audit store's connection, like the update cycle's key reads. */
  private readonly keys: KeyStore;

  constructor(
    @Inject(AUDIT_STORE) private readonly store: AuditStore,
    @Inject(LEARNER_CONFIG) private readonly config: LearnerConfig,
    private readonly metrics: LearnerMetrics,
  ) {
    this.keys = new KeyStore(store.dataSource);
  }

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

  /**
   * `GET /erasures?limit=`: the store's newest erasures, newest first (id, scope, subject or
   * episode id, time, number of content keys deleted: never a key, nor a key id), how many the
   * store holds, and what this learner left out as erased since it started
   * (`learner_sets_erased_total`, `learner_groups_skipped_total{reason="erased"}`).
   */
  @Get('erasures')
  @UseGuards(ReadTokenGuard)
  async erasures(@Query() query: Record<string, unknown>): Promise<ErasuresView> {
    const limit = parseLimitParam(query.limit, DEFAULT_ERASURE_LIST_LIMIT, MAX_ERASURE_LIST_LIMIT);
    const [recent, sets, skipped] = await Promise.all([this.keys.recentErasures(limit), this.metrics.setsErased.get(), this.metrics.groupsSkipped.get()]);
    return erasuresView(recent, {
      policyId: this.config.policyId,
      setsErased: sets.values.reduce((a, v) => a + v.value, 0),
      groupsSkippedErased: skipped.values.filter((v) => v.labels.reason === 'erased').reduce((a, v) => a + v.value, 0),
    });
  }
}
