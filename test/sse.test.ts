// Server-sent events read from bytes as they come (turn/sse.ts): any events, framed with any line
// ends, comments and a byte order mark, split into reads anywhere, come out as they were sent.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { EventReader, type StreamEvent } from "../turn/sse.js";

/** The events a reader gives for these reads. */
function read(reads: Buffer[]): { events: StreamEvent[]; open: number } {
  const events: StreamEvent[] = [];
  const reader = new EventReader((e) => events.push(e));
  for (const r of reads) reader.feed(r);
  return { events, open: reader.open };
}

/** `bytes` cut at these offsets (any, in any order). */
function cut(bytes: Buffer, at: number[]): Buffer[] {
  const points = [...new Set(at.map((a) => a % (bytes.length + 1)))].sort((a, b) => a - b);
  const reads: Buffer[] = [];
  let from = 0;
  for (const p of [...points, bytes.length]) {
    reads.push(bytes.subarray(from, p));
    from = p;
  }
  return reads;
}

/** Text of a line: anything but a line's end. */
const lineText = fc.string({ unit: fc.oneof(fc.constantFrom("é", "😀", "中", ":", " ", "[DONE]"), fc.string({ minLength: 1, maxLength: 1 })), maxLength: 30 }).map((s) => s.replace(/[\r\n]/g, "_"));
const event = fc.record({ type: fc.option(lineText.filter((t) => !t.startsWith(" ")), { nil: undefined }), lines: fc.array(lineText, { minLength: 1, maxLength: 4 }) });
const end = fc.constantFrom("\n", "\r", "\r\n");

describe("EventReader", () => {
  it("gives each event as sent, whatever its line ends, comments, byte order mark and reads", () => {
    fc.assert(
      fc.property(
        fc.array(fc.record({ event, ends: fc.array(end, { minLength: 8, maxLength: 8 }), comment: fc.option(lineText, { nil: undefined }), spaced: fc.boolean() }), { maxLength: 8 }),
        fc.boolean(),
        fc.array(fc.nat(), { maxLength: 12 }),
        (sent, bom, at) => {
          let text = bom ? "\uFEFF" : "";
          for (const { event: e, ends, comment, spaced } of sent) {
            let n = 0;
            const line = (l: string) => {
              let e = ends[n++ % ends.length] as string;
              // An empty line after a \r must not start with \n: the two would be one line's end.
              if (l === "" && text.endsWith("\r") && e.startsWith("\n")) e = "\r";
              text += `${l}${e}`;
            };
            const sep = spaced ? ": " : ":";
            if (comment !== undefined) line(`:${comment}`);
            if (e.type !== undefined) line(`event${sep}${e.type}`);
            for (const l of e.lines) line(`data${sep}${l}`);
            line("");
          }
          const { events, open } = read(cut(Buffer.from(text), at));
          // One space after the colon is no part of the value: sent with none, a value's own first space is read as that one.
          const value = (v: string, spaced: boolean) => (spaced || !v.startsWith(" ") ? v : v.slice(1));
          expect(events).toEqual(sent.map(({ event: e, spaced }) => ({ type: e.type, data: e.lines.map((l) => value(l, spaced)).join("\n") })));
          // Ended by a blank line, nothing is held (a stream of a byte order mark alone holds it).
          expect(open).toBe(sent.length ? 0 : Buffer.byteLength(text));
        },
      ),
      { numRuns: 400 },
    );
  });

  it("takes a character split across reads whole, and \\r\\n split across reads as one line's end", () => {
    const bytes = Buffer.from("data: é😀\r\n\r\n");
    for (let i = 0; i <= bytes.length; i++) expect(read([bytes.subarray(0, i), bytes.subarray(i)]).events).toEqual([{ type: undefined, data: "é😀" }]);
    // \r then \n in the next read: one blank line, so one event, not an event and an empty one.
    expect(read([Buffer.from("data: a\r"), Buffer.from("\ndata: b\r"), Buffer.from("\n\r"), Buffer.from("\n")]).events).toEqual([{ type: undefined, data: "a\nb" }]);
  });

  it("gives no event without data; a field with no colon is that field, empty; an unknown field is left out", () => {
    expect(read([Buffer.from("event: x\n\n: only a comment\n\nid: 3\nretry: 10\n\n")]).events).toEqual([]);
    expect(read([Buffer.from("data\ndata\n\n")]).events).toEqual([{ type: undefined, data: "\n" }]);
    expect(read([Buffer.from("data:  two spaces\nfoo: bar\n\n")]).events).toEqual([{ type: undefined, data: " two spaces" }]);
  });

  it("takes an empty read as nothing, even between the \\r and the \\n of one line's end", () => {
    expect(read([Buffer.from("data: a\r"), Buffer.alloc(0), Buffer.from("\ndata: b\n\n")]).events).toEqual([{ type: undefined, data: "a\nb" }]);
  });

  it("holds a line sent a byte a read in memory of its own size, not of its reads'", () => {
    const reader = new EventReader(() => undefined);
    reader.feed(Buffer.from("data: "));
    const held = () => {
      const m = process.memoryUsage();
      return m.heapUsed + m.arrayBuffers;
    };
    const before = held();
    const byte = Buffer.from("x");
    for (let i = 0; i < 1_000_000; i++) reader.feed(byte.subarray(0, 1));
    // A megabyte of line, held in a buffer of at most twice it (held as its reads, some hundred megabytes).
    expect(held() - before).toBeLessThan(32 * 1024 * 1024);
    expect(reader.open).toBe(6 + 1_000_000);
  });

  it("counts the bytes held since the last event's end, and what it throws, feed throws", () => {
    const reader = new EventReader(({ data }) => {
      if (data === "stop") throw new Error("stopped");
    });
    reader.feed(Buffer.from("data: one\n\ndata: tw"));
    expect(reader.open).toBe("data: tw".length);
    reader.feed(Buffer.from("o and more"));
    expect(reader.open).toBe("data: two and more".length);
    expect(() => reader.feed(Buffer.from("\n\ndata: stop\n\n"))).toThrow("stopped");
  });
});
