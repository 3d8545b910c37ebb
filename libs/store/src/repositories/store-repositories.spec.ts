import { GroupStatsRepository } from './group-stats.repository';
import { PolicyVersionRepository } from './policy-version.repository';
import { PolicyRepository } from './policy.repository';
import { SkippedGroupRepository } from './skipped-group.repository';
import { UpdateGroupRepository } from './update-group.repository';
import { UpdateRecordRepository } from './update-record.repository';

/** Instance methods, i.e. what a repository can do to its table. */
function methods(cls: { prototype: object }): string[] {
  return Object.getOwnPropertyNames(cls.prototype)
    .filter((n) => n !== 'constructor')
    .sort();
}

describe('the repositories’ write surface', () => {
  // Pinned on purpose: a new method that changes or removes rows must be a deliberate change of this test.
  it('gives the audit tables inserts and reads only', () => {
    expect(methods(UpdateRecordRepository)).toEqual(['get', 'insert', 'latest', 'list']);
    expect(methods(UpdateGroupRepository)).toEqual(['appliedIn', 'findWithSet', 'insert', 'listForUpdate']);
    expect(methods(SkippedGroupRepository)).toEqual(['insert', 'list', 'skippedIn']);
    expect(methods(GroupStatsRepository)).toEqual(['insert', 'list']);
    expect(methods(PolicyVersionRepository)).toEqual(['get', 'insert', 'list']);
  });

  it('lets a policy change only by advancing its current version', () => {
    expect(methods(PolicyRepository)).toEqual(['advanceVersion', 'get', 'insert', 'list']);
  });
});
