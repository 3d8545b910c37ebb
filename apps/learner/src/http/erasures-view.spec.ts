import { erasuresView } from './erasures-view';

describe('erasuresView', () => {
  it('counts the deleted keys instead of copying their ids, and keeps the order and total it was given', () => {
    const keyIds = ['a'.repeat(32), 'b'.repeat(32)];
    const view = erasuresView(
      {
        erasures: [
          { erasureId: 'er-2', scope: 'subject', target: 'alice', keyIds, erasedAtMs: 1_767_225_600_000 },
          { erasureId: 'er-1', scope: 'episode', target: 'ep-1', keyIds: [], erasedAtMs: 0 },
        ],
        total: 7,
      },
      { policyId: 'solver', setsErased: 3, groupsSkippedErased: 1 },
    );
    expect(view).toEqual({
      erasures: [
        { erasureId: 'er-2', scope: 'subject', target: 'alice', erasedAtMs: 1_767_225_600_000, erasedAt: '2026-01-01T00:00:00.000Z', keysDeleted: 2 },
        { erasureId: 'er-1', scope: 'episode', target: 'ep-1', erasedAtMs: 0, erasedAt: '1970-01-01T00:00:00.000Z', keysDeleted: 0 },
      ],
      total: 7,
      learner: { policyId: 'solver', setsErased: 3, groupsSkippedErased: 1 },
    });
    const text = JSON.stringify(view);
    for (const id of keyIds) expect(text).not.toContain(id);
  });
});
