import { Controller, Get, Res, UseGuards } from '@nestjs/common';
import type { HttpResponse as Response } from './http-types';
import { LearnerMetrics } from '@srpo/trainer';
import { ReadTokenGuard } from './api-token.guard';

@Controller('metrics')
@UseGuards(ReadTokenGuard)
export class MetricsController {
  constructor(private readonly metrics: LearnerMetrics) {}

  /** Prometheus text exposition format. */
  @Get()
  async metricsText(@Res({ passthrough: true }) res: Response): Promise<string> {
    const { contentType, body } = await this.metrics.render();
    res.setHeader('Content-Type', contentType);
    return body;
  }
}
