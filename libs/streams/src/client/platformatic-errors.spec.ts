import { ErrorCode, isRetriable, SrpoError } from '@srpo/core';
import { asStreamFailure } from './platformatic-stream-client';

/** The client's own error classes, loaded as the client loads them (the package is ESM-only). */
type Pk = typeof import('@platformatic/kafka');
const pk = (process as unknown as { getBuiltinModule(n: 'module'): typeof import('module') }).getBuiltinModule('module').createRequire(__filename)(
  '@platformatic/kafka',
) as Pk;

describe('failures of the platformatic client, as the runtime sees them', () => {
  it('makes network failures retriable, alone or aggregated, so start and restart loops keep trying while the broker is away', () => {
    const refused = new pk.NetworkError('Connection to 127.0.0.1:9092 failed.');
    const aggregated = new pk.MultipleErrors('findGroupCoordinator failed 4 times.', [refused, refused, refused, refused]);
    const timeout = new pk.TimeoutError('Connection timeout.');
    for (const e of [refused, aggregated, timeout]) {
      expect(isRetriable(e)).toBe(false); // what the project's retrier would have concluded before
      const wrapped = asStreamFailure(e);
      expect(wrapped).toBeInstanceOf(SrpoError);
      expect((wrapped as SrpoError).code).toBe(ErrorCode.UNAVAILABLE);
      expect(isRetriable(wrapped)).toBe(true);
      expect((wrapped as Error).message).toContain((e as Error).message);
      expect((wrapped as Error).cause).toBe(e);
    }
  });

  it('leaves fencing and other failures as they are: not retriable', () => {
    const fenced = new pk.ProtocolError('PRODUCER_FENCED');
    const inResponse = new pk.MultipleErrors('Received response with error while executing API InitProducerId(v5)', [fenced]);
    const user = new pk.UserError('The producer is in use by another transaction.');
    for (const e of [fenced, inResponse, user]) {
      expect(asStreamFailure(e)).toBe(e);
      expect(isRetriable(asStreamFailure(e))).toBe(false);
    }
    const already = new SrpoError(ErrorCode.CONFLICT, 'taken over');
    expect(asStreamFailure(already)).toBe(already);
  });
});
