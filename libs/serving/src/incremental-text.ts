/**
 * The text of one choice as its tokens arrive, for streaming and for `stop` strings.
 *
 * Each push decodes the whole completion again (a token's text can depend on its
 * neighbours: byte-level pieces of one character, SentencePiece's leading spaces) and hands
 * out only text that can no longer change:
 * - a trailing U+FFFD (a character whose bytes are still incomplete) is held back;
 * - so is the longest suffix that could still become a stop string.
 *
 * A stop string ends the choice; the text is cut before it, as OpenAI does. The token that
 * completed it stays among the choice's tokens (the model did sample it).
 */
export class IncrementalText {
  private readonly ids: number[] = [];
  private emitted = '';
  private stoppedAt: number | undefined;

  /**
   * `holdFrom`: text from its first occurrence on is held back until {@link finish} (a tool
   * call's opening tag: the call is answered whole, or as text if it does not parse).
   */
  constructor(
    private readonly decode: (ids: readonly number[]) => string,
    private readonly stops: readonly string[],
    private readonly holdFrom?: string,
  ) {}

  get stopped(): boolean {
    return this.stoppedAt !== undefined;
  }

  /** The text handed out so far (the whole text once {@link finish}ed). */
  get text(): string {
    return this.emitted;
  }

  /** Adds one token; returns the new final text (maybe empty) and whether a stop string ended the choice. */
  push(id: number): { delta: string; stopped: boolean } {
    if (this.stopped) return { delta: '', stopped: true };
    this.ids.push(id);
    const full = this.decode(this.ids);
    const cut = this.firstStop(full);
    if (cut !== undefined) {
      this.stoppedAt = cut;
      // A held call stays held up to the stop: `finish` hands it out if it is not answered as calls.
      return { delta: this.advance(this.unheld(full.slice(0, cut))), stopped: true };
    }
    let safe = this.unheld(full);
    while (safe.endsWith('\uFFFD')) safe = safe.slice(0, -1);
    safe = safe.slice(0, safe.length - this.heldSuffix(safe));
    return { delta: this.advance(safe), stopped: false };
  }

  /** The whole text so far, held parts included (cut before a stop string), without handing anything out. */
  whole(): string {
    const full = this.decode(this.ids);
    return this.stoppedAt === undefined ? full : full.slice(0, this.stoppedAt);
  }

  /** The choice ended (length, an end token, a stop string): everything still held goes out. */
  finish(): string {
    return this.advance(this.whole(), true);
  }

  /** `text` up to `holdFrom`'s first occurrence. */
  private unheld(text: string): string {
    const held = this.holdFrom === undefined ? -1 : text.indexOf(this.holdFrom);
    return held >= 0 ? text.slice(0, held) : text;
  }

  private advance(upTo: string, force = false): string {
    // Decoding more tokens may rewrite the end of earlier text (rare: a merged character);
    // text once handed out stays, and what differs after it is what is new.
    if (!upTo.startsWith(this.emitted)) {
      if (!force) return '';
      const delta = upTo.length > this.emitted.length ? upTo.slice(this.emitted.length) : '';
      this.emitted += delta;
      return delta;
    }
    const delta = upTo.slice(this.emitted.length);
    this.emitted = upTo;
    return delta;
  }

  private firstStop(full: string): number | undefined {
    let best: number | undefined;
    // A stop can only start where its match would include new text.
    const from = Math.max(0, this.emitted.length - Math.max(0, ...this.stops.map((s) => s.length)));
    for (const s of this.stops) {
      const i = full.indexOf(s, from);
      if (i >= 0 && (best === undefined || i < best)) best = i;
    }
    return best;
  }

  /** Length of the longest suffix of `text` that is a proper prefix of a stop string (or of `holdFrom`). */
  private heldSuffix(text: string): number {
    let held = 0;
    for (const s of this.holdFrom === undefined ? this.stops : [...this.stops, this.holdFrom]) {
      for (let n = Math.min(s.length - 1, text.length); n > held; n--) {
        if (text.endsWith(s.slice(0, n))) {
          held = n;
          break;
        }
      }
    }
    return held;
  }
}
