// Loaded into a process the bench drives (`node --import <this file's URL> …`, with LNK_BENCH_STAMPS
// naming a file): notes when each chunk of its input was read, when each write began on a socket
// other than its stdio (a request to the model), when each chunk was read from a socket other than
// its input (the model's answer), and when each response began on its output; written to the file as
// the process exits. The time between two of them is the process's own; the rest of what its client
// sees is the way to the process and from it (inside.ts). Nothing of the process's code is touched:
// what it does is seen at Node's sockets (a pipe's stream is a net.Socket too). The stamps take a
// little time of their own, so they are taken in a pass of their own, never in the rounds the
// targets are measured with.
import { writeFileSync } from "node:fs";
import { Socket } from "node:net";

/** What a stamp notes: input read, a request written, an answer's chunk read, a response written. */
export const STAMP_KINDS = ["in", "request", "answer", "response"] as const;
export type StampKind = (typeof STAMP_KINDS)[number];
/** A stamp: what happened, and when (ms on the machine's clock, machineNow: comparable across processes). */
export type Stamp = [StampKind, number];

/**
 * Milliseconds on the machine's monotonic clock (CLOCK_MONOTONIC), one clock for every process of
 * the machine. Not performance.timeOrigin + performance.now(): a process's time origin is taken
 * from the wall clock as it starts, and a wall clock being slewed (by NTP, by a virtual machine's
 * host) set two processes' times apart by some milliseconds a second, and no turn's stamps fit.
 */
export const machineNow = (): number => Number(process.hrtime.bigint()) / 1e6;

/** A time of this process's performance.now(), on the machine's clock (both monotonic: one offset). */
export const onMachineClock = (t: number): number => t + (machineNow() - performance.now());

const RESPONSE = /^\{"jsonrpc":"2\.0","id":(?:"(?:[^"\\]|\\.)*"|-?\d+|null),"(?:result|error)":/;

/** Whether a chunk written to the output begins a response (a result or an error to a request). */
export function beginsResponse(chunk: unknown): boolean {
  const head = typeof chunk === "string" ? chunk.slice(0, 160) : Buffer.isBuffer(chunk) || chunk instanceof Uint8Array ? Buffer.from(chunk.buffer, chunk.byteOffset, Math.min(chunk.byteLength, 160)).toString("latin1") : "";
  return RESPONSE.test(head);
}

type Writing = (this: Socket, writev: boolean, data: unknown, encoding: BufferEncoding, cb: (e?: Error | null) => void) => void;
interface Internals {
  _handle?: { fd?: number } | null;
  _writeGeneric: Writing;
}

const file = process.env.LNK_BENCH_STAMPS;
if (file) {
  const stamps: Stamp[] = [];
  const now = machineNow;
  const fdOf = (s: Socket) => (s as unknown as Internals)._handle?.fd;
  const proto = Socket.prototype as unknown as Internals & { push: Socket["push"] };
  const push = proto.push;
  proto.push = function (this: Socket, chunk: unknown, encoding?: BufferEncoding) {
    if (chunk !== null && chunk !== undefined) stamps.push([fdOf(this) === 0 ? "in" : "answer", now()]);
    return push.call(this, chunk, encoding);
  };
  const writeGeneric = proto._writeGeneric;
  proto._writeGeneric = function (this: Socket, writev, data, encoding, cb) {
    const fd = fdOf(this);
    if (fd === 1) {
      const chunks = writev ? (data as { chunk: unknown }[]).map((d) => d.chunk) : [data];
      if (chunks.some(beginsResponse)) stamps.push(["response", now()]);
    } else if (fd !== 2) stamps.push(["request", now()]);
    writeGeneric.call(this, writev, data, encoding, cb);
  };
  process.on("exit", () => writeFileSync(file, JSON.stringify(stamps)));
}
