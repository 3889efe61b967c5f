// The lines a stdio tool writes, read in time that grows with their length. The MCP SDK's own
// buffer joins what it holds with each new read and looks for the line's end from its start again:
// a tool's answer of 10 MB (a filesystem tool reading a large file), read by the pipe 64 KiB at a
// time, stood the daemon's event loop still for some seconds, every agent's turns with it.
import type { JSONRPCMessage } from "@modelcontextprotocol/sdk/types.js";

const NEWLINE = 0x0a;

/**
 * In place of the SDK's ReadBuffer, the same to its transport: append a read, take each message
 * whole, clear. A line is joined once, when its end comes; a line longer than `max` bytes with no
 * end yet is an error (the SDK's bound: its transport then closes), and what was held goes.
 */
export class LineReadBuffer {
  /** The pieces of the line not ended yet. */
  private parts: Buffer[] = [];
  private size = 0;
  /** Lines ended and not taken yet. */
  private readonly lines: Buffer[] = [];

  constructor(
    private readonly max: number,
    private readonly deserialize: (line: string) => JSONRPCMessage,
  ) {}

  append(chunk: Buffer): void {
    let start = 0;
    for (let nl = chunk.indexOf(NEWLINE); nl >= 0; nl = chunk.indexOf(NEWLINE, start)) {
      this.parts.push(chunk.subarray(start, nl));
      this.lines.push(this.parts.length === 1 ? (this.parts[0] as Buffer) : Buffer.concat(this.parts));
      this.parts = [];
      this.size = 0;
      start = nl + 1;
    }
    if (start >= chunk.length) return;
    this.size += chunk.length - start;
    if (this.size > this.max) {
      this.clear();
      throw new Error(`a line of the tool's over ${this.max} bytes with no end`);
    }
    this.parts.push(chunk.subarray(start));
  }

  readMessage(): JSONRPCMessage | null {
    const line = this.lines.shift();
    if (line === undefined) return null;
    return this.deserialize(line.toString("utf8").replace(/\r$/, ""));
  }

  clear(): void {
    this.parts = [];
    this.size = 0;
    this.lines.length = 0;
  }
}
