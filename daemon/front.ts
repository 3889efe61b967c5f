// The front of a connection: answers `initialize` the moment it arrives, before the ACP SDK and the
// rest are loaded, so the daemon answers its first request in about the time Node takes to start.
// Everything else, the initialize line included, goes on to the SDK once it is loaded; the SDK's own
// answer to that initialize (the same, from the same function) is then left out.
import { initializeResult } from "../acp/initialize.js";
import { concat } from "./lines.js";

const NEWLINE = 0x0a;
/** An initialize request is small: a first line longer than this isn't answered ahead. */
const FIRST_LINE_MAX = 64 * 1024;

export interface Connection {
  input: ReadableStream<Uint8Array>;
  output: WritableStream<Uint8Array>;
  /** Settles once the first line was read (and answered, if it was initialize); true if the input ended first. */
  first: Promise<boolean>;
}

type Id = string | number;

/** The id of a well-formed initialize request, or undefined (then the SDK answers it, right or wrong). */
export function initializeId(line: string): Id | undefined {
  let msg: unknown;
  try {
    msg = JSON.parse(line);
  } catch {
    return undefined;
  }
  if (typeof msg !== "object" || msg === null || Array.isArray(msg)) return undefined;
  const { jsonrpc, method, id, params } = msg as Record<string, unknown>;
  if (jsonrpc !== "2.0" || method !== "initialize") return undefined;
  if (typeof id !== "string" && !(typeof id === "number" && Number.isInteger(id))) return undefined;
  if (typeof params !== "object" || params === null || Array.isArray(params)) return undefined;
  const version = (params as { protocolVersion?: unknown }).protocolVersion;
  if (typeof version !== "number" || !Number.isInteger(version) || version < 0 || version > 65535) return undefined;
  return id;
}

/**
 * Wraps a connection's streams. The first line is read at once; a well-formed `initialize` is
 * answered on `output` there and then. What the SDK writes later goes to `output` too, but for its
 * own answer to that same request.
 */
export function front(input: ReadableStream<Uint8Array>, output: WritableStream<Uint8Array>, version: string): Connection {
  const reader = input.getReader();
  const writer = output.getWriter();
  const encoder = new TextEncoder();
  const decoder = new TextDecoder();
  /** Bytes read ahead, waiting for the SDK. */
  const ahead: Uint8Array[] = [];
  let skip: Id | undefined;
  let outgoing: Uint8Array = new Uint8Array(0);
  // The lines after an initialize answered ahead wait for the SDK's own answer to it: the client may
  // send them at once, and the SDK takes no request before its initialize has finished.
  let initialized!: () => void;
  const sdkInitialized = new Promise<void>((resolve) => (initialized = resolve));
  let held: Uint8Array | undefined;
  // Requests read and not answered yet: when the input ends, the SDK's stream ends only once each has
  // its answer, so a client that closes its side right after asking still gets every answer.
  const pending = new Set<Id>();
  let drained: (() => void) | undefined;
  const track = (chunk: Uint8Array) => {
    const id = requestId(decoder.decode(chunk));
    if (id !== undefined) pending.add(id);
  };

  // Read the first line now, answering it if it is initialize.
  const first = (async () => {
    let line: Uint8Array = new Uint8Array(0);
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return true;
      ahead.push(value);
      line = concat([line, value]);
      const nl = line.indexOf(NEWLINE);
      if (nl < 0 && line.length <= FIRST_LINE_MAX) continue;
      if (nl >= 0) {
        const id = initializeId(decoder.decode(line.subarray(0, nl)));
        if (id !== undefined) {
          skip = id;
          // Only the initialize line goes on now; the rest is held until the SDK has answered it.
          ahead.length = 0;
          ahead.push(line.slice(0, nl + 1));
          if (line.length > nl + 1) held = line.slice(nl + 1);
          await writer.write(encoder.encode(`${JSON.stringify({ jsonrpc: "2.0", id, result: initializeResult(version) })}\n`));
        }
      }
      return false;
    }
  })();

  const readable = new ReadableStream<Uint8Array>({
    async pull(controller) {
      const ended = await first;
      const next = ahead.shift();
      if (next) {
        track(next);
        return controller.enqueue(next);
      }
      if (skip !== undefined) await sdkInitialized;
      if (held) {
        track(held);
        controller.enqueue(held);
        held = undefined;
        return;
      }
      const read = ended ? undefined : await reader.read();
      if (read && !read.done) {
        track(read.value);
        return controller.enqueue(read.value);
      }
      if (pending.size > 0) await new Promise<void>((resolve) => (drained = resolve));
      controller.close();
    },
    cancel: (reason) => reader.cancel(reason),
  });

  const writable = new WritableStream<Uint8Array>({
    async write(chunk) {
      await first;
      if (pending.size > 0) {
        const id = answerId(chunk, decoder);
        if (id !== undefined && pending.delete(id) && pending.size === 0) drained?.();
      }
      if (skip === undefined) return writer.write(chunk);
      // Until the SDK's answer to the initialize answered ahead has gone by, look at whole lines.
      outgoing = concat([outgoing, chunk]);
      let pass: Uint8Array = new Uint8Array(0);
      for (let nl = outgoing.indexOf(NEWLINE); nl >= 0 && skip !== undefined; nl = outgoing.indexOf(NEWLINE)) {
        const line = outgoing.subarray(0, nl + 1);
        outgoing = outgoing.slice(nl + 1);
        if (isAnswerTo(decoder.decode(line), skip)) {
          skip = undefined;
          initialized();
        } else pass = concat([pass, line]);
      }
      if (skip === undefined) {
        pass = concat([pass, outgoing]);
        outgoing = new Uint8Array(0);
      }
      if (pass.length) await writer.write(pass);
    },
    close: () => writer.close(),
    abort: (reason) => writer.abort(reason),
  });
  return { input: readable, output: writable, first };
}

/** The id of a request (a message with a method and an id), from one line read. */
function requestId(line: string): Id | undefined {
  try {
    const msg: unknown = JSON.parse(line);
    if (typeof msg !== "object" || msg === null || Array.isArray(msg)) return undefined;
    const { id, method } = msg as { id?: unknown; method?: unknown };
    return typeof method === "string" && (typeof id === "string" || typeof id === "number") ? id : undefined;
  } catch {
    return undefined;
  }
}

const RESPONSE_START = '{"jsonrpc":"2.0","id":';

/**
 * The id of an answer the SDK writes (one message a write). Notifications, the bulk of what is
 * written while a turn streams, are told apart by their start and never parsed.
 */
function answerId(chunk: Uint8Array, decoder: TextDecoder): Id | undefined {
  const start = decoder.decode(chunk.subarray(0, RESPONSE_START.length));
  if (start !== RESPONSE_START) return undefined;
  try {
    const msg: unknown = JSON.parse(decoder.decode(chunk));
    if (typeof msg !== "object" || msg === null || "method" in msg) return undefined;
    const id = (msg as { id?: unknown }).id;
    return typeof id === "string" || typeof id === "number" ? id : undefined;
  } catch {
    return undefined;
  }
}

function isAnswerTo(line: string, id: Id): boolean {
  try {
    const msg: unknown = JSON.parse(line);
    return typeof msg === "object" && msg !== null && (msg as { id?: unknown }).id === id && !("method" in msg);
  } catch {
    return false;
  }
}
