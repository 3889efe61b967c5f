// The front of a connection: answers `initialize` the moment it arrives, before the ACP SDK and the
// rest are loaded, so the daemon answers its first request in about the time Node takes to start.
// Every line is read from the Node stream itself, split and bounded as its bytes come, and handed to
// the SDK as the one web stream it reads: the initialize line too, once the SDK is loaded, whose own
// answer to it (the same, from the same function) is then left out.
import type { Readable, Writable } from "node:stream";
import { initializeResult } from "../acp/initialize.js";
import type { Gate } from "../acp/link.js";
import { LineSplitter, UNPROVED_LINE_MAX, concat, parseLine } from "./lines.js";
import { log } from "./log.js";

const NEWLINE = 0x0a;
/** An initialize request is small: a first line longer than this isn't answered ahead. */
const FIRST_LINE_MAX = 64 * 1024;
/**
 * The most requests of one connection read and not yet answered: past it, its input is read no
 * further until one is. On stdio routed to several agents, the most of each agent's (daemon/route.ts),
 * and the connection's own bound as many times over as it serves agents.
 */
export const PENDING_MAX = 256;
/**
 * How long a client may leave its output unread, none of what waits for it taken, before its
 * connection is closed (LNK_ACP_UNREAD_MS): a client that reads slowly takes some of it well within.
 */
export const DEFAULT_UNREAD_MS = 60_000;
/**
 * A message longer than this goes out in pieces of it, each once the one before was taken: what
 * the client takes of a long message (an export's answer, of many megabytes) is seen as it goes.
 */
const PIECE = 64 * 1024;

export interface Connection {
  /** Whole lines, each at most the bound, for the SDK. */
  input: ReadableStream<Uint8Array>;
  output: WritableStream<Uint8Array>;
  /** The same output, taking whole messages: what the SDK sends goes out this way. */
  send: MessageSink;
  /** Settles once the first line was read (and answered, if it was initialize); true if the input ended first. */
  first: Promise<boolean>;
}

/**
 * Whole messages out, each one line, written straight to the connection's Node stream: what a
 * connection sends most (a turn's updates, its answer) pays for no web stream and no encoding of its
 * own. The messages written in one pass of the event loop (a turn's streamed chunks, read from the
 * model at once) leave in one write.
 */
export interface MessageSink {
  /** Resolves once the message is taken (the stream is not full); `written` once it reached the connection. */
  write(message: object, written?: () => void): Promise<void>;
  /**
   * Resolves once every message taken so far has reached the connection, or never will (the
   * connection is gone): each `written` that is coming has come.
   */
  flushed(): Promise<void>;
}

/** The connection's output as a web stream (what the SDK writes as bytes goes there), made when first written to. */
export type WebOutput = () => WritableStream<Uint8Array>;

type Id = string | number;

