import * as tf from '@tensorflow/tfjs';
import { ValidationError } from '@srpo/core';
import { type CausalLm, tokenLogProbs } from '@srpo/policy';
import type { ChatMessage, HfTokenizer } from './hf-tokenizer';

/** One case of `srpo model score --in FILE`: text (or chat messages with `--chat`), or token ids. */
export type ScoreCase = { prompt: string | ChatMessage[]; response: string } | { promptTokenIds: number[]; responseTokenIds: number[] };

export interface ScoredCase {
  promptTokenIds: number[];
  responseTokenIds: number[];
  /** `logprobs[i] = log p(response[i] | prompt ++ response[<i])`, float32 compute. */
  logprobs: number[];
}

/**
 * Turns the cases of a score file into token ids.
 * - `{prompt, response}`: both tokenized without special tokens; with `chat`, `prompt` is a
 *   list of `{role, content}` messages rendered by the chat template with the generation
 *   prompt (the template writes any BOS the model wants), then tokenized the same way.
 * - `{promptTokenIds, responseTokenIds}`: used as given.
 * Every problem is refused naming the field (`cases[3].prompt`).
 */
export function tokenizeCases(
  raw: unknown,
  tokenizer: HfTokenizer | undefined,
  options: { chat?: boolean } = {},
): { promptTokenIds: number[]; responseTokenIds: number[] }[] {
  if (!Array.isArray(raw)) throw new ValidationError('cases', 'the input must be a JSON array of cases');
  if (raw.length === 0) throw new ValidationError('cases', 'must hold at least one case');
  return raw.map((c: unknown, i) => {
    const at = `cases[${i}]`;
    if (typeof c !== 'object' || c === null || Array.isArray(c)) throw new ValidationError(at, 'must be an object');
    const o = c as Record<string, unknown>;
    if ('promptTokenIds' in o || 'responseTokenIds' in o) {
      return { promptTokenIds: ids(o.promptTokenIds, `${at}.promptTokenIds`), responseTokenIds: ids(o.responseTokenIds, `${at}.responseTokenIds`) };
    }
    if (!tokenizer) throw new ValidationError(at, 'text cases need a model directory with tokenizer.json; give promptTokenIds/responseTokenIds instead');
    if (typeof o.response !== 'string' || o.response.length === 0) throw new ValidationError(`${at}.response`, 'must be a non-empty string');
    let promptText: string;
    if (options.chat) {
      if (!Array.isArray(o.prompt)) throw new ValidationError(`${at}.prompt`, 'with --chat, must be a list of {role, content} messages');
      (o.prompt as unknown[]).forEach((m, j) => {
        const mm = m as Record<string, unknown> | null;
        if (!mm || typeof mm.role !== 'string' || typeof mm.content !== 'string')
          throw new ValidationError(`${at}.prompt[${j}]`, 'must be {"role": string, "content": string}');
      });
      promptText = tokenizer.applyChatTemplate(o.prompt as ChatMessage[], { addGenerationPrompt: true });
    } else {
      if (typeof o.prompt !== 'string') throw new ValidationError(`${at}.prompt`, 'must be a string (or, with --chat, a list of messages)');
      promptText = o.prompt;
    }
    return { promptTokenIds: tokenizer.encode(promptText), responseTokenIds: tokenizer.encode(o.response) };
  });
}

function ids(v: unknown, field: string): number[] {
  if (!Array.isArray(v)) throw new ValidationError(field, 'must be an array of token ids');
  v.forEach((t, j) => {
    if (typeof t !== 'number' || !Number.isSafeInteger(t) || t < 0)
      throw new ValidationError(`${field}[${j}]`, `must be a non-negative integer token id, got ${JSON.stringify(t)}`);
  });
  return v as number[];
}

/**
 * Refuses cases the model cannot score exactly: an empty prompt or response, an id outside
 * the vocabulary, or prompt + response beyond the context (nothing is truncated). Needs only
 * the config, so a command can check its input before loading native TensorFlow.
 */
export function checkScoreCases(
  cases: readonly { promptTokenIds: number[]; responseTokenIds: number[] }[],
  config: { vocabSize: number; maxSeqLen: number },
): void {
  const { vocabSize, maxSeqLen } = config;
  cases.forEach((c, i) => {
    if (c.promptTokenIds.length < 1)
      throw new ValidationError(`cases[${i}].promptTokenIds`, 'must hold at least one token (the first response token is predicted from the prompt)');
    if (c.responseTokenIds.length < 1) throw new ValidationError(`cases[${i}].responseTokenIds`, 'must hold at least one token');
    for (const [field, list] of [
      ['promptTokenIds', c.promptTokenIds],
      ['responseTokenIds', c.responseTokenIds],
    ] as const) {
      const j = list.findIndex((t) => t >= vocabSize);
      if (j >= 0) throw new ValidationError(`cases[${i}].${field}[${j}]`, `token id ${list[j]} is out of range (vocab_size ${vocabSize})`);
    }
    const n = c.promptTokenIds.length + c.responseTokenIds.length - 1;
    if (n > maxSeqLen)
      throw new ValidationError(`cases[${i}]`, `prompt + response need ${n} positions, beyond the model's ${maxSeqLen} (max_position_embeddings)`);
  });
}

/**
 * Scores tokenized cases: `log p(response[i] | prompt ++ response[<i])` at temperature 1, in
 * micro-batches of `batchSize` cases (bounded memory). Nothing is truncated: a case longer
 * than the model's context is refused, as is an id outside the vocabulary.
 */
export async function scoreCases(
  model: CausalLm,
  cases: readonly { promptTokenIds: number[]; responseTokenIds: number[] }[],
  options: { batchSize?: number } = {},
): Promise<ScoredCase[]> {
  checkScoreCases(cases, model.config);
  const batch = options.batchSize ?? 8;
  const out: ScoredCase[] = [];
  for (let s = 0; s < cases.length; s += batch) {
    const chunk = cases.slice(s, s + batch);
    const { logProbs, mask } = tokenLogProbs(
      model,
      chunk.map((c) => ({ contextTokens: c.promptTokenIds, responseTokens: c.responseTokenIds })),
    );
    // Asynchronous read: WebGPU has no synchronous download.
    const rows = await logProbs.array();
    tf.dispose([logProbs, mask]);
    chunk.forEach((c, k) =>
      out.push({ promptTokenIds: c.promptTokenIds, responseTokenIds: c.responseTokenIds, logprobs: rows[k].slice(0, c.responseTokenIds.length) }),
    );
  }
  return out;
}
