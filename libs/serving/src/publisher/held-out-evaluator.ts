import * as fs from 'fs';
import { ErrorCode, errorMessage, SrpoError, ValidationError } from '@srpo/core';
import { serverBase } from './lora-server-client';
import type { SuccessCount } from './gate-rule';

/** One version's score on a held-out set. */
export interface HeldOutResult extends SuccessCount {
  /** Per item, in order: whether it was solved (lets a caller pair the two versions' outcomes). */
  solved?: boolean[];
}

/**
 * Scores one served model on a held-out task set through a server's OpenAI API. The publishing
 * gate calls it for the candidate and for the serving version with the same server, so both are
 * scored on the same items. Failures another attempt may cure are retriable `SrpoError`s.
 */
export interface HeldOutEvaluator {
  /** What is evaluated, for decision records (e.g. `jsonl:/data/held-out.jsonl (200 items)`). */
  readonly description: string;
  evaluate(baseUrl: string, model: string, o?: { signal?: AbortSignal }): Promise<HeldOutResult>;
}

/** One held-out item: a chat and the expected answer. */
export interface HeldOutItem {
  messages: { role: string; content: string }[];
  answer: string;
}

export const HELD_OUT_LIMITS = { maxItems: 10_000, maxTokens: 4096, maxConcurrency: 64, maxLineBytes: 1 << 20 } as const;

export interface JsonlEvaluatorOptions {
  /** Items used (the file's first). */
  maxItems: number;
  /** `max_tokens` of each request. */
  maxTokens: number;
  /** `seed` of each request (greedy decoding needs none, but a server that samples anyway is then repeatable). */
  seed: number;
  /** Requests in flight at once. */
  concurrency: number;
  timeoutMs?: number;
  apiKey?: string;
}

/**
 * The built-in held-out evaluator: a JSONL file, one `{"messages": [{"role", "content"}, …],
 * "answer": "42"}` per line (blank lines skipped), scored by {@link answerMatches} on the reply of
 * `POST /v1/chat/completions` with `temperature: 0` (greedy), the configured `seed` and
 * `max_tokens`. The file is read and checked once, at construction, failing with the line.
 */
export class JsonlHeldOutEvaluator implements HeldOutEvaluator {
  readonly items: HeldOutItem[];
  readonly description: string;

  constructor(
    readonly file: string,
    private readonly o: JsonlEvaluatorOptions,
  ) {
    bound('maxItems', o.maxItems, 1, HELD_OUT_LIMITS.maxItems);
    bound('maxTokens', o.maxTokens, 1, HELD_OUT_LIMITS.maxTokens);
    bound('concurrency', o.concurrency, 1, HELD_OUT_LIMITS.maxConcurrency);
    this.items = readHeldOutFile(file, o.maxItems);
    this.description = `jsonl:${file} (${this.items.length} items, max_tokens ${o.maxTokens}, seed ${o.seed})`;
  }

  async evaluate(baseUrl: string, model: string, opts: { signal?: AbortSignal } = {}): Promise<HeldOutResult> {
    const solved = new Array<boolean>(this.items.length).fill(false);
    let next = 0;
    const worker = async () => {
      while (next < this.items.length) {
        const i = next++;
        const item = this.items[i];
        solved[i] = answerMatches(await this.complete(baseUrl, model, item, opts.signal), item.answer);
      }
    };
    await Promise.all(Array.from({ length: Math.min(this.o.concurrency, this.items.length) }, worker));
    return { successes: solved.filter(Boolean).length, trials: solved.length, solved };
  }

