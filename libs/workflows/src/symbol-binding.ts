import { ConfigError, ValidationError } from '@srpo/core';
import type { HfTokenizer } from '@srpo/hf';
import { MAX_DIGITS, MAX_DOCS, MAX_WORKERS, render, Tok, VOCAB_SIZE } from './tokenizer';

/**
 * How the workflows' symbols (tokenizer.ts: `Tok`, digits, slots, documents) meet a model's
 * token ids. The workflows build contexts and grade answers in symbols; the policies and the
 * event log speak the model's ids. The binding sits at those two edges only: the sampler maps
 * a context to ids before the model runs and the sampled ids back, and the events are written
 * in ids, so the learner trains on exactly the ids the model produced.
 *
 * The map is a bijection on all integers, so nothing a model samples is lost or merged:
 * a model id bound to a symbol becomes that symbol; any other id `t` becomes the negative
 * symbol `-(t + 1)`, which no workflow accepts (it grades as a malformed answer) and which
 * maps back to `t` when it reappears in a later context (the checker sees the solver's
 * answer exactly as sampled).
 */
export interface SymbolBinding {
  /** `identity` for the project's transformer, `hf` for a Hugging Face tokenizer's model. */
  readonly kind: 'identity' | 'hf';
  /** Model ids of `symbols`. */
  toModel(symbols: readonly number[]): number[];
  /** Symbols of model ids (unbound ids become negative symbols). */
  toSymbols(ids: readonly number[]): number[];
  /** Every symbol's model id and the text it stands for, for the start-up log. */
  describe(): Record<string, { id: number; text?: string }>;
}

/** The project's transformer: its vocabulary is the symbols themselves (ids 0..31). */
export const IDENTITY_BINDING: SymbolBinding = {
  kind: 'identity',
  // Ids past the symbols (a model with a larger vocabulary samples them) pass through both ways.
  toModel: (symbols) => [...symbols],
  toSymbols: (ids) => [...ids],
  describe: () => Object.fromEntries(Array.from({ length: VOCAB_SIZE }, (_, s) => [render([s]).slice(1, -1), { id: s }])),
};

/**
 * Each symbol's preferred text: one printable ASCII character, so that it is one token in
 * every byte-level BPE vocabulary (Llama 3, Qwen2) and in most SentencePiece ones. Digits are
 * the digits themselves; the rest are mnemonic.
 */
export const SYMBOL_TEXT: Readonly<Record<number, string>> = {
  [Tok.BOS]: '^',
  [Tok.SEP]: '|',
  ...Object.fromEntries(Array.from({ length: MAX_DIGITS }, (_, d) => [Tok.DIGIT0 + d, String(d)])),
  [Tok.YES]: 'Y',
  [Tok.NO]: 'N',
  [Tok.BLANK]: '_',
  [Tok.SOLVE]: 'S',
  [Tok.CHECK]: 'C',
  [Tok.WORK]: 'W',
  [Tok.ROUTE]: 'R',
  [Tok.AGG]: 'A',
  [Tok.SEARCH]: 'Q',
  ...Object.fromEntries(Array.from({ length: MAX_WORKERS }, (_, i) => [Tok.SLOT0 + i, 'abcd'[i]])),
  ...Object.fromEntries(Array.from({ length: MAX_DOCS }, (_, j) => [Tok.DOC0 + j, 'pqrstu'[j]])),
  [Tok.PTR]: '>',
  [Tok.VAL]: '=',
  [Tok.NOTHING]: '~',
};

/** Printable ASCII, in order: the fallback texts for a symbol whose preferred one is no single token. */
const FALLBACK_TEXTS = Array.from({ length: 126 - 33 + 1 }, (_, i) => String.fromCharCode(33 + i));

/**
 * The binding for a Hugging Face model: each symbol is the vocabulary entry of its text in
 * {@link SYMBOL_TEXT} (BOS is the tokenizer's own `bos_token` where it has one). A symbol whose
 * text is not one vocabulary entry, or is already taken, takes the first free printable
 * character that is; the choice depends only on the tokenizer, so the agents, a replay and
 * a rerun bind alike. Fails with a {@link ConfigError} on `variable` when the tokenizer cannot
 * give 32 distinct single-token symbols, or a bound id is outside the model's vocabulary.
 */
export function hfSymbolBinding(tokenizer: HfTokenizer, modelVocabSize: number, variable = 'SRPO_MODEL_DIR'): SymbolBinding {
  const ids = new Array<number>(VOCAB_SIZE);
  const texts = new Array<string>(VOCAB_SIZE);
  const taken = new Set<number>();
  const single = (text: string): number | undefined => {
    const id = tokenizer.tokenToId(text);
    if (id !== undefined) return id;
    // SentencePiece-style vocabularies keep some characters only behind a word boundary marker.
    const enc = tokenizer.encode(text);
    return enc.length === 1 ? enc[0] : undefined;
  };
  for (let s = 0; s < VOCAB_SIZE; s++) {
    const preferred = s === Tok.BOS && tokenizer.bosToken !== undefined ? [tokenizer.bosToken, SYMBOL_TEXT[s]] : [SYMBOL_TEXT[s]];
    let bound = false;
    for (const text of [...preferred, ...FALLBACK_TEXTS]) {
      const id = single(text);
      if (id === undefined || taken.has(id)) continue;
      if (!(id >= 0 && id < modelVocabSize)) {
        throw new ConfigError(variable, `the tokenizer gives id ${id} for "${text}", outside the model's vocab_size ${modelVocabSize}`);
      }
      ids[s] = id;
      texts[s] = text;
      taken.add(id);
      bound = true;
      break;
    }
    if (!bound) {
      throw new ConfigError(
        variable,
        `the tokenizer has no free single token for the workflow symbol ${render([s])} (tried "${SYMBOL_TEXT[s]}" and every printable ASCII character)`,
      );
    }
  }
  const symbolOf = new Map(ids.map((id, s) => [id, s]));
  return {
    kind: 'hf',
    toModel: (symbols) => symbols.map((s) => (checkInteger(s), s >= 0 ? ids[checkSymbol(s)] : -s - 1)),
    toSymbols: (modelIds) => modelIds.map((id) => symbolOf.get(id) ?? -id - 1),
    describe: () => Object.fromEntries(ids.map((id, s) => [render([s]).slice(1, -1), { id, text: texts[s] }])),
  };
}

function checkInteger(s: number): void {
  if (!Number.isInteger(s)) throw new ValidationError('symbol', `must be an integer, got ${s}`);
}

function checkSymbol(s: number): number {
  checkInteger(s);
  if (s < 0 || s >= VOCAB_SIZE) throw new ValidationError('symbol', `must be in [0, ${VOCAB_SIZE}), got ${s}`);
  return s;
}
