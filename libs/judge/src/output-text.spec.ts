import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { Logger } from '@srpo/core';
import { sampleEvents, sealOutput, type AgentOutput } from '@srpo/events';
import { KeyStore } from '@srpo/store';
import { outputText, sealedKeyIds } from './output-text';

Logger.configure({ level: 'warn' });

const table = { decode: (ids: readonly number[]) => ids.map((i) => String.fromCharCode(96 + (i % 26))).join('') };
const T0 = 1_767_225_600_000;

describe('outputText', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-judge-keys-'));
  let keys: KeyStore;
  beforeAll(async () => {
    keys = await KeyStore.open({ kind: 'sqlite', path: path.join(dir, 'keys.sqlite') });
  });
  afterAll(async () => {
    await keys.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  const clearOutput = (episodeId: string, subjectId: string): AgentOutput => ({
    ...sampleEvents(1).AgentOutput,
    outputId: `${episodeId}/o0`,
    episodeId,
    subjectId,
    contextTokenIds: [1, 2],
    responseTokenIds: [3, 4, 5],
  });
  const sealed = async (o: AgentOutput) => sealOutput(o, await keys.keyFor(o.subjectId, o.episodeId, T0));

  it('reads an output in the clear, and a sealed one opened with its key as the very same text', async () => {
    const clear = clearOutput('ep-1', 'alice');
    const inClear = outputText(clear, table, 100);
    expect(inClear.ok && [inClear.text.prompt, inClear.text.response]).toEqual(['ab', 'cde']);
    const s = await sealed(clear);
    expect([s.contextTokenIds, s.responseTokenIds]).toEqual([[], []]);
    const fetched = await keys.keysById(sealedKeyIds([s, clear, s]));
    expect([...fetched.keys()]).toEqual([s.sealed?.keyId]);
    expect(outputText(s, table, 100, fetched)).toEqual(inClear);
    // The length limit applies to the opened text, not to the empty fields of the sealed event.
    expect(outputText(s, table, 4, fetched)).toEqual({ ok: false, reason: 'text_too_long', problem: '5 characters; the limit is 4' });
  });

  it('skips a sealed output whose key was erased, or whose bytes were changed, each with its own reason', async () => {
    const bob = await sealed(clearOutput('ep-2', 'bob'));
    const carol = await sealed(clearOutput('ep-3', 'carol'));
    const bobKeyId = bob.sealed?.keyId as string;
    const carolKey = (await keys.keysById([carol.sealed?.keyId as string])).get(carol.sealed?.keyId as string) as Buffer;
    const erasure = await keys.erase({ subjectId: 'bob' }, 'er-judge', T0 + 1);
    expect(erasure.erasure.keyIds).toEqual([bobKeyId]);

    const fetched = await keys.keysById(sealedKeyIds([bob, carol]));
    expect([...fetched.keys()]).toEqual([carol.sealed?.keyId]);
    expect(outputText(bob, table, 100, fetched)).toEqual({
      ok: false,
      reason: 'erased_content',
      problem: `output ep-2/o0: its content key ${bobKeyId} is erased`,
    });

    // One bit of the ciphertext flipped: GCM's tag check fails.
    const ciphertext = Buffer.from(carol.sealed?.ciphertext as Buffer);
    ciphertext[0] ^= 1;
    const tampered: AgentOutput = { ...carol, sealed: { ...(carol.sealed as NonNullable<AgentOutput['sealed']>), ciphertext } };
    const r = outputText(tampered, table, 100, fetched);
    expect(r.ok ? 'opened' : r.reason).toBe('unopenable_content');
    expect(r.ok ? '' : r.problem).toBe(`output ep-3/o0 does not open with key ${carol.sealed?.keyId} (another key, or changed bytes)`);
    // Its untouched original still opens with the same key.
    expect(outputText(carol, table, 100, fetched).ok).toBe(true);
    // No problem message holds a key.
    expect(r.ok ? '' : r.problem).not.toContain(carolKey.toString('hex'));
  });

  it('without a store, skips a sealed output as sealed_content and says which variable to set, never judging empty text', async () => {
    const s = await sealed(clearOutput('ep-4', 'dave'));
    expect(outputText(s, table, 100)).toEqual({
      ok: false,
      reason: 'sealed_content',
      problem:
        "output ep-4/o0 is sealed and srpo judge has no store to open it with: set SRPO_DATABASE_URL or SRPO_SQLITE_PATH to the store that holds its content keys (the learner's)",
    });
  });
});