  private async complete(baseUrl: string, model: string, item: HeldOutItem, signal?: AbortSignal): Promise<string> {
    const url = `${serverBase(baseUrl)}/v1/chat/completions`;
    const timeout = AbortSignal.timeout(this.o.timeoutMs ?? 120_000);
    let res: Response;
    try {
      res = await fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...(this.o.apiKey ? { authorization: `Bearer ${this.o.apiKey}` } : {}) },
        body: JSON.stringify({ model, messages: item.messages, temperature: 0, seed: this.o.seed, max_tokens: this.o.maxTokens }),
        signal: signal ? AbortSignal.any([signal, timeout]) : timeout,
      });
    } catch (e) {
      throw new SrpoError(ErrorCode.UNAVAILABLE, `${url}: unreachable (${errorMessage(e)})`, { retriable: true, cause: e });
    }
    const text = await res.text().catch(() => '');
    if (!res.ok) {
      const retriable = res.status >= 500 || res.status === 429 || res.status === 408;
      throw new SrpoError(retriable ? ErrorCode.UNAVAILABLE : ErrorCode.VALIDATION_FAILED, `${url} (${model}) answered ${res.status}: ${text.slice(0, 300)}`, {
        retriable,
      });
    }
    let content: unknown;
    try {
      content = (JSON.parse(text) as { choices?: { message?: { content?: unknown } }[] }).choices?.[0]?.message?.content;
    } catch {
      content = undefined;
    }
    if (typeof content !== 'string' && content !== null)
      throw new SrpoError(ErrorCode.VALIDATION_FAILED, `${url} (${model}): the answer has no choices[0].message.content`);
    return content ?? '';
  }
}

/** Reads and checks a held-out JSONL file: its first `maxItems` items. */
export function readHeldOutFile(file: string, maxItems: number): HeldOutItem[] {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (e) {
    throw new SrpoError(ErrorCode.NOT_FOUND, `${file}: cannot be read (${errorMessage(e)})`, { cause: e });
  }
  const items: HeldOutItem[] = [];
  const lines = text.split('\n');
  for (let n = 0; n < lines.length && items.length < maxItems; n++) {
    const line = lines[n].trim();
    if (line === '') continue;
    const where = `${file}:${n + 1}`;
    if (line.length > HELD_OUT_LIMITS.maxLineBytes) throw new ValidationError(where, `longer than ${HELD_OUT_LIMITS.maxLineBytes} characters`);
    let j: { messages?: unknown; answer?: unknown };
    try {
      j = JSON.parse(line) as typeof j;
    } catch (e) {
      throw new ValidationError(where, `not JSON (${errorMessage(e)})`);
    }
    const messages = j.messages;
    if (
      !Array.isArray(messages) ||
      messages.length === 0 ||
      !messages.every((m: { role?: unknown; content?: unknown }) => typeof m?.role === 'string' && typeof m?.content === 'string')
    )
      throw new ValidationError(`${where} messages`, 'must be a non-empty array of {"role": string, "content": string}');
    if (typeof j.answer !== 'string' && typeof j.answer !== 'number') throw new ValidationError(`${where} answer`, 'must be a string or a number');
    items.push({ messages: messages as HeldOutItem['messages'], answer: String(j.answer) });
  }
  if (items.length === 0) throw new ValidationError(file, 'holds no item');
  return items;
}

const NUMBER = /-?\d[\d,]*(?:\.\d+)?/g;
const NUMERIC_ANSWER = /^\s*-?\d[\d,]*(?:\.\d+)?\s*$/;

/**
 * Whether a reply solves an item.
 * - A numeric answer (`42`, `-3.5`, `1,200`): the last number in the reply (thousands commas
 *   dropped) equals it numerically, so `… so the total is 1200.` solves `1,200`.
 * - Any other answer: the whole reply equals it after {@link normaliseAnswer}.
 */
export function answerMatches(reply: string, answer: string): boolean {
  if (NUMERIC_ANSWER.test(answer)) {
    const numbers = reply.match(NUMBER);
    if (!numbers) return false;
    const last = Number(numbers[numbers.length - 1].replace(/,/g, ''));
    return Math.abs(last - Number(answer.trim().replace(/,/g, ''))) < 1e-9;
  }
  return normaliseAnswer(reply) === normaliseAnswer(answer);
}

/** Unicode NFKC, lower case, runs of white space as one space, and no surrounding white space, quotes or `.,;:!?`. */
export function normaliseAnswer(s: string): string {
  return s
    .normalize('NFKC')
    .toLowerCase()
    .replace(/\s+/g, ' ')
    .replace(/^[\s"'`.,;:!?]+|[\s"'`.,;:!?]+$/g, '');
}

function bound(field: string, v: number, min: number, max: number): void {
  if (!Number.isInteger(v) || v < min || v > max) throw new ValidationError(field, `must be an integer within [${min}, ${max}], got ${v}`);
}
