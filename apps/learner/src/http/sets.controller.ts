import { Controller, Get, Inject, Param, UseGuards } from '@nestjs/common';
import type { AuditService, SetTrace } from '@srpo/audit';
import { AUDIT_SERVICE } from '../learner-tokens';
import { ReadTokenGuard } from './api-token.guard';

@Controller('sets')
@UseGuards(ReadTokenGuard)
export class SetsController {
  constructor(@Inject(AUDIT_SERVICE) private readonly audit: AuditService) {}

  /** `GET /sets/:id/trace`: the set's source events, group, advantage and consuming update(s); 404 if no update consumed it. */
  @Get(':id/trace')
  trace(@Param('id') id: string): Promise<SetTrace[]> {
    return this.audit.trace(id);
  }
}
