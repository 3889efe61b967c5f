// A request's body as bytes. A conversation's requests start alike (its window only grows between
// drops), so the bytes of the previous request's messages are copied, not encoded again: a window of
// thousands of messages costs one copy and the encoding of the few messages that are new.
import type { ChatMessage } from "./prompt.js";

interface Encoded {
  /** The body up to its first message: `{...,"model":"…","messages":[`. */
  head: string;
  messages: readonly ChatMessage[];
  /** Where each message ends in `bytes` (before the comma that follows it). */
  ends: number[];
  bytes: Uint8Array;
}

/** Previous bodies, most recently used last; a few conversations' worth, each the size of its window. */
const previous = new Map<string, Encoded>();
const KEPT = 16;

function remember(key: string, encoded: Encoded): void {
  previous.delete(key);
  previous.set(key, encoded);
  if (previous.size > KEPT) {
    const oldest = previous.keys().next().value;
    if (oldest !== undefined) previous.delete(oldest);
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

/** Forgets the bodies kept (for measuring a fresh process). */
export function forgetBodies(): void {
  previous.clear();
}

/**
 * `{…head, "messages":[…], …tail}` as UTF-8, where head and tail are the body's other keys (no key in both,
 * and neither holds "messages"). With a key
 * (the conversation), the bytes of the leading messages it shares with that key's previous body are
 * copied from it. Message objects are compared by identity: a message made from an event is made once.
 */
export function encodeBody(head: Record<string, unknown>, messages: readonly ChatMessage[], tail: Record<string, unknown>, key?: string): Uint8Array {
  const headJson = JSON.stringify(head);
  const tailJson = JSON.stringify(tail);
  const start = `${headJson.slice(0, -1)}${headJson === "{}" ? "" : ","}"messages":[`;
  const end = `]${tailJson === "{}" ? "" : ","}${tailJson.slice(1)}`;
  let before = key === undefined ? undefined : previous.get(key);
  // Were the bytes handed over (detached) rather than copied, they can't be reused.
  if (before && before.bytes.length < (before.ends.at(-1) ?? 0)) before = undefined;
  let kept = 0;
  if (before && before.head === start) {
    const most = Math.min(before.messages.length, messages.length);
    while (kept < most && same(before.messages[kept], messages[kept])) kept++;
  }
  const from = kept > 0 ? before : undefined;
  const keptBytes = from ? (from.ends[kept - 1] ?? 0) : Buffer.byteLength(start);
  const rest = messages.slice(kept).map((m) => JSON.stringify(m));
  let size = keptBytes + Buffer.byteLength(end);
  for (const json of rest) size += Buffer.byteLength(json) + 1;
  const bytes = Buffer.allocUnsafe(from || rest.length === 0 ? size : size - 1);
  const ends = from ? from.ends.slice(0, kept) : [];
  let at: number;
  if (from) {
    bytes.set(from.bytes.subarray(0, keptBytes), 0);
    at = keptBytes;
  } else at = bytes.write(start, 0);
  for (const json of rest) {
    if (ends.length > 0) at += bytes.write(",", at);
    at += bytes.write(json, at);
    ends.push(at);
  }
  at += bytes.write(end, at);
  if (at !== bytes.length) throw new Error(`the request's body came out ${at} bytes, not ${bytes.length}`);
  if (key !== undefined) remember(key, { head: start, messages: [...messages], ends, bytes });
  return bytes;
}
