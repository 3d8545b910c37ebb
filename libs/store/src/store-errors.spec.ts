import { QueryFailedError } from 'typeorm';
import { ErrorCode, SrpoError } from '@srpo/core';
import { dbError, isUniqueViolation } from './store-errors';

function driverError(code: string, message = `driver says ${code}`): QueryFailedError {
  return new QueryFailedError('INSERT ...', [], Object.assign(new Error(message), { code }));
}

describe('store errors', () => {
  it('recognises unique and primary-key violations of both dialects, wrapped or not', () => {
    expect(isUniqueViolation(driverError('23505'))).toBe(true);
    expect(isUniqueViolation(driverError('SQLITE_CONSTRAINT_PRIMARYKEY'))).toBe(true);
    expect(isUniqueViolation(Object.assign(new Error('x'), { code: 'SQLITE_CONSTRAINT_UNIQUE' }))).toBe(true);
    expect(isUniqueViolation(driverError('SQLITE_CONSTRAINT_FOREIGNKEY'))).toBe(false);
    expect(isUniqueViolation(new Error('no code'))).toBe(false);
    expect(isUniqueViolation(null)).toBe(false);
  });

  it('makes connection and contention failures retriable and everything else an integrity failure', () => {
    for (const code of ['ECONNREFUSED', 'SQLITE_BUSY', '40001', '08006']) {
      const e = dbError('listUpdates', driverError(code));
      expect(e).toBeInstanceOf(SrpoError);
      expect([e.code, e.retriable]).toEqual([ErrorCode.UNAVAILABLE, true]);
      expect(e.message).toBe(`audit store listUpdates: driver says ${code}`);
    }
    expect(dbError('ping', new Error('Connection terminated unexpectedly')).code).toBe(ErrorCode.UNAVAILABLE);
    const bug = dbError('recordUpdate', driverError('42P01', 'relation "update_records" does not exist'));
    expect([bug.code, bug.retriable]).toEqual([ErrorCode.INTEGRITY_FAILED, false]);
    expect(bug.message).toBe('audit store recordUpdate failed: relation "update_records" does not exist');
    expect(bug.details).toEqual({ code: '42P01' });
  });
});
