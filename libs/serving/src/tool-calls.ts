import { randomBytes } from 'crypto';

/** A function tool of a chat request, as OpenAI's `tools` holds it (and chat templates receive it). */
export interface FunctionTool {
  type: 'function';
  function: { name: string; description?: string; parameters?: Record<string, unknown>; strict?: boolean };
}

/** One call in OpenAI's response shape: `arguments` is a JSON text. */
export interface ToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

/** What `tool_choice` asks of a chat with tools: the model may call, must call, or must call the named function. */
export type ToolChoice = 'auto' | 'required' | { name: string };

/** The text a model wraps each call in (Hermes format: Qwen2.5, Hermes, SmolLM3 and others). */
export const TOOL_CALL_OPEN = '<tool_call>';
export const TOOL_CALL_CLOSE = '</tool_call>';

/**
 * The text a forced call starts with, appended to the prompt after the template's generation
 * prompt: `required` opens a call block (the model picks the function), a named function also
 * writes its name, so the model samples only the arguments and what follows. The same
 * "prefill" a client could write itself; undefined for `auto`.
 *
 * What the server writes is prompt, not sample: the recorded response holds only the tokens the
 * model sampled after it, with their log-probs. Nothing constrains the sampled rest (no grammar):
 * a model that writes no valid call gets its text back with the prefix, as any malformed call.
 */
export function forcedCallPrefix(choice: ToolChoice): string | undefined {
  if (choice === 'auto') return undefined;
  if (choice === 'required') return `${TOOL_CALL_OPEN}\n`;
  return `${TOOL_CALL_OPEN}\n{"name": ${JSON.stringify(choice.name)}, "arguments":`;
}

/** The tools a call may name under `choice`: all of them, or only the named one. */
export function callableTools(tools: readonly FunctionTool[], choice: ToolChoice): readonly FunctionTool[] {
  return typeof choice === 'object' ? tools.filter((t) => t.function.name === choice.name) : tools;
}

/**
 * Reads the calls in a completion's text, in the Hermes format that tool-calling chat templates
 * teach (`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, one block per call, as
 * vLLM's `hermes` parser reads it). The text before the first block is the message's content
 * (null when only whitespace).
 *
 * Returns undefined (the completion is answered as plain text) for text without a block, and for
 * malformed calls: a block left open, JSON that does not parse or is not `{name, arguments}`, a
 * name that is not one of `tools`, arguments that are not an object, or more than one call where
 * `parallel_tool_calls` is false. Anything after the last block other than whitespace is malformed
 * too: the model went on talking, and a caller would lose that text.
 */
export function parseToolCalls(
  text: string,
  tools: readonly FunctionTool[],
  options: { parallel: boolean } = { parallel: true },
): { content: string | null; calls: ToolCall[] } | undefined {
  const first = text.indexOf(TOOL_CALL_OPEN);
  if (first < 0) return undefined;
  const names = new Set(tools.map((t) => t.function.name));
  const calls: ToolCall[] = [];
  let at = first;
  while (at < text.length) {
    const rest = text.slice(at);
    if (rest.trim() === '') break;
    if (!rest.trimStart().startsWith(TOOL_CALL_OPEN)) return undefined;
    const open = at + rest.indexOf(TOOL_CALL_OPEN) + TOOL_CALL_OPEN.length;
    const close = text.indexOf(TOOL_CALL_CLOSE, open);
    if (close < 0) return undefined;
    const call = callOf(text.slice(open, close), names);
    if (!call) return undefined;
    calls.push(call);
    at = close + TOOL_CALL_CLOSE.length;
  }
  if (calls.length > 1 && !options.parallel) return undefined;
  const content = text.slice(0, first);
  return { content: content.trim() === '' ? null : content, calls };
}

/** One block's JSON as a call, or undefined when it is not `{name: <a tool>, arguments: {...}}`. */
function callOf(json: string, names: ReadonlySet<string>): ToolCall | undefined {
  let v: unknown;
  try {
    v = JSON.parse(json);
  } catch {
    return undefined;
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return undefined;
  const { name, arguments: args } = v as Record<string, unknown>;
  if (typeof name !== 'string' || !names.has(name)) return undefined;
  // Some models write the arguments as a JSON text already.
  let parsed: unknown = args ?? {};
  if (typeof parsed === 'string') {
    try {
      parsed = JSON.parse(parsed);
    } catch {
      return undefined;
    }
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) return undefined;
  return { id: `call_${randomBytes(12).toString('hex')}`, type: 'function', function: { name, arguments: JSON.stringify(parsed) } };
}
