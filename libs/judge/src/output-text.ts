import { errorMessage } from '@srpo/core';
import { openOutput, type AgentOutput } from '@srpo/events';
import type { JudgedText } from './judge-input';

/** Decodes token ids to text; @srpo/hf's `HfTokenizer` is one (a test may pass a table). */
export interface IdDecoder {
  decode(ids: readonly number[], options?: { skipSpecialTokens?: boolean }): string;
}

/**
 * Why an output is not judged, as counted by `judge_skipped_total{reason}`:
 * - `text_too_long`, `undecodable_text`: its text is over `--max-text-chars`, or its ids do not decode;
 * - `sealed_content`: it is sealed (docs/erasure.md) and the judge has no store to take its key from;
 * - `erased_content`: it is sealed and the store no longer has its key (`srpo erase` deleted it);
 * - `unopenable_content`: its key is there but does not open it (changed bytes, another key, an unknown scheme).
 */
export const OUTPUT_SKIP_REASONS = ['text_too_long', 'undecodable_text', 'sealed_content', 'erased_content', 'unopenable_content'] as const;
export type OutputSkipReason = (typeof OUTPUT_SKIP_REASONS)[number];

export type OutputTextResult = { ok: true; text: JudgedText } | { ok: false; reason: OutputSkipReason; problem: string };

/** The variables that name the store holding the content keys (the learner's), for the message of a `sealed_content` skip. */
export const CONTENT_KEY_STORE_VARIABLES = 'SRPO_DATABASE_URL or SRPO_SQLITE_PATH';

/** The key ids of the sealed outputs among `outputs`, each once: what one `keysById` query fetches for a chunk. */
export function sealedKeyIds(outputs: readonly AgentOutput[]): string[] {
  return [...new Set(outputs.flatMap((o) => (o.sealed === null ? [] : [o.sealed.keyId])))];
}

/**
 * An AgentOutput as the text a judge reads. Outputs hold token ids, not text: the prompt
 * (`contextTokenIds`) is decoded with its special tokens (the chat template's role markers show
 * who said what), the response without them (no end-of-turn token). Text longer than `maxChars`
 * (prompt and response together) is refused, not cut: a judge must not score half an answer.
 *
 * A sealed output (docs/erasure.md) is opened with `keys`, the content keys fetched for its
 * chunk (absent from the map: erased), and then read like one in the clear. `keys` undefined
 * means the judge has no store: the output is skipped, never judged as empty text. The `problem`
 * names ids and key ids only, never content or a key.
 */
export function outputText(output: AgentOutput, tokenizer: IdDecoder, maxChars: number, keys?: ReadonlyMap<string, Buffer>): OutputTextResult {
  const opened = openForJudge(output, keys);
  if (!opened.ok) return opened;
  const clear = opened.output;
  // A byte-level token holds at least one UTF-8 byte and a character at most four, so more ids than
  // 4 × maxChars (special tokens aside) cannot fit: refused before the decoding work.
  const ids = clear.contextTokenIds.length + clear.responseTokenIds.length;
  if (ids > 4 * maxChars) return { ok: false, reason: 'text_too_long', problem: `${ids} token ids; the text limit is ${maxChars} characters` };
  let prompt: string;
  let response: string;
  try {
    prompt = tokenizer.decode(clear.contextTokenIds, { skipSpecialTokens: false });
    response = tokenizer.decode(clear.responseTokenIds, { skipSpecialTokens: true });
  } catch (e) {
    return { ok: false, reason: 'undecodable_text', problem: errorMessage(e) };
  }
  if (prompt.length + response.length > maxChars)
    return { ok: false, reason: 'text_too_long', problem: `${prompt.length + response.length} characters; the limit is ${maxChars}` };
  return {
    ok: true,
    text: {
      outputId: clear.outputId,
      step: clear.step,
      role: clear.role,
      agentId: clear.agentId,
      policyId: clear.policyId,
      policyVersion: clear.policyVersion,
      prompt,
      response,
    },
  };
}

function openForJudge(
  output: AgentOutput,
  keys: ReadonlyMap<string, Buffer> | undefined,
): { ok: true; output: AgentOutput } | { ok: false; reason: OutputSkipReason; problem: string } {
  const sealed = output.sealed;
  if (sealed === null) return { ok: true, output };
  if (keys === undefined)
    return {
      ok: false,
      reason: 'sealed_content',
      problem: `output ${output.outputId} is sealed and srpo judge has no store to open it with: set ${CONTENT_KEY_STORE_VARIABLES} to the store that holds its content keys (the learner's)`,
    };
  const key = keys.get(sealed.keyId);
  if (key === undefined) return { ok: false, reason: 'erased_content', problem: `output ${output.outputId}: its content key ${sealed.keyId} is erased` };
  try {
    return { ok: true, output: openOutput(output, key) };
  } catch (e) {
    // SealOpenError (GCM's check failed, a bad plaintext, an unknown scheme): its message names ids only.
    return { ok: false, reason: 'unopenable_content', problem: errorMessage(e) };
  }
}
