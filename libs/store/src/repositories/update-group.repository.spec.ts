import type { DataSource } from 'typeorm';
import { Logger } from '@srpo/core';
import { expectInvalid, groupInput, openMemoryRepositories, recordInput, seedPolicy, T0 } from '../../test/audit-fixtures';
import type { GroupLedgerInput } from '../audit-types';
import { IN_CHUNK } from './repository-helpers';
import type { StoreRepositories } from './store-repositories';
import { UpdateGroupRepository } from './update-group.repository';
import { UpdateRecordRepository } from './update-record.repository';

Logger.configure({ level: 'warn' });

describe('UpdateGroupRepository validation', () => {
  const invalid = (g: GroupLedgerInput, field: string, message: RegExp) =>
    expectInvalid(() => UpdateGroupRepository.validate([groupInput('ok', 1), g]), field, message);
  const base = groupInput('g', 2);

  it('accepts groups whose every set has its advantage and sources; an immediate reward has no outcome', () => {
    expect(() => UpdateGroupRepository.validate([groupInput('a', 1), groupInput('b', 2)])).not.toThrow();
    expect(base.sources[1].outcome).toBeNull();
  });

  it('refuses an update without groups, or with a group twice', () => {
    expectInvalid(() => UpdateGroupRepository.validate([]), 'groups', /at least one group/);
    expectInvalid(() => UpdateGroupRepository.validate([groupInput('a', 1), groupInput('a', 2)]), 'groups[1].groupId', /a appears twice in one update/);
  });

  it('checks a group field by field, naming the path', () => {
    invalid({ ...base, groupId: 'g'.repeat(513) }, 'groups[1].groupId', /at most 512 characters/);
    invalid({ ...base, groupKey: '' }, 'groups[1].groupKey', /non-empty string/);
    invalid({ ...base, source: { topic: 't', partition: -1, offset: 0 } }, 'groups[1].source.partition', /non-negative integer, got -1/);
    invalid({ ...base, source: { topic: 't', partition: 0, offset: 2 ** 53 } }, 'groups[1].source.offset', /non-negative safe integer/);
    invalid({ ...base, source: null as unknown as GroupLedgerInput['source'] }, 'groups[1].source', /must be \{topic, partition, offset\}/);
    invalid({ ...base, setIds: [], advantages: [], sources: [] }, 'groups[1].setIds', /at least one set/);
    invalid({ ...base, advantages: [1] }, 'groups[1].advantages', /one advantage per set \(2\)/);
    invalid({ ...base, advantages: [1, Number.NaN] }, 'groups[1].advantages[1]', /finite number/);
    invalid({ ...base, sources: base.sources.slice(0, 1) }, 'groups[1].sources', /sources of every set \(2\)/);
    invalid({ ...base, sources: [...base.sources].reverse() }, 'groups[1].sources[0].setId', /must be g\/s0 \(setIds order\), got g\/s1/);
    invalid(
      { ...base, sources: [{ ...base.sources[0], transition: { topic: '', partition: 0, offset: 0 } }, base.sources[1]] },
      'groups[1].sources[0].transition.topic',
      /non-empty/,
    );
    invalid({ ...base, sources: [base.sources[0], { ...base.sources[1], members: [] }] }, 'groups[1].sources[1].members', /every member/);
    // Null entries are named as fields, not a TypeError.
    invalid({ ...base, sources: [base.sources[0], null as unknown as (typeof base.sources)[number]] }, 'groups[1].sources[1]', /must be an object, got null/);
    invalid(
      { ...base, sources: [base.sources[0], { ...base.sources[1], members: [null as unknown as (typeof base.sources)[number]['members'][number]] }] },
      'groups[1].sources[1].members[0]',
      /must be an object, got null/,
    );
    invalid(
      { ...base, sources: [base.sources[0], { ...base.sources[1], members: [{ outputId: '', source: base.source }] }] },
      'groups[1].sources[1].members[0].outputId',
      /non-empty/,
    );
    invalid({ ...base, objectiveConfig: {} as unknown as string }, 'groups[1].objectiveConfig', /must be a string/);
  });
});

