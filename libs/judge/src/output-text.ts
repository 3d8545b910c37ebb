import type { AgentOutput } from '@srpo/events';
import type { JudgedText } from './judge-input';

/** Decodes token ids to text; @srpo/hf's `HfTokenizer` is one (a test may pass a table). */
export interface IdDecoder {
  decode(ids: readonly number[], options?: { skipSpecialTokens?: boolean }): string;
}

export type OutputTextResult = { ok: true; text: JudgedText } | { ok: false; reason: 'text_too_long' | 'undecodable_text' | 'sealed_content'; problem: string };

/**
 * An AgentOutput as the text a judge reads. Outputs hold token ids, not text: the prompt
 * (`contextTokenIds`) is decoded with its special tokens (the chat template's role markers show
 * who said what), the response without them (no end-of-turn token). Text longer than `maxChars`
 * (prompt and response together) is refused, not cut: a judge must not score half an answer.
 */
export function outputText(output: AgentOutput, tokenizer: IdDecoder, maxChars: number): OutputTextResult {
  // Sealed content (docs/erasure.md) is not the judge's to open: judging it as empty text would score nothing.
  if (output.sealed !== null)
    return { ok: false, reason: 'sealed_content', problem: `output ${output.outputId} is sealed; srpo judge reads content in the clear only` };
  // A byte-level token holds at least one UTF-8 byte and a character at most four, so more ids than
  // 4 × maxChars (special tokens aside) cannot fit: refused before the decoding work.
  const ids = output.contextTokenIds.length + output.responseTokenIds.length;
  if (ids > 4 * maxChars) return { ok: false, reason: 'text_too_long', problem: `${ids} token ids; the text limit is ${maxChars} characters` };
  let prompt: string;
  let response: string;
  try {
    prompt = tokenizer.decode(output.contextTokenIds, { skipSpecialTokens: false });
    response = tokenizer.decode(output.responseTokenIds, { skipSpecialTokens: true });
  } catch (e) {
    return { ok: false, reason: 'undecodable_text', problem: (e as Error).message };
  }
  if (prompt.length + response.length > maxChars)
    return { ok: false, reason: 'text_too_long', problem: `${prompt.length + response.length} characters; the limit is ${maxChars}` };
  return {
    ok: true,
    text: {
      outputId: output.outputId,
      step: output.step,
      role: output.role,
      agentId: output.agentId,
      policyId: output.policyId,
      policyVersion: output.policyVersion,
      prompt,
      response,
    },
  };
}
