import { Controller, Get, Inject, Param, UseGuards } from '@nestjs/common';
import type { AuditStore, PolicyRecord, PolicyVersionRecord } from '@srpo/store';
import { AUDIT_STORE } from '../learner-tokens';
import { ReadTokenGuard } from './api-token.guard';

@Controller('policies')
@UseGuards(ReadTokenGuard)
export class PoliciesController {
  constructor(@Inject(AUDIT_STORE) private readonly store: AuditStore) {}

  @Get()
  list(): Promise<PolicyRecord[]> {
    return this.store.listPolicies();
  }

  /** Versions ascending; 404 for an unknown policy. */
  @Get(':id/versions')
  versions(@Param('id') id: string): Promise<PolicyVersionRecord[]> {
    return this.store.listVersions(id);
  }
}
