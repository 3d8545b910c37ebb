import type { EntityManager } from 'typeorm';
import { GroupStatsRepository } from './group-stats.repository';
import { PolicyVersionRepository } from './policy-version.repository';
import { PolicyRepository } from './policy.repository';
import { SkippedGroupRepository } from './skipped-group.repository';
import { UpdateGroupRepository } from './update-group.repository';
import { UpdateRecordRepository } from './update-record.repository';

/** One repository per table, all over the same entity manager (a transaction's, or the data source's). */
export interface StoreRepositories {
  policies: PolicyRepository;
  versions: PolicyVersionRepository;
  updates: UpdateRecordRepository;
  /** `update_groups`. */
  ledger: UpdateGroupRepository;
  skipped: SkippedGroupRepository;
  stats: GroupStatsRepository;
}

/**
 * The repositories over `em`. Cheap (they hold only `em`), so a transaction
 * builds its own set and everything it writes goes through its connection.
 */
export function storeRepositories(em: EntityManager): StoreRepositories {
  return {
    policies: new PolicyRepository(em),
    versions: new PolicyVersionRepository(em),
    updates: new UpdateRecordRepository(em),
    ledger: new UpdateGroupRepository(em),
    skipped: new SkippedGroupRepository(em),
    stats: new GroupStatsRepository(em),
  };
}
