import { Controller, HttpCode, Inject, Post, UseGuards } from '@nestjs/common';
import { Logger } from '@srpo/core';
import type { ConsumptionControl, ConsumptionState } from '../group-source';
import { CONSUMPTION_CONTROL } from '../learner-tokens';
import { WriteTokenGuard } from './api-token.guard';

@Controller('consumption')
@UseGuards(WriteTokenGuard)
export class ConsumptionController {
  private readonly log = new Logger('consumption-api');

  constructor(@Inject(CONSUMPTION_CONTROL) private readonly control: ConsumptionControl) {}

  @Post('pause')
  @HttpCode(200)
  async pause(): Promise<ConsumptionState> {
    const state = await this.control.pause();
    this.log.info('consumption paused by API', { ...state });
    return state;
  }

  @Post('resume')
  @HttpCode(200)
  async resume(): Promise<ConsumptionState> {
    const state = await this.control.resume();
    this.log.info('consumption resumed by API', { ...state });
    return state;
  }
}
