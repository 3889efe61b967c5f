// A request's body as bytes. A conversation's requests start alike (its window only grows between
// drops), so the bytes of the previous request's messages are kept where they are, and only the few
// new messages are encoded after them: the next body is written over the last one, in place. The
// new messages are encoded as one array and one string, not one by one (2,000 messages: 1.0 ms
// against 1.4 here), so a body knows where each of its requests' messages ended, not each message.
import type { ChatMessage } from "./prompt.js";
import { wellFormedJson } from "./wellformed.js";

interface Encoded {
  /** The body up to its first message: `{...,"model":"…","messages":[`. */
  head: string;
  messages: readonly ChatMessage[];
  /**
   * Where each message ends in `buffer` (before the comma that follows it), known for the last
   * message each body added and for the system prompt; NOT_KNOWN for the others.
   */
  ends: number[];
  /** The last body's bytes, at the start of room to grow: the next body is written over it in place. */
  buffer: Buffer;
}

/** Previous bodies, most recently used last; a few conversations' worth, each the size of its window. */
const previous = new Map<string, Encoded>();
const KEPT = 16;
/** At most this much memory is kept for bodies (a model with a window of a million tokens sends megabytes). */
const KEPT_BYTES = 32 * 1024 * 1024;

function remember(key: string, encoded: Encoded): void {
  previous.delete(key);
  previous.set(key, encoded);
  let bytes = 0;
  for (const e of previous.values()) bytes += e.buffer.byteLength;
  for (const [oldest, e] of previous) {
    if (previous.size <= 1 || (previous.size <= KEPT && bytes <= KEPT_BYTES)) break;
    previous.delete(oldest);
    bytes -= e.buffer.byteLength;
  }
}

/**
 * Whether two messages make the same JSON. Messages made from events are made once (frozen), so they
 * are the same object or differ; others (the system prompt, calls told as text) are compared as JSON.
 */
function same(a: ChatMessage | undefined, b: ChatMessage | undefined): boolean {
  if (a === b) return true;
  if (!a || !b || a.role !== b.role || Object.isFrozen(a) || Object.isFrozen(b)) return false;
  if (a.role === "system" && b.role === "system") return a.content === b.content;
  return JSON.stringify(a) === JSON.stringify(b);
}

const COMMA = 0x2c;
/** A message's end in a body that encoded it with others. */
const NOT_KNOWN = -1;

/** Forgets the bodies kept (for measuring a fresh process). */
export function forgetBodies(): void {
  previous.clear();
}

/**
 * `{…head, "messages":[…], …tail}` as UTF-8, where head and tail are the body's other keys (no key in
 * both, and neither holds "messages"). With a key (the conversation), the leading messages it shares
 * with that key's previous body are not encoded again, and the previous body's memory is written
 * over: the bytes returned hold until the next body of the same key is made. Message objects are
 * compared by identity: a message made from an event is made once.
 */
export function encodeBody(head: Record<string, unknown>, messages: readonly ChatMessage[], tail: Record<string, unknown>, key?: string): Uint8Array {
  // Each string encoded here is made well-formed (turn/wellformed.ts): a lone surrogate from any
  // source (a prompt, a model's text, an event written before) would have the provider refuse the
  // body at every turn. What is kept of the previous body was made so when it was encoded.
  const headJson = wellFormedJson(JSON.stringify(head));
  const tailJson = wellFormedJson(JSON.stringify(tail));
  const start = `${headJson.slice(0, -1)}${headJson === "{}" ? "" : ","}"messages":[`;
  const end = `]${tailJson === "{}" ? "" : ","}${tailJson.slice(1)}`;
  let before = key === undefined ? undefined : previous.get(key);
  // Were the bytes handed over (detached) rather than copied, they can't be reused.
  if (before && before.buffer.length < (before.ends.at(-1) ?? 0)) before = undefined;
  let kept = 0;
  if (before && before.head === start) {
    const most = Math.min(before.messages.length, messages.length);
    while (kept < most && same(before.messages[kept], messages[kept])) kept++;
    // Back to the last message whose end is known: those after it are encoded again.
    while (kept > 0 && (before.ends[kept - 1] ?? NOT_KNOWN) === NOT_KNOWN) kept--;
  }
  const from = kept > 0 ? before : undefined;
  // The system prompt on its own, so that a body after a drop (which keeps only it) reuses its bytes.
  const alone = kept === 0 && messages.length > 0 ? wellFormedJson(JSON.stringify(messages[0])) : undefined;
  const others = messages.slice(alone === undefined ? kept : 1);
  // `[a,b,…]` less its brackets: the messages as a body lists them.
  const rest = others.length > 0 ? wellFormedJson(JSON.stringify(others)).slice(1, -1) : undefined;
  // Room for the worst case (three bytes for each UTF-16 unit), rather than measuring the messages
  // first: memory that is never written costs nothing.
  const room = (from ? (from.ends[kept - 1] ?? 0) : 3 * start.length) + 3 * ((alone?.length ?? 0) + (rest?.length ?? 0) + end.length) + 2;
  // Memory the previous body was written in is reused: new memory costs page faults to first write.
  let buffer = from?.buffer;
  // Too small, or far larger than needed (after a drop, or /new): memory of the right size.
  if (!buffer || buffer.length < room || buffer.length > 4 * room) {
    const grown = Buffer.allocUnsafe(Math.ceil(room * 1.25));
    if (from && buffer) grown.set(buffer.subarray(0, from.ends[kept - 1] ?? 0), 0);
    buffer = grown;
  }
  const out = buffer;
  // Buffer's own UTF-8 writer: for a window's messages as one string, about half TextEncoder's time.
  const put = (text: string, at: number) => at + out.write(text, at);
  const ends = from ? from.ends.slice(0, kept) : [];
  let at = from ? (from.ends[kept - 1] ?? 0) : put(start, 0);
  if (alone !== undefined) {
    at = put(alone, at);
    ends.push(at);
  }
  if (rest !== undefined) {
    if (ends.length > 0) out[at++] = COMMA;
    at = put(rest, at);
    while (ends.length < messages.length - 1) ends.push(NOT_KNOWN);
    ends.push(at);
  }
  at = put(end, at);
  if (key !== undefined) remember(key, { head: start, messages: [...messages], ends, buffer: out });
  return out.subarray(0, at);
}

/** A character JSON writes escaped. */
// eslint-disable-next-line no-control-regex
const ESCAPED = /["\\\u0000-\u001f]/;

/**
 * The bytes `text` takes in a body, as a JSON string's content: its UTF-8, and its escapes (two bytes
 * for a quote, a backslash, \n and the like; six for another control character).
 */
export function jsonBytes(text: string): number {
  let size = Buffer.byteLength(text, "utf8");
  if (!ESCAPED.test(text)) return size;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22 || c === 0x5c || c === 0x08 || c === 0x09 || c === 0x0a || c === 0x0c || c === 0x0d) size += 1;
    else if (c < 0x20) size += 5;
  }
  return size;
}
