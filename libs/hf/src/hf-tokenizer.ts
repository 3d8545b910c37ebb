import * as fs from 'fs';
import * as path from 'path';
import { Template } from '@huggingface/jinja';
import { Tokenizer } from '@huggingface/tokenizers';
import { ErrorCode, SrpoError, ValidationError } from '@srpo/core';
import { DEFAULT_RUN_BOUND_MS, runBounded } from './bounded-run';

/** A call an assistant message made, as chat templates receive it (transformers' convention: `arguments` an object). */
export interface TemplateToolCall {
  type: 'function';
  function: { name: string; arguments: Record<string, unknown> };
}

/**
 * One chat message, as chat templates receive it. Tool use adds, as in transformers: an
 * assistant's `tool_calls`, and a `tool` message's `tool_call_id` (and `name`, where known).
 */
export interface ChatMessage {
  role: string;
  content: string;
  tool_calls?: TemplateToolCall[];
  tool_call_id?: string;
  name?: string;
}

type Json = Record<string, unknown>;

/** A special token in `tokenizer_config.json`: a plain string or an AddedToken object (`{"content": ...}`). */
function tokenString(v: unknown): string | undefined {
  if (typeof v === 'string') return v;
  if (v && typeof v === 'object' && typeof (v as Json).content === 'string') return (v as Json).content as string;
  return undefined;
}

function readJson(file: string, required: boolean): Json | undefined {
  if (!fs.existsSync(file)) {
    if (!required) return undefined;
    throw new SrpoError(ErrorCode.NOT_FOUND, `${file}: missing (a Hugging Face model directory holds tokenizer.json)`, { field: path.basename(file) });
  }
  try {
    const v = JSON.parse(fs.readFileSync(file, 'utf8')) as unknown;
    if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new Error('not a JSON object');
    return v as Json;
  } catch (e) {
    throw new SrpoError(ErrorCode.VALIDATION_FAILED, `${file}: not valid JSON (${(e as Error).message})`, { field: path.basename(file) });
  }
}

/**
 * A model's tokenizer and chat template, from its Hugging Face directory:
 * `tokenizer.json` through `@huggingface/tokenizers` (a JavaScript port of the Rust
 * library transformers uses), `tokenizer_config.json` for the special tokens, and the chat
 * template from `chat_template.jinja` (transformers 5 writes it there) or, failing that,
 * `tokenizer_config.json`'s `chat_template`, rendered with `@huggingface/jinja`.
 */
export class HfTokenizer {
  private readonly template?: Template;

  private constructor(
    private readonly tokenizer: Tokenizer,
    private readonly specials: Record<string, string | undefined>,
    readonly chatTemplate: string | undefined,
    /** Size of the id space the tokenizer can produce (model vocabulary plus added tokens). */
    readonly idCount: number,
    /** Whether decoding runs a regex from tokenizer.json (a `Replace` decoder); encoding always may. */
    private readonly decodeRunsModelRegex: boolean,
  ) {
    if (chatTemplate !== undefined) {
      try {
        this.template = runBounded(
          () => new Template(chatTemplate),
          DEFAULT_RUN_BOUND_MS,
          () => overBound('chat_template', 'parsing'),
        );
      } catch (e) {
        if (e instanceof SrpoError) throw e;
        // A model directory is outside input: its template's syntax error is a refusal naming it, not a crash.
        throw new ValidationError('chat_template', `does not parse: ${(e as Error).message}`);
      }
    }
  }

  static fromDirectory(dir: string): HfTokenizer {
    const tokenizerJson = readJson(path.join(dir, 'tokenizer.json'), true) as Json;
    const config = readJson(path.join(dir, 'tokenizer_config.json'), false) ?? {};
    let tokenizer: Tokenizer;
    try {
      tokenizer = new Tokenizer(tokenizerJson, config);
    } catch (e) {
      throw new SrpoError(ErrorCode.VALIDATION_FAILED, `${path.join(dir, 'tokenizer.json')}: cannot build the tokenizer (${(e as Error).message})`, {
        field: 'tokenizer.json',
      });
    }
    const jinjaFile = path.join(dir, 'chat_template.jinja');
    const template = fs.existsSync(jinjaFile) ? fs.readFileSync(jinjaFile, 'utf8') : pickTemplate(config.chat_template);
    const specials: Record<string, string | undefined> = {};
    for (const k of ['bos_token', 'eos_token', 'unk_token', 'pad_token']) specials[k] = tokenString(config[k]);
    return new HfTokenizer(tokenizer, specials, template, idCount(tokenizerJson), holdsRegex(tokenizerJson.decoder));
  }

  /**
   * Token ids of `text`; `addSpecialTokens` runs the post-processor (a BOS for Llama-style tokenizers).
   * Bounded in time ({@link runBounded}): tokenizer.json's normalizer and pre-tokenizer patterns,
   * and its BPE over what they leave, are the model directory's, untrusted.
   */
  encode(text: string, options: { addSpecialTokens?: boolean } = {}): number[] {
    const encode = () => tokenizerCall('encode', () => this.tokenizer.encode(text, { add_special_tokens: options.addSpecialTokens ?? false }).ids);
    return runBounded(encode, DEFAULT_RUN_BOUND_MS, () => overBound('tokenizer.json', `encoding ${text.length} characters`));
  }