describe('UpdateGroupRepository mapping', () => {
  it('numbers the groups in order, stamps them with the update and copies what the caller may reuse', () => {
    const input = [groupInput('a', 1), groupInput('b', 2)];
    const ledger = UpdateGroupRepository.fromInput(recordInput('solver', 0, T0 + 7), input);
    input[0].setIds.push('changed later');
    input[0].source.offset = 99;
    expect(ledger.map((g) => [g.groupId, g.position, g.policyId, g.updateId, g.createdAtMs])).toEqual([
      ['a', 0, 'solver', 'solver.v1', T0 + 7],
      ['b', 1, 'solver', 'solver.v1', T0 + 7],
    ]);
    expect(ledger[0].setIds).toEqual(['a/s0', 'a/s1']);
    expect(ledger[0].source.offset).toBe(1);
  });

  it('stores the group coordinates as three columns and reads them back', () => {
    const [g] = UpdateGroupRepository.fromInput(recordInput('solver', 0, T0), [groupInput('a', 5)]);
    const row = UpdateGroupRepository.toRow(g);
    expect([row.groupTopic, row.groupPartition, row.groupOffset]).toEqual(['srpo.advantage-groups', 1, 5]);
    expect(UpdateGroupRepository.fromRow(row)).toEqual(g);
  });
});

describe('UpdateGroupRepository on SQLite', () => {
  let dataSource: DataSource;
  let repos: StoreRepositories;

  async function update(before: number, groups: GroupLedgerInput[]): Promise<void> {
    const record = recordInput('solver', before, T0 + before);
    await repos.updates.insert(UpdateRecordRepository.fromInput(record));
    await repos.ledger.insert(UpdateGroupRepository.fromInput(record, groups));
  }

  beforeEach(async () => {
    ({ dataSource, repos } = await openMemoryRepositories());
    await seedPolicy(repos, 'solver');
  });

  afterEach(async () => {
    await dataSource.destroy();
  });

  it('reads an update’s ledger back exactly as written, in position order', async () => {
    const record = recordInput('solver', 0, T0);
    const ledger = UpdateGroupRepository.fromInput(record, [groupInput('b', 1), groupInput('a', 2), groupInput('c', 3)]);
    await repos.updates.insert(UpdateRecordRepository.fromInput(record));
    await repos.ledger.insert(ledger);
    expect(await repos.ledger.listForUpdate('solver.v1')).toEqual(ledger);
    expect(await repos.ledger.listForUpdate('nope')).toEqual([]);
  });

  it('answers which groups are applied across more ids than one IN list holds', async () => {
    // The first and last id of each IN list, and a repeat: none may fall between two lists.
    const edges = [0, IN_CHUNK - 1, IN_CHUNK, 2 * IN_CHUNK - 1, 2 * IN_CHUNK, 2 * IN_CHUNK + 49].map((i) => `g${i}`);
    await update(
      0,
      edges.map((id, i) => groupInput(id, i)),
    );
    const asked = Array.from({ length: 2 * IN_CHUNK + 50 }, (_, i) => `g${i}`);
    const applied = await repos.ledger.appliedIn('solver', [...asked, 'g0']);
    expect([...applied].sort()).toEqual([...edges].sort());
    expect((await repos.ledger.appliedIn('other', asked)).size).toBe(0);
    expect((await repos.ledger.appliedIn('solver', [])).size).toBe(0);
  });

  it('finds groups by exact set id, oldest first', async () => {
    await update(0, [groupInput('b', 1), groupInput('a', 2)]);
    await update(1, [groupInput('c', 3, { setIds: ['a/s0', 'x'], sources: groupInput('c', 3).sources.map((s, i) => ({ ...s, setId: ['a/s0', 'x'][i] })) })]);
    expect((await repos.ledger.findWithSet('a/s0')).map((g) => [g.groupId, g.updateId])).toEqual([
      ['a', 'solver.v1'],
      ['c', 'solver.v2'],
    ]);
    expect(await repos.ledger.findWithSet('a/s')).toEqual([]);
    await expect(repos.ledger.findWithSet('')).rejects.toThrow(/setId: must be a non-empty string/);
  });
});
