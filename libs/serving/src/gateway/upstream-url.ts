import { errorMessage } from '@srpo/core';

/** The upstream's base URL split from the credentials it may carry (`http://user:pass@host/v1`). */
export interface UpstreamTarget {
  /** The base URL without credentials and without a trailing slash: what requests go to. */
  base: string;
  /** `Basic …` from the URL's credentials, when it had any (fetch refuses URLs that carry them). */
  basicAuth?: string;
}

export function upstreamTarget(url: string): UpstreamTarget {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return { base: redactCredentials(url).replace(/\/$/, '') };
  }
  const user = decodeURIComponent(parsed.username);
  const pass = decodeURIComponent(parsed.password);
  parsed.username = '';
  parsed.password = '';
  const base = parsed.toString().replace(/\/$/, '');
  return user || pass ? { base, basicAuth: `Basic ${Buffer.from(`${user}:${pass}`).toString('base64')}` } : { base };
}

/** `text` with the user-info of every URL in it masked: fit for a log line or an error message. */
export function redactCredentials(text: string): string {
  return text.replace(/([a-z][a-z0-9+.-]*:\/\/)[^\s/@]*@/gi, '$1***@');
}

/**
 * Why a fetch failed, in a few words fit for a client: the socket error's code (ECONNREFUSED,
 * ENOTFOUND) or the abort's name, never the URL or the message that may hold it.
 */
export function fetchFailureReason(e: unknown): string {
  const cause = (e as { cause?: { code?: unknown } } | undefined)?.cause;
  if (typeof cause?.code === 'string') return cause.code;
  // An abort is a DOMException (TimeoutError, AbortError), not always an `instanceof Error` across realms.
  const name = (e as { name?: unknown } | undefined)?.name;
  if (typeof name === 'string' && name !== 'TypeError' && name !== 'Error') return name;
  return redactCredentials(errorMessage(e)).slice(0, 200);
}
