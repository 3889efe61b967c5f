// Bounds each incoming line: a message over the limit is dropped as it streams in (never held whole)
// and stands in as a small request the agent refuses, so the connection lives on and the client's
// request still gets an answer. So does a message that nests deeper than the limit: the SDK's answer
// to one (its error echoes what it read) overflowed the stack and closed the connection.
import { isUtf8 } from "node:buffer";
import { NOT_TEXT_METHOD, OVERSIZED_METHOD, TOO_DEEP_METHOD } from "../acp/initialize.js";

/** How much of an oversized line is kept to find its request id. */
const HEAD = 4096;
/**
 * How deep a message may nest its arrays and objects. ACP's own messages nest about a dozen deep;
 * this leaves room for what a client puts under `_meta`.
 */
export const MAX_DEPTH = 128;
const NEWLINE = 0x0a;
const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_ARRAY = 0x5b;
const OPEN_OBJECT = 0x7b;
const CLOSE_ARRAY = 0x5d;
const CLOSE_OBJECT = 0x7d;

/** The parts joined into one array of `length` bytes. */
export function concat(parts: readonly Uint8Array[], length = parts.reduce((n, p) => n + p.length, 0)): Uint8Array {
  const out = new Uint8Array(length);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/**
 * A line's message as the ACP SDK reads it: its text trimmed (String.prototype.trim, which takes more
 * than JSON's own whitespace: a form feed, a vertical tab, a no-break space, a byte order mark,
 * U+3000), then parsed. Every look the front, the gate and the router take at a line goes through
 * this, so that no line reads as one thing to them and another to the SDK. Throws as JSON.parse does.
 */
export function parseLine(text: string): unknown {
  return JSON.parse(text.trim());
}

/** The `id` of a JSON-RPC message from the start of its text: only a key of the top-level object counts. */
export function topLevelId(text: string): string | number | undefined {
  const ids = new IdScanner();
  ids.feed(new TextEncoder().encode(text));
  return ids.id;
}

/** An id as JSON text (what follows `"id":`, up to its member's end): any JSON string or number, else none. */
function idValue(text: string): string | number | undefined {
  // Any JSON number: a fraction or an exponent is still an id to answer under.
  const m = /^\s*("(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)\s*$/.exec(text);
  if (!m?.[1]) return undefined;
  let id: unknown;
  try {
    id = JSON.parse(m[1]);
  } catch {
    // A string JSON can't read (a bad escape, a raw control character): the line is no JSON, and
    // there is no id to answer under.
    return undefined;
  }
  return typeof id === "string" || (typeof id === "number" && Number.isFinite(id)) ? id : undefined;
}

/**
 * Finds the `id` of a JSON-RPC message in its bytes as they stream by, holding none of them but the
 * id's own: for a line over the limit, whose id may come after its params (JSON keys have no
 * order), and the start of a line's text (topLevelId). Only a key of the top-level object counts; UTF-8 never uses `"`, `\\`, brackets or `:`
 * inside a longer character, so the bytes are scanned as they are.
 */
export class IdScanner {
  private depth = 0;
  private inString = false;
  private escaped = false;
  /** The text of a string of the top-level object, while it is read (up to a few bytes: a key's). */
  private text: number[] | undefined;
  /** A string of the top-level object just ended, awaiting what follows: a `:` makes it a key. */
  private ended: string | undefined;
  /** The value of the top-level `id`, as it is read. */
  private value: number[] | undefined;
  private found: string | number | undefined;
  private done = false;

  feed(bytes: Uint8Array): void {
    for (let i = 0; i < bytes.length && !this.done; i++) this.byte(bytes[i] as number);
  }

  private byte(c: number): void {
    if (this.value) {
      // The id's value: up to the end of the top-level member (a `,` or `}` outside a string).
      if (!this.inString && (c === 0x2c || c === CLOSE_OBJECT)) return this.settle();
      if (this.value.length > 300) return this.settle();
      this.value.push(c);
      if (this.inString) {
        if (this.escaped) this.escaped = false;
        else if (c === BACKSLASH) this.escaped = true;
        else if (c === QUOTE) this.inString = false;
      } else if (c === QUOTE) this.inString = true;
      return;
    }
    if (this.inString) {
      if (this.escaped) this.escaped = false;
      else if (c === BACKSLASH) this.escaped = true;
      else if (c === QUOTE) {
        this.inString = false;
        if (this.text) this.ended = String.fromCharCode(...this.text);
        this.text = undefined;
        return;
      }
      if (this.text) {
        if (this.text.length < 8) this.text.push(c);
        else this.text = undefined;
      }
      return;
    }
    if (c === 0x20 || c === 0x09 || c === 0x0d || c === NEWLINE) return;
    const key = this.ended;
    this.ended = undefined;
    if (c === 0x3a && key === "id" && this.depth === 1) {
      this.value = [];
      return;
    }
    if (c === QUOTE) {
      this.inString = true;
      this.text = this.depth === 1 ? [] : undefined;
    } else if (c === OPEN_ARRAY || c === OPEN_OBJECT) this.depth++;
    else if (c === CLOSE_ARRAY || c === CLOSE_OBJECT) this.depth--;
  }

  /** The id's value read: kept when it is a JSON string or number. */
  private settle(): void {
    this.done = true;
    this.found = idValue(Buffer.from(this.value ?? []).toString("utf8"));
    this.value = undefined;
  }

  /** The top-level id, once read (after the bytes that end it), or undefined. */
  get id(): string | number | undefined {
    return this.found;
  }
}

/** The line that stands in for one over the limit: a request the agent refuses, or (no id found) not a request at all. */
export function oversizedLine(head: string, bytes: number, max: number, found?: string | number): string {
  const id = found ?? topLevelId(head);
  const params = { bytes, max };
  const stand = id !== undefined ? { jsonrpc: "2.0", id, method: OVERSIZED_METHOD, params } : `message of ${bytes} bytes is over the limit of ${max}`;
  return `${JSON.stringify(stand)}\n`;
}

/** Whether the JSON text in `bytes` nests arrays and objects deeper than `max`; brackets in strings don't count. */
export function nestsDeeper(bytes: Uint8Array, max: number): boolean {
  // A line with few brackets can't nest deep: they are counted first, natively, and most lines stop here.
  let brackets = 0;
  for (const open of [OPEN_ARRAY, OPEN_OBJECT]) {
    for (let at = bytes.indexOf(open); at >= 0 && brackets <= max; at = bytes.indexOf(open, at + 1)) brackets++;
  }
  if (brackets <= max) return false;
  // UTF-8 never uses these bytes inside a longer character, so the bytes are scanned as they are.
  let depth = 0;
  let inString = false;
  for (let i = 0; i < bytes.length; i++) {
    const c = bytes[i];
    if (inString) {
      if (c === BACKSLASH) i++;
      else if (c === QUOTE) inString = false;
    } else if (c === QUOTE) inString = true;
    else if (c === OPEN_ARRAY || c === OPEN_OBJECT) {
      if (++depth > max) return true;
    } else if (c === CLOSE_ARRAY || c === CLOSE_OBJECT) depth--;
  }
  return false;
}

/** The line that stands in for one nested too deep: a request the agent refuses, or (no id found) not a request at all. */
export function tooDeepLine(text: string, max: number): string {
  const id = topLevelId(text);
  const stand = id !== undefined ? { jsonrpc: "2.0", id, method: TOO_DEEP_METHOD, params: { max } } : `message nests deeper than the limit of ${max}`;
  return `${JSON.stringify(stand)}\n`;
}

/**
 * The line that stands in for one whose bytes are not UTF-8 text (JSON's own encoding): a request
 * the agent refuses, or (no id found) not a request at all. Decoded as it is, each bad byte would
 * be read as U+FFFD, and the message taken with text its client never sent.
 */
export function notTextLine(text: string): string {
  const id = topLevelId(text);
  const stand = id !== undefined ? { jsonrpc: "2.0", id, method: NOT_TEXT_METHOD, params: {} } : "message is not UTF-8 text";
  return `${JSON.stringify(stand)}\n`;
}

/** A whole line as it goes on: itself, or its stand-in when it is not UTF-8 text or nests too deep. */
function checked(line: Uint8Array, decoder: TextDecoder, encoder: TextEncoder): Uint8Array {
  if (!isUtf8(line)) return encoder.encode(notTextLine(decoder.decode(line)));
  return nestsDeeper(line, MAX_DEPTH) ? encoder.encode(tooDeepLine(decoder.decode(line), MAX_DEPTH)) : line;
}

/** The most bytes of a line of a port's connection that has not proved itself: an initialize, a proof. */
export const UNPROVED_LINE_MAX = 64 * 1024;

/**
 * Splits newline-delimited messages out of the bytes as they come, each at most `max` bytes (or,
 * when given, what `bound` says when the line's first byte comes) and nested at most MAX_DEPTH
 * deep: a line over its bound is dropped as it streams in (never held whole) and stands in as
 * oversizedLine, one nested deeper as tooDeepLine. Each line handed on ends with its newline, but
 * the last of an input that ended without one (unless it stands in for one over its bound: a
 * stand-in always ends with its newline).
 */
export class LineSplitter {
  private readonly encoder = new TextEncoder();
  private readonly decoder = new TextDecoder();
  private parts: Uint8Array[] = [];
  private length = 0;
  /** Set while the rest of an oversized line is dropped. */
  private dropping: { head: string; bytes: number; max: number; ids: IdScanner } | undefined;
  /** The bound of the line being read, as it was when it began. */
  private max: number;

  constructor(
    most: number,
    private readonly bound?: () => number,
  ) {
    this.max = bound ? bound() : most;
  }

  /** Takes the next bytes; `line` is given each line they end. */
  push(chunk: Uint8Array, line: (bytes: Uint8Array) => void): void {
    for (let start = 0; start < chunk.length; ) {
      // A line's bound is the one when its first byte comes (a connection proved by then reads a longer one).
      if (this.bound && this.length === 0 && !this.dropping) this.max = this.bound();
      const nl = chunk.indexOf(NEWLINE, start);
      const end = nl < 0 ? chunk.length : nl;
      const piece = chunk.slice(start, end);
      if (this.dropping) {
        this.dropping.bytes += piece.length;
        this.dropping.ids.feed(piece);
      } else if (this.length + piece.length > this.max) {
        const head = concat([...this.parts, piece.subarray(0, HEAD)], this.length + Math.min(piece.length, HEAD)).subarray(0, HEAD);
        // Its id may come after what is kept of it: looked for in every byte as it goes by.
        const ids = new IdScanner();
        for (const part of this.parts) ids.feed(part);
        ids.feed(piece);
        this.dropping = { head: this.decoder.decode(head), bytes: this.length + piece.length, max: this.max, ids };
        this.parts = [];
        this.length = 0;
      } else {
        this.parts.push(piece);
        this.length += piece.length;
      }
      if (nl < 0) break;
      if (this.dropping) {
        line(this.encoder.encode(oversizedLine(this.dropping.head, this.dropping.bytes, this.dropping.max, this.dropping.ids.id)));
        this.dropping = undefined;
      } else {
        this.parts.push(Uint8Array.of(NEWLINE));
        line(checked(concat(this.parts, this.length + 1), this.decoder, this.encoder));
      }
      this.parts = [];
      this.length = 0;
      start = nl + 1;
    }
  }

  /** The input ended: the line it left unended, if any, is given to `line`. */
  end(line: (bytes: Uint8Array) => void): void {
    if (this.dropping) line(this.encoder.encode(oversizedLine(this.dropping.head, this.dropping.bytes, this.dropping.max, this.dropping.ids.id)));
    else if (this.length > 0) line(checked(concat(this.parts, this.length), this.decoder, this.encoder));
    this.dropping = undefined;
    this.parts = [];
    this.length = 0;
  }
}