  /**
   * Text of `ids`. Bounded in time only where tokenizer.json's decoder holds a regex: the
   * library's own decoders are linear, and decoding runs once per generated token while streaming,
   * where the bound's cost (a watchdog thread per call) would show.
   */
  decode(ids: readonly number[], options: { skipSpecialTokens?: boolean } = {}): string {
    // The library refuses an empty list; no ids is no text (an answer that is one end token, skipped).
    if (ids.length === 0) return '';
    const decode = () => tokenizerCall('decode', () => this.tokenizer.decode([...ids], { skip_special_tokens: options.skipSpecialTokens ?? false }));
    if (!this.decodeRunsModelRegex) return decode();
    return runBounded(decode, DEFAULT_RUN_BOUND_MS, () => overBound('tokenizer.json', `decoding ${ids.length} tokens`));
  }

  tokenToId(token: string): number | undefined {
    return this.tokenizer.token_to_id(token);
  }

  get bosToken(): string | undefined {
    return this.specials.bos_token;
  }

  get eosToken(): string | undefined {
    return this.specials.eos_token;
  }

  /** Whether the chat template reads `tools` (transformers passes a request's tools under that name). */
  get rendersTools(): boolean {
    return this.chatTemplate !== undefined && /\btools\b/.test(this.chatTemplate);
  }

  /**
   * Renders messages with the chat template, as transformers' `apply_chat_template(…,
   * tokenize=False)`: the template sees `messages`, `add_generation_prompt` and the special
   * tokens (`bos_token`, `eos_token`, …); `@huggingface/jinja` provides `raise_exception`.
   */
  applyChatTemplate(messages: readonly ChatMessage[], options: { addGenerationPrompt?: boolean; tools?: readonly unknown[] } = {}): string {
    if (!this.template)
      throw new ValidationError('chat_template', 'this model directory has no chat template (chat_template.jinja or tokenizer_config.json chat_template)');
    messages.forEach((m, i) => {
      if (!m || typeof m.role !== 'string' || typeof m.content !== 'string')
        throw new ValidationError(`messages[${i}]`, 'must be {role: string, content: string}');
    });
    const tools = options.tools !== undefined && options.tools.length > 0 ? options.tools : undefined;
    // A template that never reads `tools` would drop them silently: the model would answer without knowing them.
    if (tools && !this.rendersTools)
      throw new ValidationError(
        'tools',
        "this model's chat template does not render tools (it never reads `tools`); use a model whose template does, e.g. Qwen2.5",
      );
    const template = this.template;
    const context = {
      messages: messages.map((m) => ({
        role: m.role,
        content: m.content,
        ...(m.tool_calls ? { tool_calls: m.tool_calls } : {}),
        ...(m.tool_call_id !== undefined ? { tool_call_id: m.tool_call_id } : {}),
        ...(m.name !== undefined ? { name: m.name } : {}),
      })),
      add_generation_prompt: options.addGenerationPrompt ?? false,
      ...(tools ? { tools } : {}),
      ...this.specials,
    };
    // With a bound on its run time: the template is the model directory's, untrusted (Jinja has loops).
    const render = () => {
      try {
        return template.render(context);
      } catch (e) {
        throw new ValidationError('chat_template', `rendering failed: ${(e as Error).message}`);
      }
    };
    return runBounded(render, DEFAULT_RUN_BOUND_MS, () => overBound('chat_template', 'rendering'));
  }
}

/** The refusal of a model directory's code that ran past {@link DEFAULT_RUN_BOUND_MS}, naming the file it came from. */
function overBound(field: string, what: string): SrpoError {
  return new SrpoError(
    ErrorCode.VALIDATION_FAILED,
    `${field}: ${what} took longer than ${DEFAULT_RUN_BOUND_MS} ms; stopped (${field} is the model directory's)`,
    {
      field,
    },
  );
}

/** Whether a tokenizer.json part holds a `{"Regex": …}` pattern anywhere (a `Sequence` nests them). */
function holdsRegex(part: unknown): boolean {
  if (Array.isArray(part)) return part.some(holdsRegex);
  if (!part || typeof part !== 'object') return false;
  return Object.entries(part as Json).some(([k, v]) => k === 'Regex' || holdsRegex(v));
}

/**
 * Runs the tokenizer library, whose errors are plain ones: a tokenizer.json it built but cannot run
 * (an added token without an integer id, a split without a pattern; found by the fuzzer,
 * libs/testing/src/fuzz) fails on every input, so it is refused as the model directory's fault.
 */
function tokenizerCall<T>(what: string, call: () => T): T {
  try {
    return call();
  } catch (e) {
    if (e instanceof SrpoError) throw e;
    throw new SrpoError(ErrorCode.VALIDATION_FAILED, `tokenizer.json: cannot ${what} (${(e as Error).message})`, { field: 'tokenizer.json' });
  }
}

/** `chat_template` is a string, or a list of `{name, template}` of which transformers uses `default`. */
function pickTemplate(v: unknown): string | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v === 'string') return v;
  if (Array.isArray(v)) {
    const named = v.find((t) => t && typeof t === 'object' && (t as Json).name === 'default') as Json | undefined;
    if (named && typeof named.template === 'string') return named.template;
  }
  throw new ValidationError('tokenizer_config.json chat_template', 'must be a string or a list holding {"name": "default", "template": ...}');
}

/** Highest id in the model vocabulary or the added tokens, plus one. */
function idCount(tokenizerJson: Json): number {
  let max = -1;
  const vocab = (tokenizerJson.model as Json | undefined)?.vocab;
  if (vocab && typeof vocab === 'object' && !Array.isArray(vocab)) {
    for (const id of Object.values(vocab as Record<string, number>)) if (typeof id === 'number' && id > max) max = id;
  } else if (Array.isArray(vocab)) {
    max = vocab.length - 1; // Unigram: a list of [piece, score]
  }
  for (const t of (tokenizerJson.added_tokens as Json[] | undefined) ?? []) if (typeof t.id === 'number' && t.id > max) max = t.id;
  return max + 1;
}
