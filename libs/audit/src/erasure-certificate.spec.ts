import { generateKeyPairSync } from 'crypto';
import { canonicalJson, checkErasureCertificate, signErasureCertificate } from './erasure-certificate';
import type { ErasureImpact } from './erasure-impact';

function storeKey(id: string) {
  const pair = generateKeyPairSync('ed25519');
  return {
    keyId: id,
    privateKeyPem: pair.privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
    publicKeyPem: pair.publicKey.export({ type: 'spki', format: 'pem' }).toString(),
  };
}

const impact: ErasureImpact = {
  scope: { subjectId: 'bob' },
  keyIds: ['k1', 'k2'],
  sets: [],
  updates: [{ updateId: 'solver.v1', policyId: 'solver', versionBefore: 0, versionAfter: 1, committedAtMs: 5 }],
  versions: [{ policyId: 'solver', version: 1, direct: true, weightsHash: 'a'.repeat(64), checkpointUri: 'file:///c/v1' }],
  cleanBefore: [{ policyId: 'solver', version: 0 }],
};
const erasure = { erasureId: 'er-1', scope: 'subject' as const, target: 'bob', keyIds: ['k1', 'k2'], erasedAtMs: 10 };

describe('erasure certificates', () => {
  it('canonical JSON sorts keys at every level, so key order cannot change what is signed', () => {
    expect(canonicalJson({ b: 1, a: { d: [2, { f: 1, e: 0 }], c: null } })).toBe('{"a":{"c":null,"d":[2,{"e":0,"f":1}]},"b":1}');
  });

  it('verifies as signed, and fails when a field changes, when another key signed it, or against another trusted key', () => {
    const key = storeKey('sk1');
    const cert = signErasureCertificate(erasure, impact, null, key, 20);
    expect(cert).toMatchObject({ erasureId: 'er-1', target: 'bob', keysDeleted: 2, affected: { updates: ['solver.v1'] }, rebuilt: null });
    expect(JSON.stringify(cert)).not.toContain('PRIVATE');
    expect(checkErasureCertificate(JSON.parse(JSON.stringify(cert)) as typeof cert, key.publicKeyPem)).toEqual({ ok: true });
    const changed = { ...cert, affected: { ...cert.affected, updates: [] } };
    expect(checkErasureCertificate(changed)).toEqual({ ok: false, reason: expect.stringMatching(/does not match the statement/) as unknown });
    const other = storeKey('sk2');
    const resigned = { ...signErasureCertificate(erasure, impact, null, other, 20), signer: cert.signer };
    expect(checkErasureCertificate(resigned).ok).toBe(false);
    expect(checkErasureCertificate(cert, other.publicKeyPem)).toEqual({ ok: false, reason: 'signed by another key than the trusted one' });
  });
});
