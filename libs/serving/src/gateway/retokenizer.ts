import { ValidationError } from '@srpo/core';
import { HfTextCodec } from '../text-codec';
import type { Retokenizer } from './completion-record';

/**
 * Re-tokenizes with a Hugging Face directory's tokenizer, for upstreams that return text and
 * log-probs but no ids: chat prompts through the chat template with the generation prompt,
 * completion prompts and completions without special tokens. The ids may differ from what
 * the upstream sampled (a tokenizer is not injective on text), so the events say
 * `tokenIdOrigin: retokenized`, and a count that disagrees with the log-probs is refused.
 */
export function hfRetokenizer(dir: string): Retokenizer {
  const codec = HfTextCodec.fromDirectory(dir);
  return {
    prompt(body) {
      if (Array.isArray(body.messages)) {
        return codec.chatPrompt(
          body.messages.map((m, i) => {
            const { role, content } = (m ?? {}) as { role?: unknown; content?: unknown };
            const text = typeof content === 'string' ? content : Array.isArray(content) ? content.map(partText).join('') : undefined;
            if (typeof role !== 'string' || text === undefined)
              throw new ValidationError(`messages[${i}]`, 'must have a role and text content to be re-tokenized');
            return { role, content: text };
          }),
        );
      }
      if (typeof body.prompt === 'string') return codec.encode(body.prompt);
      if (Array.isArray(body.prompt) && body.prompt.every((t) => Number.isInteger(t))) return body.prompt as number[];
      throw new ValidationError('prompt', 'must be a string or token ids to be re-tokenized');
    },
    text: (text) => codec.encode(text),
  };
}

/** A content part's text (the request's JSON; `text` is a string when present). */
function partText(part: unknown): string {
  // eslint-disable-next-line @typescript-eslint/no-base-to-string -- the part's `text` is a string when present
  return String((part as { text?: unknown }).text ?? '');
}
