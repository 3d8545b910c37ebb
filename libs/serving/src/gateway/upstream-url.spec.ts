import { fetchFailureReason, redactCredentials, upstreamTarget } from './upstream-url';

describe('upstream URL', () => {
  it('splits credentials off the URL into Basic auth', () => {
    expect(upstreamTarget('http://user:p%40ss@host:8000/v1/')).toEqual({
      base: 'http://host:8000/v1',
      basicAuth: `Basic ${Buffer.from('user:p@ss').toString('base64')}`,
    });
    expect(upstreamTarget('https://host/v1')).toEqual({ base: 'https://host/v1' });
  });

  it('masks the credentials of every URL in a text', () => {
    expect(redactCredentials('cannot reach http://user:secret@host/v1 or https://tok@h2')).toBe('cannot reach http://***@host/v1 or https://***@h2');
  });

  it("gives a fetch failure's socket code or abort name, never the URL", async () => {
    const refused = await fetch('http://user:secret@127.0.0.1:9/v1').catch((e: unknown) => e);
    expect(fetchFailureReason(refused)).not.toMatch(/secret|user/);
    expect(fetchFailureReason(Object.assign(new TypeError('fetch failed'), { cause: { code: 'ECONNREFUSED' } }))).toBe('ECONNREFUSED');
    expect(fetchFailureReason(new DOMException('The operation was aborted due to timeout', 'TimeoutError'))).toBe('TimeoutError');
  });
});
