// Server-sent events, the way a streamed answer of an OpenAI-compatible endpoint is framed, read
// from its bytes as they come (the event stream format of the HTML standard): lines ended by \n, \r
// or \r\n, split anywhere across reads; `data:` lines joined into an event's data, `event:` its
// type, lines starting with `:` comments; a blank line ends an event, which is given whole. Line
// ends are found by Buffer's own search, and a line is decoded once it is whole: an event sent in
// many small reads costs what its size does, never its square. Free of I/O: the caller feeds it
// and bounds it.

/** One event: its type (the `event:` field, when it had one) and its data lines, joined by \n. */
export interface StreamEvent {
  type: string | undefined;
  data: string;
}

const LF = 0x0a;
const CR = 0x0d;
const COLON = 0x3a;
const SPACE = 0x20;

export class EventReader {
  /** Bytes read since the last event's end (its blank line): what is held of one event now. */
  open = 0;
  /**
   * The line begun and not yet ended, copied into one buffer that grows by doubling: held as the
   * reads it came in, a line sent a byte a read would take a hundred times its size.
   */
  private pending = Buffer.alloc(0);
  private pendingLength = 0;
  private data: string[] = [];
  private type: string | undefined;
  /** The last read ended with \r: a \n first in the next one ends no second line. */
  private afterCR = false;
  private first = true;

  /** `onEvent` is given each event with data as its blank line is read; what it throws, `feed` throws. */
  constructor(private readonly onEvent: (event: StreamEvent) => void) {}

  /** Takes the next read. */
  feed(chunk: Buffer): void {
    if (chunk.length === 0) return;
    const lineEndGoesOn = this.afterCR && chunk[0] === LF;
    let from = lineEndGoesOn ? 1 : 0;
    this.afterCR = false;
    // The \n of a \r\n that ended an event is that event's, not the next one's.
    this.open += chunk.length - (lineEndGoesOn && this.open === 0 ? 1 : 0);
    // Searched natively, not by a loop over each byte, which runs in V8's interpreter until it is
    // compiled: a process's first turns read their answers as fast as its later ones. A \r is rare
    // (most endpoints end lines with \n alone): once none is left in the read, it is not looked for again.
    let cr = chunk.indexOf(CR, from);
    let lf = chunk.indexOf(LF, from);
    while (cr >= 0 || lf >= 0) {
      const i = lf < 0 || (cr >= 0 && cr < lf) ? cr : lf;
      const part = chunk.subarray(from, i);
      let line = part;
      if (this.pendingLength > 0) {
        this.hold(part);
        line = this.pending.subarray(0, this.pendingLength);
        this.pendingLength = 0;
      }
      from = i + 1;
      if (i === cr) {
        if (from === chunk.length) this.afterCR = true;
        else if (chunk[from] === LF) from++;
        cr = chunk.indexOf(CR, from);
      }
      if (lf >= 0 && lf < from) lf = chunk.indexOf(LF, from);
      if (this.line(line)) this.open = chunk.length - from;
    }
    if (from < chunk.length) this.hold(chunk.subarray(from));
  }

  /** Adds to the line begun. */
  private hold(part: Buffer): void {
    const need = this.pendingLength + part.length;
    if (need > this.pending.length) {
      const grown = Buffer.allocUnsafe(Math.max(need, this.pending.length * 2, 256));
      this.pending.copy(grown, 0, 0, this.pendingLength);
      this.pending = grown;
    }
    part.copy(this.pending, this.pendingLength);
    this.pendingLength = need;
  }

  /** One whole line; true when it was blank, the end of an event. */
  private line(bytes: Buffer): boolean {
    if (this.first) {
      this.first = false;
      // A byte order mark before the stream's first line is no part of it.
      if (bytes[0] === 0xef && bytes[1] === 0xbb && bytes[2] === 0xbf) bytes = bytes.subarray(3);
    }
    if (bytes.length === 0) {
      const event = this.data.length > 0 ? { type: this.type, data: this.data.join("\n") } : undefined;
      this.data = [];
      this.type = undefined;
      if (event) this.onEvent(event);
      return true;
    }
    if (bytes[0] === COLON) return false;
    // Decoded whole (a line ends at an ASCII byte, never inside a character): a malformed sequence reads as U+FFFD.
    const line = bytes.toString("utf8");
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.charCodeAt(0) === SPACE) value = value.slice(1);
    if (field === "data") this.data.push(value);
    else if (field === "event") this.type = value;
    return false;
  }
}
