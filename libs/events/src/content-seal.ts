import { createCipheriv, createDecipheriv, randomBytes } from 'crypto';
import { ErrorCode, SrpoError, ValidationError } from '@srpo/core';
import type { AgentOutput, SealedContent } from './event-types';

/**
 * Crypto-shredding of an agent output's user content (docs/erasure.md).
 *
 * Kafka cannot delete one record from the middle of a topic, and sets, groups, changelogs and
 * replays copy an output's bytes further. So the content (the prompt's and the response's token
 * ids) is written encrypted under a key of its data subject and episode, kept only in the store;
 * deleting that key erases every copy at once.
 *
 * Scheme `aes-256-gcm/v1`:
 * - key: 32 random bytes per (subjectId, episodeId);
 * - nonce: 12 random bytes per event;
 * - plaintext: `uint32le(|context|) ‖ int32le(context…) ‖ int32le(response…)`;
 * - associated data: `srpo-sealed/v1 ‖ 0 ‖ outputId ‖ 0 ‖ episodeId ‖ 0 ‖ subjectId ‖ 0 ‖ keyId`
 *   (UTF-8, `subjectId` empty when null), so a ciphertext moved onto another event fails to open;
 * - ciphertext: GCM's output with its 16-byte tag appended.
 * `behaviourLogProbs` and `lossMask` stay in the clear: they are the policy's numbers, not the
 * user's, and the materializer checks them without a key.
 */
export const SEAL_SCHEME = 'aes-256-gcm/v1';
export const CONTENT_KEY_BYTES = 32;
const NONCE_BYTES = 12;
const TAG_BYTES = 16;
const AAD_LABEL = 'srpo-sealed/v1';

/** A content key as the keyring hands it out. */
export interface ContentKey {
  keyId: string;
  /** {@link CONTENT_KEY_BYTES} bytes. */
  key: Buffer;
}

/** Where readers get content keys by id (the store's KeyStore); an erased key is absent from the map. */
export interface ContentKeySource {
  keysById(keyIds: readonly string[]): Promise<Map<string, Buffer>>;
}

/** The output cannot be opened: its key is gone (erased) or the sealed bytes are not what was sealed. */
export class SealOpenError extends SrpoError {
  constructor(message: string) {
    super(ErrorCode.INTEGRITY_FAILED, message, { field: 'AgentOutput.sealed' });
  }
}

/** The associated data that binds a sealed payload to its event's identity. */
export function sealAssociatedData(output: Pick<AgentOutput, 'outputId' | 'episodeId' | 'subjectId'>, keyId: string): Buffer {
  return Buffer.from([AAD_LABEL, output.outputId, output.episodeId, output.subjectId ?? '', keyId].join('\0'), 'utf8');
}

/** The plaintext layout: the context's count, then both id lists as int32 little-endian. */
export function tokenPlaintext(context: readonly number[], response: readonly number[]): Buffer {
  const out = Buffer.alloc(4 + 4 * (context.length + response.length));
  out.writeUInt32LE(context.length, 0);
  let at = 4;
  for (const t of context) at = out.writeInt32LE(t, at);
  for (const t of response) at = out.writeInt32LE(t, at);
  return out;
}

/** Inverse of {@link tokenPlaintext}; the count is checked against the bytes before anything is read. */
export function tokensOfPlaintext(bytes: Buffer): { contextTokenIds: number[]; responseTokenIds: number[] } {
  if (bytes.length < 4 || bytes.length % 4 !== 0) throw new SealOpenError(`sealed plaintext of ${bytes.length} bytes is not a whole number of int32s`);
  const total = (bytes.length - 4) / 4;
  const n = bytes.readUInt32LE(0);
  if (n > total) throw new SealOpenError(`sealed plaintext claims ${n} context tokens but holds ${total} ids`);
  const ids = (from: number, count: number): number[] => Array.from({ length: count }, (_, i) => bytes.readInt32LE(4 + 4 * (from + i)));
  return { contextTokenIds: ids(0, n), responseTokenIds: ids(n, total - n) };
}

/**
 * The output with its token ids sealed under `key`: `contextTokenIds` and `responseTokenIds`
 * emptied, `sealed` set. `nonce` is for tests (a fixed nonce is only safe for fixed inputs).
 */
export function sealOutput(output: AgentOutput, key: ContentKey, nonce: Buffer = randomBytes(NONCE_BYTES)): AgentOutput {
  if (output.sealed !== null) throw new ValidationError('AgentOutput.sealed', 'is already set; an output is sealed once');
  checkKey(key.key);
  if (nonce.length !== NONCE_BYTES) throw new ValidationError('nonce', `must be ${NONCE_BYTES} bytes, got ${nonce.length}`);
  const cipher = createCipheriv('aes-256-gcm', key.key, nonce, { authTagLength: TAG_BYTES });
  cipher.setAAD(sealAssociatedData(output, key.keyId));
  const body = Buffer.concat([cipher.update(tokenPlaintext(output.contextTokenIds, output.responseTokenIds)), cipher.final(), cipher.getAuthTag()]);
  return { ...output, contextTokenIds: [], responseTokenIds: [], sealed: { scheme: SEAL_SCHEME, keyId: key.keyId, nonce, ciphertext: body } };
}

/**
 * The output's token ids, opened with `key` (the key named by `output.sealed.keyId`), and
 * `sealed` null; an output in the clear comes back as it is. Throws {@link SealOpenError} when the
 * key does not open it (another key, or bytes changed since sealing).
 */
export function openOutput(output: AgentOutput, key: Buffer | undefined): AgentOutput {
  const sealed = output.sealed;
  if (sealed === null) return output;
  if (key === undefined) throw new SealOpenError(`no key ${sealed.keyId} to open output ${output.outputId}`);
  return { ...output, ...openSealed(output, sealed, key), sealed: null };
}

function openSealed(output: AgentOutput, sealed: SealedContent, key: Buffer): { contextTokenIds: number[]; responseTokenIds: number[] } {
  if (sealed.scheme !== SEAL_SCHEME)
    throw new SealOpenError(`unknown seal scheme ${JSON.stringify(sealed.scheme.slice(0, 40))}; this reader knows ${SEAL_SCHEME}`);
  checkKey(key);
  if (sealed.nonce.length !== NONCE_BYTES) throw new SealOpenError(`nonce has ${sealed.nonce.length} bytes, expected ${NONCE_BYTES}`);
  if (sealed.ciphertext.length < TAG_BYTES) throw new SealOpenError('ciphertext is shorter than its tag');
  const body = sealed.ciphertext.subarray(0, sealed.ciphertext.length - TAG_BYTES);
  const decipher = createDecipheriv('aes-256-gcm', key, sealed.nonce, { authTagLength: TAG_BYTES });
  decipher.setAAD(sealAssociatedData(output, sealed.keyId));
  decipher.setAuthTag(sealed.ciphertext.subarray(body.length));
  let plain: Buffer;
  try {
    plain = Buffer.concat([decipher.update(body), decipher.final()]);
  } catch {
    throw new SealOpenError(`output ${output.outputId} does not open with key ${sealed.keyId} (another key, or changed bytes)`);
  }
  return tokensOfPlaintext(plain);
}

function checkKey(key: Buffer): void {
  if (key.length !== CONTENT_KEY_BYTES) throw new ValidationError('key', `must be ${CONTENT_KEY_BYTES} bytes, got ${key.length}`);
}
