import * as fs from 'fs';
import * as path from 'path';
import { ValidationError } from '@srpo/core';
import { HfTokenizer, type ChatMessage } from '@srpo/hf';
import type { FunctionTool } from './tool-calls';

/**
 * Text ↔ token ids for one served model: what the OpenAI-compatible API needs around a
 * policy that only knows ids.
 */
export interface TextCodec {
  /** `hf` (the model directory's tokenizer.json) or `symbols` (the project transformer's one-character table). */
  readonly kind: 'hf' | 'symbols';
  /** Ids of a completion prompt, without special tokens added (as vLLM's `add_special_tokens=false` for completions). */
  encode(text: string, field: string): number[];
  /** Text of generated ids, special tokens skipped (OpenAI's responses carry none). */
  decode(ids: readonly number[]): string;
  /** One token's own text, special tokens included: the `token` of a log-prob entry. */
  tokenText(id: number): string;
  /**
   * The chat template rendered with the generation prompt (and the request's function tools, under
   * `tools`), tokenized; refused where the model has no template, or tools where it does not render them.
   * `prefill` is text appended after the generation prompt, tokenized with it (a forced call's opening).
   */
  chatPrompt(messages: readonly ChatMessage[], tools?: readonly FunctionTool[], prefill?: string): number[];
  /** Ids that end a completion (`finish_reason: "stop"`): the EOS ids of generation_config.json and the tokenizer. */
  readonly stopIds: readonly number[];
}

/**
 * The one-character text of each id of the project transformer's symbol vocabulary, in id
 * order (the agents' workflows, libs/workflows/src/tokenizer.ts): BOS `^`, SEP `|`, digits 0–7,
 * `Y`, `N`, `_` (blank), `S` `C` `W` `R` `A` `Q` (the role markers), slots `a`–`d`,
 * documents `p`–`u`, `>`, `=`, `~`. A Hugging Face model's agents bind the same texts to its
 * tokenizer's tokens, so one prompt text means the same task to both kinds of model.
 */
export const SYMBOL_TEXTS = '^|01234567YN_SCWRAQabcdpqrstu>=~';

/**
 * The project transformer's codec: one character per id for the first 32 ids. An id past the
 * table (a model with a larger `vocabSize`) is written `<|t123|>`, which `encode` reads back.
 * It has no chat template and no end token.
 */
export class SymbolTextCodec implements TextCodec {
  readonly kind = 'symbols' as const;
  readonly stopIds: readonly number[] = [];

  constructor(private readonly vocabSize: number) {}

  encode(text: string, field: string): number[] {
    const ids: number[] = [];
    for (let i = 0; i < text.length;) {
      const m = /^<\|t(\d+)\|>/.exec(text.slice(i, i + 16));
      if (m) {
        ids.push(this.checkId(Number(m[1]), field));
        i += m[0].length;
        continue;
      }
      const id = SYMBOL_TEXTS.indexOf(text[i]);
      if (id < 0 || id >= this.vocabSize) {
        throw new ValidationError(
          field,
          `character ${JSON.stringify(text[i])} at ${i} is not in this model's vocabulary (one character per token: ${SYMBOL_TEXTS.slice(0, this.vocabSize)}, or <|tN|>)`,
        );
      }
      ids.push(id);
      i++;
    }
    return ids;
  }

  decode(ids: readonly number[]): string {
    return ids.map((id) => this.tokenText(id)).join('');
  }

  tokenText(id: number): string {
    return id >= 0 && id < SYMBOL_TEXTS.length ? SYMBOL_TEXTS[id] : `<|t${id}|>`;
  }

  chatPrompt(): number[] {
    throw new ValidationError('messages', "this model is the project's transformer, which has no chat template; use /v1/completions with a prompt");
  }

  private checkId(id: number, field: string): number {
    if (!(id >= 0 && id < this.vocabSize)) throw new ValidationError(field, `token <|t${id}|> is outside this model's vocabulary (${this.vocabSize} ids)`);
    return id;
  }
}

/** A Hugging Face directory's tokenizer, chat template and end tokens. */
export class HfTextCodec implements TextCodec {
  readonly kind = 'hf' as const;
  readonly stopIds: readonly number[];

  private constructor(
    private readonly tokenizer: HfTokenizer,
    stopIds: number[],
  ) {
    this.stopIds = [...new Set(stopIds)].sort((a, b) => a - b);
  }

  static fromDirectory(dir: string): HfTextCodec {
    const tokenizer = HfTokenizer.fromDirectory(dir);
    const stops: number[] = [];
    const genFile = path.join(dir, 'generation_config.json');
    if (fs.existsSync(genFile)) {
      const eos = (JSON.parse(fs.readFileSync(genFile, 'utf8')) as { eos_token_id?: unknown }).eos_token_id;
      for (const id of Array.isArray(eos) ? eos : [eos]) if (Number.isInteger(id)) stops.push(id as number);
    }
    const eosToken = tokenizer.eosToken;
    const eosId = eosToken === undefined ? undefined : tokenizer.tokenToId(eosToken);
    if (eosId !== undefined) stops.push(eosId);
    return new HfTextCodec(tokenizer, stops);
  }

  encode(text: string): number[] {
    return this.tokenizer.encode(text);
  }

  decode(ids: readonly number[]): string {
    return this.tokenizer.decode(ids, { skipSpecialTokens: true });
  }

  tokenText(id: number): string {
    return this.tokenizer.decode([id]);
  }

  chatPrompt(messages: readonly ChatMessage[], tools?: readonly FunctionTool[], prefill = ''): number[] {
    return this.tokenizer.encode(this.render(messages, tools, true) + prefill);
  }

  /** The chat template rendered (with or without the generation prompt) and tokenized. */
  chatIds(messages: readonly ChatMessage[], tools: readonly FunctionTool[] | undefined, addGenerationPrompt: boolean): number[] {
    return this.tokenizer.encode(this.render(messages, tools, addGenerationPrompt));
  }

  private render(messages: readonly ChatMessage[], tools: readonly FunctionTool[] | undefined, addGenerationPrompt: boolean): string {
    return this.tokenizer.applyChatTemplate(messages, { addGenerationPrompt, ...(tools ? { tools } : {}) });
  }
}
