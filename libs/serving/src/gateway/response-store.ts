import { OpenAiError } from '../openai-protocol';

type Json = Record<string, unknown>;
type ChatMessage = Json & { role: string };

/** A stored response: the conversation it ended (its messages and its answer), and the key that made it. */
interface StoredResponse {
  messages: ChatMessage[];
  keyId: string | undefined;
  bytes: number;
  storedAtMs: number;
}

/**
 * Responses kept for `previous_response_id`: in the process, bounded by count, bytes and age (an
 * LRU). A response is readable by the key that made it only. A gateway restart forgets them.
 */
export class ResponseStore {
  private readonly entries = new Map<string, StoredResponse>();
  private bytes = 0;

  constructor(private readonly o: { maxResponses: number; maxBytes: number; ttlMs: number; clock?: () => number } = DEFAULT_RESPONSE_STORE) {}

  get size(): number {
    return this.entries.size;
  }

  put(id: string, messages: ChatMessage[], keyId: string | undefined): void {
    const bytes = Buffer.byteLength(JSON.stringify(messages));
    if (bytes > this.o.maxBytes) return;
    this.entries.set(id, { messages, keyId, bytes, storedAtMs: this.now() });
    this.bytes += bytes;
    for (const [k, e] of this.entries) {
      if (this.entries.size <= this.o.maxResponses && this.bytes <= this.o.maxBytes) break;
      this.drop(k, e);
    }
  }

  /** The conversation of `id`, or a 400 naming `previous_response_id` (unknown, expired, or another key's). */
  get(id: string, keyId: string | undefined): ChatMessage[] {
    const e = this.entries.get(id);
    if (e && this.now() - e.storedAtMs >= this.o.ttlMs) this.drop(id, e);
    const found = this.entries.get(id);
    if (!found || found.keyId !== keyId)
      throw new OpenAiError(400, `Previous response with id '${id}' not found.`, 'previous_response_id', 'previous_response_not_found');
    return found.messages;
  }

  private drop(id: string, e: StoredResponse): void {
    this.entries.delete(id);
    this.bytes -= e.bytes;
  }

  private now(): number {
    return (this.o.clock ?? Date.now)();
  }
}

export const DEFAULT_RESPONSE_STORE = { maxResponses: 10_000, maxBytes: 256 * 1024 * 1024, ttlMs: 3_600_000 };
