import { createPublicKey, sign, verify } from 'crypto';
import type { ErasureRecord, StoreSigningKey } from '@srpo/store';
import type { ErasureImpact } from './erasure-impact';
import type { RebuiltLineage } from './erasure-rebuild';

export const CERTIFICATE_FORMAT = 'srpo-erasure-certificate/v1';

/** What an erasure certificate states, before its signature. */
export interface ErasureStatement {
  format: typeof CERTIFICATE_FORMAT;
  erasureId: string;
  scope: ErasureRecord['scope'];
  target: string;
  erasedAtMs: number;
  /** How many content keys were deleted (their ids are in the store's `erasures` row). */
  keysDeleted: number;
  /** The updates that trained on the data and every version it reached. */
  affected: { updates: string[]; versions: { policyId: string; version: number; direct: boolean; weightsHash: string }[] };
  /** The lineage rebuilt without it, when one was; null otherwise. */
  rebuilt: {
    policyId: string;
    run: string;
    fromVersion: number;
    head: { version: number; weightsHash: string };
    lineageHash: string;
    updatesVerified: number;
  } | null;
  issuedAtMs: number;
  /** The store's signing key: its id and public half (SPKI PEM). */
  signer: { keyId: string; publicKeyPem: string };
}

/** A signed statement: Ed25519 over {@link canonicalJson} of the statement, base64. */
export interface ErasureCertificate extends ErasureStatement {
  signature: string;
}

/** JSON with object keys sorted at every level and no spaces: one byte string per statement, whatever the writer's key order. */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const o = value as Record<string, unknown>;
    return `{${Object.keys(o)
      .filter((k) => o[k] !== undefined)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonicalJson(o[k])}`)
      .join(',')}}`;
  }
  return JSON.stringify(value);
}

/** The statement of an erasure, its impact and its rebuilt lineage, signed with the store's key. */
export function signErasureCertificate(
  erasure: ErasureRecord,
  impact: ErasureImpact,
  rebuilt: RebuiltLineage | null,
  key: StoreSigningKey,
  issuedAtMs: number,
): ErasureCertificate {
  const statement: ErasureStatement = {
    format: CERTIFICATE_FORMAT,
    erasureId: erasure.erasureId,
    scope: erasure.scope,
    target: erasure.target,
    erasedAtMs: erasure.erasedAtMs,
    keysDeleted: erasure.keyIds.length,
    affected: {
      updates: impact.updates.map((u) => u.updateId),
      versions: impact.versions.map((v) => ({ policyId: v.policyId, version: v.version, direct: v.direct, weightsHash: v.weightsHash })),
    },
    rebuilt: rebuilt && {
      policyId: rebuilt.policyId,
      run: rebuilt.run,
      fromVersion: rebuilt.fromVersion,
      head: { version: rebuilt.head.version, weightsHash: rebuilt.head.weightsHash },
      lineageHash: rebuilt.lineageHash,
      updatesVerified: rebuilt.verified,
    },
    issuedAtMs,
    signer: { keyId: key.keyId, publicKeyPem: key.publicKeyPem },
  };
  return { ...statement, signature: sign(null, Buffer.from(canonicalJson(statement)), key.privateKeyPem).toString('base64') };
}

/**
 * Checks a certificate: its format, that its signature is its signer's over its statement, and,
 * with `trustedPublicKeyPem` (the store's, which the auditor pinned), that the signer is that key.
 */
export function checkErasureCertificate(cert: ErasureCertificate, trustedPublicKeyPem?: string): { ok: true } | { ok: false; reason: string } {
  // Read from a file: the fields are checked as what they may be, not what the type says.
  const format: unknown = cert.format;
  if (format !== CERTIFICATE_FORMAT) return { ok: false, reason: `format is ${JSON.stringify(format)}, expected ${CERTIFICATE_FORMAT}` };
  if (typeof cert.signature !== 'string' || typeof cert.signer?.publicKeyPem !== 'string') return { ok: false, reason: 'no signature or signer' };
  const { signature, ...statement } = cert;
  let good: boolean;
  try {
    good = verify(null, Buffer.from(canonicalJson(statement)), createPublicKey(cert.signer.publicKeyPem), Buffer.from(signature, 'base64'));
  } catch (e) {
    return { ok: false, reason: `the signer's key does not read: ${(e as Error).message}` };
  }
  if (!good) return { ok: false, reason: 'the signature does not match the statement (changed since it was signed, or another key signed it)' };
  if (trustedPublicKeyPem !== undefined) {
    const der = (pem: string) => createPublicKey(pem).export({ type: 'spki', format: 'der' });
    if (!der(trustedPublicKeyPem).equals(der(cert.signer.publicKeyPem))) return { ok: false, reason: 'signed by another key than the trusted one' };
  }
  return { ok: true };
}