/** The id of a well-formed initialize request, or undefined (then the SDK answers it, right or wrong). */
export function initializeId(line: string): Id | undefined {
  let msg: unknown;
  try {
    msg = parseLine(line);
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

/** The lines of a Node stream, as its bytes are split (LineSplitter). */
interface NodeLines {
  /** The next line split already, if any. */
  next(): Uint8Array | undefined;
  /** The next line, read from the stream as needed; undefined once it ended; rejects with its error. */
  wait(): Promise<Uint8Array | undefined>;
}

/**
 * Reads a Node stream's lines straight off it, in flowing mode only while a line is waited for:
 * paused as soon as the bytes read hold one, so a client that sends faster than its requests are
 * taken is read no further (its bytes wait in the stream, and then in the kernel). A stream
 * destroyed without an end or an error ends here too.
 */
function nodeLines(input: Readable, splitter: LineSplitter): NodeLines {
  const ready: Uint8Array[] = [];
  const take = (line: Uint8Array) => void ready.push(line);
  let ended = false;
  let failed: Error | undefined;
  let listening = false;
  let wake: (() => void) | undefined;
  const woken = () => {
    const w = wake;
    wake = undefined;
    w?.();
  };
  const end = () => {
    if (ended) return;
    ended = true;
    splitter.end(take);
  };
  const onData = (chunk: Uint8Array) => {
    splitter.push(chunk, take);
    if (ready.length === 0) return;
    input.pause();
    woken();
  };
  const onEnd = () => {
    end();
    woken();
  };
  const onError = (e: Error) => {
    failed = e;
    woken();
  };
  return {
    next: () => ready.shift(),
    async wait() {
      for (;;) {
        const line = ready.shift();
        if (line !== undefined) return line;
        if (failed) throw failed;
        if (ended) return undefined;
        if (!listening) {
          listening = true;
          input.on("data", onData);
          input.once("end", onEnd);
          input.once("close", onEnd);
          input.once("error", onError);
          // Ended or destroyed before it was listened to: no event of it is to come.
          if (input.errored) failed = input.errored;
          if (input.destroyed || input.readableEnded) end();
          continue;
        }
        await new Promise<void>((resolve) => {
          wake = resolve;
          input.resume();
        });
      }
    },
  };
}

/**
 * Takes a connection's Node streams. The first line is read at once; a well-formed `initialize` no
 * longer than FIRST_LINE_MAX is answered on `output` there and then. It and the rest are read off
 * `input`, as the SDK asks for its lines. What the SDK writes goes to the same output (as bytes through `web()`, made
 * when it first writes them), but for its own answer to the initialize answered ahead.
 */
export function front(input: Readable, output: Writable, web: WebOutput, version: string, max: number, unreadMs = DEFAULT_UNREAD_MS, gate?: Gate, pendingMax = PENDING_MAX): Connection {
  const decoder = new TextDecoder();
  /** The initialize answered ahead, whose answer from the SDK is left out. */
  let skip: Id | undefined;
  let outgoing: Uint8Array = new Uint8Array(0);
  // The lines after an initialize request wait for the SDK's answer to it: the client may send them
  // at once, and the SDK, which handles what it reads side by side, takes no request before its
  // initialize has finished.
  let initializing: { id: Id; answered: () => void; done: Promise<void> } | undefined;
  // Requests read and not answered yet: when the input ends, the SDK's stream ends only once each has
  // its answer, so a client that closes its side right after asking still gets every answer.
  // Past pendingMax, the next request read waits until one is answered: each holds what its answer
  // will be (a turn's updates, waiting for a client that may read none), so a burst of prompts read
  // at once, before any output was there to fill, held them all.
  const pending = new Unanswered();
  let drained: (() => void) | undefined;
  let roomFor: (() => void) | undefined;
  /** An answer to `id` went out: one request of that id is answered. */
  const settled = (id: Id) => {
    if (!pending.answered(id)) return;
    if (pending.count < pendingMax && roomFor) {
      roomFor();
      roomFor = undefined;
    }
    if (pending.count === 0) drained?.();
  };

  // A client that reads none of its output: what it sends is read no further while the output waits
  // (each request read would leave one more answer held in memory), and once it has taken none of
  // it for unreadMs its connection is closed. A turn under way goes on, and its answer is kept on
  // disk, undelivered (_link/recover). Stdout can't be closed: its input is, and the process ends.
  let unread = false;
  let cutOff!: (e: Error) => void;
  const cut = new Promise<never>((_, reject) => (cutOff = reject));
  cut.catch(() => undefined);
  /** When a write last reached the client's end (performance.now()): what it takes, however slowly. */
  let tookAt = 0;
  const took = () => {
    tookAt = performance.now();
  };
  let waiting: Promise<void> | undefined;
  /** Resolves once the output has room again, or the connection was closed for leaving it unread. */
  const room = (): Promise<void> | undefined => {
    if (unread || !output.writableNeedDrain) return undefined;
    return (waiting ??= new Promise<void>((resolve) => {
      const since = performance.now();
      const done = () => {
        clearTimeout(timer);
        output.off("drain", done);
        output.off("close", done);
        waiting = undefined;
        resolve();
      };
      const check = () => {
        // Counted from the wait's start, or from the last write the client took since.
        const idle = performance.now() - Math.max(since, tookAt);
        if (idle < unreadMs) {
          timer = setTimeout(check, unreadMs - idle);
          return;
        }
        unread = true;
        log.warn("the client read none of its output: its connection is closed", { ms: unreadMs, bytes: output.writableLength });
        cutOff(new Error(`the connection is closed: its client read none of its output for ${unreadMs} ms`));
        drained?.();
        roomFor?.();
        letFlushedGo();
        output.destroy();
        input.destroy();
        done();
      };
      let timer = setTimeout(check, unreadMs);
      output.on("drain", done);
      output.on("close", done);
    }));
  };
  /** A long message under way, in pieces: the next waits for it. */
  let long: Promise<void> | undefined;
  /** Writes a long message in pieces, each once the one before was taken. */
  // Messages handed to the output whose write has not ended yet (MessageSink.flushed).
  let unflushed = 0;
  const onFlushed: (() => void)[] = [];
  const wrote = () => {
    if (--unflushed === 0) for (const done of onFlushed.splice(0)) done();
  };
  /** Nothing more will reach the connection: whatever waits for what was written goes on. */
  const letFlushedGo = () => {
    for (const done of onFlushed.splice(0)) done();
  };
  output.once("close", letFlushedGo);

  const inPieces = async (line: string, written?: () => void): Promise<void> => {
    const bytes = Buffer.from(line);
    unflushed++;
    try {
      for (let at = 0; at < bytes.length; at += PIECE) {
        const piece = bytes.subarray(at, at + PIECE);
        const taken = new Promise<void>((resolve, reject) => output.write(piece, (e) => (e ? reject(e) : resolve())));
        void room();
        await Promise.race([taken, cut]);
        took();
      }
      written?.();
    } finally {
      wrote();
    }
  };

  /** A line's bound: until a port's connection has proved itself, its lines are those of a handshake and a proof. */
  const lineMax = (): number => (gate && !gate.proved ? Math.min(max, UNPROVED_LINE_MAX) : max);

  // Read off the Node stream and split into lines as its bytes come: one step to a line, where web
  // streams over it (Node's adapter, a stream of its chunks, one of its lines) took three, each a
  // few promises a line.
  const lines = nodeLines(input, new LineSplitter(max, gate ? lineMax : undefined));
  /** The first line, read at once and held for the SDK; undefined once it is taken, or where the input had none. */
  let held: Uint8Array | undefined;
  // Read the first line now, answering it if it is initialize. One over the bounds stands in as
  // oversized or too deep (LineSplitter), goes on to be refused, and is not answered here.
  const first = (async () => {
    held = await lines.wait();
    if (held !== undefined && held.length <= FIRST_LINE_MAX + 1) {
      const id = initializeId(decoder.decode(held));
      if (id !== undefined) {
        skip = id;
        const answer = `${JSON.stringify({ jsonrpc: "2.0", id, result: initializeResult(version) })}\n`;
        await new Promise<void>((resolve) => output.write(answer, () => resolve()));
      }
    }
    return held === undefined;
  })();

  const readable = new ReadableStream<Uint8Array>({
    async pull(controller) {
      await first;
      const full = room();
      if (full) await full;
      let line = held;
      held = undefined;
      line ??= lines.next() ?? (await lines.wait());
      if (line === undefined) {
        if (pending.count > 0 && !unread) await new Promise<void>((resolve) => (drained = resolve));
        return controller.close();
      }
      if (initializing) await initializing.done;
      const request = requestOf(decoder.decode(line));
      // Past pendingMax a request waits, this one line held, until one is answered; a notification
      // goes on: a client whose prompts fill the bound can still cancel them.
      while (request && pending.count >= pendingMax && !unread) await new Promise<void>((resolve) => (roomFor = resolve));
      if (request) {
        pending.asked(request.id);
        if (request.method === "initialize") {
          let answered!: () => void;
          const done = new Promise<void>((resolve) => (answered = resolve));
          initializing = { id: request.id, answered, done };
        }
      }
      controller.enqueue(line);
    },
    cancel: () => void input.destroy(),
  });

  let writer: WritableStreamDefaultWriter<Uint8Array> | undefined;
  const out = () => (writer ??= web().getWriter());
  const writable = new WritableStream<Uint8Array>({
    async write(chunk) {
      await first;
      // A line of the SDK's own (its refusal of a line it can't read) never lands between the pieces of a long message.
      while (long) await long;
      if (pending.count > 0) {
        const id = answerId(chunk, decoder);
        if (id !== undefined && id === initializing?.id) {
          initializing.answered();
          initializing = undefined;
        }
        if (id !== undefined) settled(id);
      }
      if (skip === undefined) {
        const written = out().write(chunk);
        void room();
        return written;
      }
      // Until the SDK's answer to the initialize answered ahead has gone by, look at whole lines.
      outgoing = concat([outgoing, chunk]);
      let pass: Uint8Array = new Uint8Array(0);
      for (let nl = outgoing.indexOf(NEWLINE); nl >= 0 && skip !== undefined; nl = outgoing.indexOf(NEWLINE)) {
        const line = outgoing.subarray(0, nl + 1);
        outgoing = outgoing.slice(nl + 1);
        if (isAnswerTo(decoder.decode(line), skip)) skip = undefined;
        else pass = concat([pass, line]);
      }
      if (skip === undefined) {
        pass = concat([pass, outgoing]);
        outgoing = new Uint8Array(0);
      }
      if (pass.length) await out().write(pass);
    },
    close: () => out().close(),
    abort: (reason) => out().abort(reason),
  });
  let corked = false;
  const send: MessageSink = {
    flushed: () => (unflushed === 0 || unread || output.destroyed ? Promise.resolve() : new Promise<void>((resolve) => onFlushed.push(resolve))),
    async write(message, written) {
      await first;
      while (long) await long;
      if (unread) return cut;
      const id = responseId(message);
      if (id !== undefined) {
        if (id === initializing?.id) {
          initializing.answered();
          initializing = undefined;
        }
        settled(id);
        // The SDK's own answer to the initialize answered ahead.
        if (id === skip) {
          skip = undefined;
          // What the byte path held back while it waited for that answer goes first.
          if (outgoing.length) output.write(outgoing);
          outgoing = new Uint8Array(0);
          return;
        }
      }
      if (!corked) {
        corked = true;
        output.cork();
        process.nextTick(() => {
          corked = false;
          output.uncork();
        });
      }
      const line = `${JSON.stringify(message)}\n`;
      if (line.length > PIECE) {
        long = inPieces(line, written);
        try {
          return await long;
        } finally {
          long = undefined;
        }
      }
      unflushed++;
      const taken = output.write(line, (e) => {
        wrote();
        if (e) return;
        took();
        written?.();
      });
      if (!taken) {
        void room();
        await Promise.race([drain(output), cut]);
      }
    },
  };
  return { input: readable, output: writable, send, first };
}

/** Resolves once a full stream has room again; rejects once it is closed or fails first. */
function drain(output: Writable): Promise<void> {
  if (output.destroyed || output.writableEnded) return Promise.reject(new Error("the connection is closed"));
  return new Promise((resolve, reject) => {
    const done = (e?: Error) => {
      output.off("drain", onDrain);
      output.off("close", onClose);
      output.off("error", done);
      if (e) reject(e);
      else resolve();
    };
    const onDrain = () => done();
    const onClose = () => done(new Error("the connection is closed"));
    output.on("drain", onDrain);
    output.on("close", onClose);
    output.on("error", done);
  });
}

/**
 * The id and method of a request the SDK answers under its id, from one line read: JSON-RPC 2.0,
 * with a method, and an id that is a string or a whole number. Any other id is answered as null.
 */
function requestOf(line: string): { id: Id; method: string } | undefined {
  try {
    const msg: unknown = parseLine(line);
    if (typeof msg !== "object" || msg === null || Array.isArray(msg)) return undefined;
    const { jsonrpc, id, method } = msg as { jsonrpc?: unknown; id?: unknown; method?: unknown };
    if (typeof method !== "string") return undefined;
    const counted = countedId(jsonrpc, id);
    return counted === undefined ? undefined : { id: counted, method };
  } catch {
    return undefined;
  }
}

/** The id a request (a message with a method) is answered under and counted by: JSON-RPC 2.0's, a string or a whole number; else undefined. */
export function countedId(jsonrpc: unknown, id: unknown): Id | undefined {
  if (jsonrpc !== "2.0") return undefined;
  return typeof id === "string" || (typeof id === "number" && Number.isInteger(id)) ? id : undefined;
}

/**
 * Requests sent on and not answered yet, counted by id: a client that uses one id twice is owed two
 * answers. An id is let go once all its requests are answered, so none is owed exactly when the
 * count is 0.
 */
export class Unanswered {
  private readonly ids = new Map<Id, number>();
  count = 0;

  asked(id: Id): void {
    this.count++;
    this.ids.set(id, (this.ids.get(id) ?? 0) + 1);
  }

  /** One request of `id` is answered; false when none was owed. */
  answered(id: Id): boolean {
    const n = this.ids.get(id);
    if (n === undefined) return false;
    this.count--;
    if (n > 1) this.ids.set(id, n - 1);
    else this.ids.delete(id);
    return true;
  }
}

/** The id of a message that answers a request (it has an id and no method), or undefined. */
export function responseId(message: object): Id | undefined {
  const { id, method } = message as { id?: unknown; method?: unknown };
  return method === undefined && (typeof id === "string" || typeof id === "number") ? id : undefined;
}

const RESPONSE_START = '{"jsonrpc":"2.0","id":';

/**
 * The id of an answer the SDK writes (one message a write). Notifications, the bulk of what is
 * written while a turn streams, are told apart by their start and never parsed.
 */
export function answerId(chunk: Uint8Array, decoder: TextDecoder): Id | undefined {
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
