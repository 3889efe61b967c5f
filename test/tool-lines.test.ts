// The lines a stdio tool writes, as the daemon reads them (daemon/tools/lines.ts): the same
// messages as the MCP SDK's own buffer takes, however the pipe cuts them, each line joined once; a
// line past the bound with no end is an error, as the SDK's is, and the buffer goes on after it;
// and the SDK's transport still keeps its buffer where the daemon replaces it.
import fc from "fast-check";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { deserializeMessage, ReadBuffer, STDIO_DEFAULT_MAX_BUFFER_SIZE } from "@modelcontextprotocol/sdk/shared/stdio.js";
import { describe, expect, it } from "vitest";
import { LineReadBuffer } from "../daemon/tools/lines.js";
import { readLinesWhole } from "../daemon/tools/session.js";

/** Every message a buffer gives for these reads, or the error it throws, in order. */
function taken(buffer: { append(chunk: Buffer): void; readMessage(): unknown }, reads: Buffer[]): unknown[] {
  const out: unknown[] = [];
  for (const read of reads) {
    try {
      buffer.append(read);
    } catch {
      out.push("too long");
      continue;
    }
    for (;;) {
      let message: unknown;
      try {
        message = buffer.readMessage();
      } catch {
        out.push("not a message");
        continue;
      }
      if (message === null) break;
      out.push(message);
    }
  }
  return out;
}

const message = fc.oneof(
  fc.record({ jsonrpc: fc.constant("2.0"), id: fc.nat(), result: fc.record({ content: fc.array(fc.record({ type: fc.constant("text"), text: fc.string({ maxLength: 300 }) }), { maxLength: 3 }) }) }),
  fc.record({ jsonrpc: fc.constant("2.0"), method: fc.constantFrom("notifications/progress", "notifications/message"), params: fc.dictionary(fc.string({ maxLength: 5 }), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 3 }) }),
);
/** A line as a tool writes it: a message, with \r\n or \n, or a line that is no message at all. */
const line = fc.oneof(
  { weight: 5, arbitrary: fc.tuple(message, fc.constantFrom("\n", "\r\n")).map(([m, end]) => `${JSON.stringify(m)}${end}`) },
  { weight: 1, arbitrary: fc.string({ maxLength: 40 }).map((s) => `${s.replace(/\n/g, " ")}\n`) },
);

describe("a stdio tool's lines", () => {
  it("give the same messages as the SDK's buffer, however the reads cut them", () => {
    fc.assert(
      fc.property(fc.array(line, { maxLength: 12 }), fc.array(fc.nat(), { maxLength: 20 }), (lines, cuts) => {
        const bytes = Buffer.from(lines.join(""));
        const at = [...new Set(cuts.map((c) => (bytes.length ? c % bytes.length : 0)))].sort((a, b) => a - b);
        const reads = [0, ...at].map((from, i) => bytes.subarray(from, at[i] ?? bytes.length)).filter((b) => b.length > 0);
        expect(taken(new LineReadBuffer(STDIO_DEFAULT_MAX_BUFFER_SIZE, deserializeMessage), reads)).toEqual(taken(new ReadBuffer(), reads));
      }),
      { numRuns: 300 },
    );
  });

  it("a line longer than the bound with no end yet is an error; what was held goes, and the next line is read", () => {
    const buffer = new LineReadBuffer(1024, deserializeMessage);
    const ok = (id: number) => Buffer.from(`${JSON.stringify({ jsonrpc: "2.0", id, result: {} })}\n`);
    expect(taken(buffer, [ok(1)])).toEqual([{ jsonrpc: "2.0", id: 1, result: {} }]);
    expect(() => buffer.append(Buffer.alloc(600, "x"))).not.toThrow();
    expect(() => buffer.append(Buffer.alloc(600, "x"))).toThrow(/over 1024 bytes with no end/);
    expect(taken(buffer, [ok(2)])).toEqual([{ jsonrpc: "2.0", id: 2, result: {} }]);
    // A line of 10 MB, ended, read 64 KiB at a time: taken whole, once.
    const big = new LineReadBuffer(STDIO_DEFAULT_MAX_BUFFER_SIZE, deserializeMessage);
    const text = "y".repeat(10_000_000);
    const bytes = Buffer.from(`${JSON.stringify({ jsonrpc: "2.0", id: 3, result: { content: [{ type: "text", text }] } })}\n`);
    const reads = Array.from({ length: Math.ceil(bytes.length / 65536) }, (_, i) => bytes.subarray(i * 65536, (i + 1) * 65536));
    const [got] = taken(big, reads) as { result: { content: { text: string }[] } }[];
    expect(got?.result.content[0]?.text).toBe(text);
  });

  it("the SDK's stdio transport keeps the buffer the daemon replaces", () => {
    const transport = new StdioClientTransport({ command: process.execPath, args: ["-e", "0"] });
    expect(readLinesWhole(transport, { deserializeMessage, STDIO_DEFAULT_MAX_BUFFER_SIZE })).toBe(true);
    expect((transport as unknown as { _readBuffer: unknown })._readBuffer).toBeInstanceOf(LineReadBuffer);
  });
});
