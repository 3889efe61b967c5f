// Text made well-formed UTF-16 before it reaches a model. A lone surrogate (half of a pair: from a
// tool's answer, a description, a prompt, an event written before this check) is written by
// JSON.stringify as a `\udXXX` escape, which DeepSeek, OpenAI and Anthropic refuse with a 400 — at
// every later turn of the conversation that holds it. Each is made U+FFFD, as toWellFormed does.

/** Whether a UTF-16 code unit is the first half of a surrogate pair: text cut after it cuts a character in two. */
export const isHighSurrogate = (c: number): boolean => c >= 0xd800 && c <= 0xdbff;

/** `text` with each lone surrogate made U+FFFD. */
export function wellFormed(text: string): string {
  return text.isWellFormed() ? text : text.toWellFormed();
}

/** The same through any strings of a value (a model's reasoning_details), each string made anew only where it needs to be. */
export function wellFormedValue<T>(value: T): T {
  if (typeof value === "string") return wellFormed(value) as T;
  if (Array.isArray(value)) return value.map((v: unknown) => wellFormedValue(v)) as T;
  if (value !== null && typeof value === "object") {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [wellFormed(k), wellFormedValue(v)])) as T;
  }
  return value;
}

/**
 * Text handed on in pieces (a streamed answer), each lone surrogate made U+FFFD, and never a pair cut
 * in two: a piece that ends with the first half of one is handed on without it, which waits for the
 * next piece (a provider may send the two halves in two chunks). Joined, what is handed on is
 * wellFormed of the whole text.
 */
export class WellFormedPieces {
  private held = "";

  constructor(private readonly out: (text: string) => void) {}

  push(piece: string): void {
    let text = this.held + piece;
    this.held = "";
    if (text.length > 0 && isHighSurrogate(text.charCodeAt(text.length - 1))) {
      this.held = text.slice(-1);
      text = text.slice(0, -1);
    }
    if (text) this.out(wellFormed(text));
  }

  /** Hands on what is held: the text ended. */
  flush(): void {
    const rest = this.held;
    this.held = "";
    if (rest) this.out(wellFormed(rest));
  }
}

/**
 * A run of backslashes then `udXXX`, a surrogate's code: an escape when the run is odd, else an
 * escaped backslash then text (`\\ud800`). JSON.stringify writes a surrogate of a pair as it is, and
 * a lone one as such an escape, in lower case.
 */
const LONE_ESCAPES = /(\\+)ud[89a-f][0-9a-f]{2}/g;

/**
 * JSON written by JSON.stringify, each lone surrogate's escape made U+FFFD: what JSON.stringify
 * writes of the value made well-formed, and the same string when there is none. Every request's
 * body goes through it: with none, it costs one scan for `\ud` (half a regular expression's), which
 * JSON.stringify writes only for a lone surrogate or after an escaped backslash.
 */
export function wellFormedJson(json: string): string {
  if (!json.includes("\\ud")) return json;
  return json.replace(LONE_ESCAPES, (match: string, backslashes: string) => (backslashes.length % 2 === 1 ? `${backslashes.slice(1)}\ufffd` : match));
}
