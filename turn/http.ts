// The model's requests over Node's own HTTP client, in the shape of fetch that the openai client takes
// (its `fetch` option). The client's request and its errors stay the SDK's; what changes is the layer
// under it: a request written straight to a kept-alive socket and its answer read from it, where
// Node's fetch (undici) makes a Request, a body stream and a Response of its own at every step, some
// half a millisecond of a turn's own time. A streamed answer's events are read here too, straight off
// Node's stream (readAnswerEvents): the SDK's own reading of them, through a web stream and four
// async generators, cost a steady turn some half a millisecond of the process's time.
import { Agent as HttpAgent, request as httpRequest, type ClientRequest, type ClientRequestArgs, type IncomingHttpHeaders, type IncomingMessage, type RequestOptions } from "node:http";
import { createRequire } from "node:module";
import { isIP, type Socket } from "node:net";
import { finished, type Duplex } from "node:stream";
import { FetchHeaders } from "./headers.js";
import { EventReader, type StreamEvent } from "./sse.js";

/**
 * How long a connection opened ahead of a model's request waits for it before it is closed: less
 * than the 5 s a server commonly keeps an idle connection open (Node's own keepAliveTimeout), so
 * the request never goes out on a connection the server is closing.
 */
const AHEAD_MS = 4_000;

/** A scheme's kept-alive connections, and the one opened ahead of its model's next request, by connection name. */
interface Pool {
  agent: HttpAgent;
  ahead: Map<string, Duplex>;
  /** The agent's own way to make a connection (a socket, or a TLS one for https). */
  make: (options: ClientRequestArgs) => Duplex | null | undefined;
}

/**
 * A pool whose connections are the model's: a connection opened ahead (connectAhead) is the one its
 * next new connection to that server is, so the request goes out on a connection already made.
 */
function modelPool(agent: HttpAgent): Pool {
  const ahead = new Map<string, Duplex>();
  const make = ownConnections(agent);
  agent.createConnection = (options: ClientRequestArgs, made?: (err: Error | null, stream: Duplex) => void) => {
    const name = agent.getName(options);
    const kept = ahead.get(name);
    ahead.delete(name);
    if (kept === undefined || kept.destroyed) return make(options, made);
    kept.emit(TAKEN);
    (kept as Socket).ref();
    return kept;
  };
  return { agent, ahead, make };
}

/**
 * The agent's connections, each heard to its end. A request aborted as its answer ends (a turn cut
 * at its answer's last chunk, a cancel at that moment) destroys its connection with the abort's
 * error, which Node emits a tick later: by then the answer's end has handed the connection back to
 * the pool and taken the request's listener off it, and an error nothing listens for ends the
 * process, every agent's turns with it. So each connection has a listener of its own from the
 * start: an error destroys the connection all the same (the pool lets it go), and reaches the
 * request it was made for through the request's own listener, as before. Returns the way to make one.
 */
function ownConnections(agent: HttpAgent): (options: ClientRequestArgs, made?: (err: Error | null, stream: Duplex) => void) => Duplex | null | undefined {
  const make = agent.createConnection.bind(agent);
  const own = (options: ClientRequestArgs, made?: (err: Error | null, stream: Duplex) => void) => {
    const socket = make(options, made);
    socket?.on("error", heard);
    return socket;
  };
  agent.createConnection = own;
  return own;
}

/** A connection's error, heard: what it means is the request's to say (see ownConnections). */
function heard(): void {
  // The connection is destroyed by the error itself.
}

/** A pool of kept-alive connections for a runtime's small asks, each heard to its end (ownConnections). */
function asksPool(agent: HttpAgent): HttpAgent {
  ownConnections(agent);
  return agent;
}

/** Told to a connection opened ahead as a request takes it: what watched it while it waited lets go. */
const TAKEN = Symbol("taken");

/**
 * A scheme's way to make a request, and its two pools of kept-alive connections: the model's own
 * requests', and those of a runtime's and the list of models' small asks (turn/runtime.ts), which,
 * made while a session opens, never take the connection opened ahead for the model's first request.
 */
interface Scheme {
  request: (url: URL, options: RequestOptions, onAnswer: (res: IncomingMessage) => void) => ClientRequest;
  model: Pool;
  asks: HttpAgent;
}

/** Plain HTTP, for the process (a local endpoint's, Link's proxy's). */
const plain: Scheme = { request: httpRequest, model: modelPool(new HttpAgent({ keepAlive: true })), asks: asksPool(new HttpAgent({ keepAlive: true })) };

/**
 * node:https, with its pools of kept-alive connections, loaded at the first https:// request: TLS
 * and what it loads cost a start some 4 ms that an endpoint over plain HTTP never needs.
 */
let secure: Scheme | undefined;
function tls(): Scheme {
  if (!secure) {
    const https = createRequire(import.meta.url)("node:https") as typeof import("node:https");
    secure = { request: https.request, model: modelPool(new https.Agent({ keepAlive: true })), asks: asksPool(new https.Agent({ keepAlive: true })) };
  }
  return secure;
}

/** The scheme of a URL this module takes (http: or https:). */
const schemeOf = (url: URL): Scheme => (url.protocol === "https:" ? tls() : plain);

/** Whose connections a request goes over: the model's own requests, or the small asks of a runtime. */
type Purpose = "model" | "ask";

/** A request to `url` over its scheme, through that scheme's kept-alive connections for its purpose. */
function send(url: URL, options: RequestOptions, onAnswer: (res: IncomingMessage) => void, purpose: Purpose = "model"): ClientRequest {
  const scheme = schemeOf(url);
  return scheme.request(url, { ...options, agent: purpose === "model" ? scheme.model.agent : scheme.asks }, onAnswer);
}

/**
 * Opens a connection to the model's server ahead of its next request (a process just bound, a
 * session just opened), unless one is open already, kept alive or in use, or opened ahead: the
 * request then goes out at once, with no connection (and, over https, no TLS handshake) to wait for.
 * Nothing is sent on it. Unused after AHEAD_MS (`ms`), it is closed; one that fails or that the
 * server closes is let go, and the request makes its own as it would have. Never throws.
 */
export function connectAhead(baseUrl: string, o: { ms?: number } = {}): void {
  let url: URL;
  try {
    url = httpUrl(baseUrl);
  } catch {
    return;
  }
  const pool = schemeOf(url).model;
  const host = url.hostname.replace(/^\[|\]$/g, "");
  const port = Number(url.port || (url.protocol === "https:" ? 443 : 80));
  // As the agent names the connections of a request to this server (its TLS name the host's, as a request's is).
  const options: ClientRequestArgs = { host, port, ...(url.protocol === "https:" && isIP(host) === 0 ? { servername: host } : {}) };
  const name = pool.agent.getName(options);
  if (pool.ahead.has(name) || (pool.agent.freeSockets[name]?.length ?? 0) > 0 || (pool.agent.sockets[name]?.length ?? 0) > 0) return;
  let socket: Duplex;
  try {
    const made = pool.make({ ...options, keepAlive: true, keepAliveInitialDelay: 1000 } as ClientRequestArgs);
    if (!made) return;
    socket = made;
  } catch {
    return;
  }
  // Failed (refused, reset) or closed before a request took it: this connection's end, never the
  // process's; the next request makes its own.
  const drop = () => {
    clearTimeout(timer);
    if (pool.ahead.get(name) === socket) pool.ahead.delete(name);
  };
  const timer = setTimeout(() => {
    drop();
    socket.destroy();
  }, o.ms ?? AHEAD_MS);
  timer.unref();
  socket.on("error", drop);
  socket.once("close", drop);
  // Taken, it is the request's: its errors and its end are the request's to meet.
  socket.once(TAKEN, () => {
    clearTimeout(timer);
    socket.off("error", drop);
    socket.off("close", drop);
  });
  (socket as Socket).setNoDelay?.(true);
  // Waiting, it keeps no process from ending.
  (socket as Socket).unref?.();
  pool.ahead.set(name, socket);
}

/** The URL of a request this module makes: http:// or https://, else a TypeError, as fetch throws. */
function httpUrl(input: string): URL {
  let url: URL;
  try {
    url = new URL(input);
  } catch (e) {
    throw new TypeError(`invalid URL: ${(e as Error).message}`, { cause: e });
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") throw new TypeError(`not an HTTP URL: ${url.protocol}`);
  return url;
}

/** Statuses whose answer has no body, which a Response refuses to be given one for. */
const NO_BODY = new Set([101, 204, 205, 304]);

function headersOf(res: IncomingMessage): FetchHeaders {
  const headers = new FetchHeaders();
  const raw = res.rawHeaders;
  for (let i = 0; i + 1 < raw.length; i += 2) {
    try {
      headers.append(raw[i] as string, raw[i + 1] as string);
    } catch {
      // A header Headers won't hold (a name or value it finds invalid) is left out, as fetch leaves it.
    }
  }
  return headers;
}

/**
 * An answer's body: a web stream that pulls from the Node stream, one chunk a read (a body read
 * whole, an error's, or cloned); a streamed answer's events are read off the Node stream itself
 * (readAnswerEvents), which takes it. Either way it is used once read, as fetch's is.
 */
class AnswerBody extends ReadableStream<Uint8Array<ArrayBuffer>> {
  private readonly pulled: { yet: boolean };

  constructor(readonly res: IncomingMessage) {
    const pulled = { yet: false };
    let chunks: AsyncIterator<Buffer> | undefined;
    super(
      {
        async pull(controller) {
          pulled.yet = true;
          chunks ??= res[Symbol.asyncIterator]() as AsyncIterator<Buffer>;
          const next = await chunks.next();
          if (next.done) controller.close();
          else controller.enqueue(next.value as Uint8Array<ArrayBuffer>);
        },
        cancel() {
          res.destroy();
        },
      },
      { highWaterMark: 0 },
    );
    this.pulled = pulled;
  }

  /** Whether it was read from: its answer's body is used then, as fetch's is once disturbed. */
  get disturbed(): boolean {
    return this.pulled.yet;
  }
}

/**
 * The longest event a streamed answer may send, from one blank line to the next (an event is a
 * chunk of the model's answer, its data one line): a chunk is a few hundred bytes, one that holds a
 * call's whole arguments some kilobytes. The client holds an event whole before it parses it, and
 * copies and looks through all of it again at each read: one with no end would be held, and cost
 * more at each read, for as long as the endpoint sends it.
 */
export const ANSWER_EVENT_MAX = 2 * 1024 * 1024;
/** The most a streamed answer's body may be: a long answer of small chunks is some tens of megabytes. */
export const ANSWER_BODY_MAX = 256 * 1024 * 1024;
/** The most of an answer read whole (an error's body, a few hundred bytes as endpoints send them). */
export const WHOLE_MAX = 1024 * 1024;

/** Where the last event of `bytes` ends: past its last blank line (\n\n, \r\r, or \r\n\r\n), else -1. */
function lastEventEnd(bytes: Buffer): number {
  return Math.max(ends(bytes, LF_LF), ends(bytes, CR_CR), ends(bytes, CRLF_CRLF));
}
const LF_LF = Buffer.from("\n\n");
const CR_CR = Buffer.from("\r\r");
const CRLF_CRLF = Buffer.from("\r\n\r\n");
const ends = (bytes: Buffer, mark: Buffer): number => {
  const at = bytes.lastIndexOf(mark);
  return at < 0 ? -1 : at + mark.length;
};

/** An event stream's bytes as they are read: how many have come since its last event ended. */
export class EventSpan {
  /** Bytes since the last event's end. */
  open = 0;
  /** The last three bytes read, for a blank line across two reads. */
  private tail: Uint8Array = Buffer.alloc(0);

  /** Takes the next read; returns the bytes since the last event's end. */
  next(chunk: Uint8Array): number {
    const seen = Buffer.concat([this.tail, chunk]);
    const end = lastEventEnd(seen);
    this.open = end < 0 ? this.open + chunk.length : seen.length - end;
    this.tail = seen.subarray(Math.max(0, seen.length - 3));
    return this.open;
  }
}

/**
 * How long the body of an answer that said it is whole ([DONE]) may go on before its connection is
 * closed: a server ends it at once, and the connection goes back to its pool.
 */
const AFTER_END_MS = 2_000;

/**
 * Reads a streamed answer (a Response of nodeFetch, its body unread) as server-sent events, straight
 * off Node's stream: `onEvent` is given each event with data as it ends, and returns true once the
 * answer is whole ([DONE]). Resolves then, or at the body's end; rejects with TooLarge past
 * ANSWER_EVENT_MAX or ANSWER_BODY_MAX, with what `onEvent` throws, or with the stream's own error
 * (the connection cut, the request's signal aborted), the answer's connection closed then. Nothing
 * is read after it settles: what follows an answer said whole is let go, and its connection closed
 * unless the body ends within AFTER_END_MS.
 */
export function readAnswerEvents(response: Response, onEvent: (event: StreamEvent) => boolean | void): Promise<void> {
  // A 204 or 205 has none: said as the answer's, not as a fault of the reader.
  if (response instanceof FetchAnswer ? !response.hasBody : response.body === null) return Promise.reject(new Error(`the answer (${response.status}) had no body`));
  const res = response instanceof FetchAnswer ? response.takeNode() : undefined;
  if (!res) return Promise.reject(new TypeError("a streamed answer is read from an unread answer of nodeFetch"));
  return new Promise((resolve, reject) => {
    let settled = false;
    let total = 0;
    /** Once the answer is whole: what follows it is let go, its connection closed should the body not end in time. */
    let late: NodeJS.Timeout | undefined;
    const whole = () => {
      if (settled) return;
      settled = true;
      res.off("data", onData);
      resolve();
      if (res.readableEnded) return;
      late = setTimeout(() => res.destroy(), AFTER_END_MS);
      late.unref();
      res.on("data", () => undefined);
    };
    const reader = new EventReader((event) => {
      if (!settled && onEvent(event) === true) whole();
    });
    const fail = (e: unknown) => {
      settled = true;
      res.off("data", onData);
      res.destroy();
      reject(e as Error);
    };
    const onData = (chunk: Buffer) => {
      total += chunk.length;
      try {
        reader.feed(chunk);
      } catch (e) {
        if (!settled) fail(e);
        return;
      }
      if (settled) return;
      if (reader.open > ANSWER_EVENT_MAX) return fail(new TooLarge(`the answer sent an event of over ${ANSWER_EVENT_MAX} bytes with no end`));
      if (total > ANSWER_BODY_MAX) return fail(new TooLarge(`the answer ran past ${ANSWER_BODY_MAX} bytes`));
    };
    res.on("data", onData);
    finished(res, (e) => {
      clearTimeout(late);
      if (settled) return;
      settled = true;
      if (e) reject(e);
      else resolve();
    });
  });
}

/**
 * An answer in the shape of fetch's Response, made without fetch's classes (which load on their first
 * use: see turn/headers.ts): its status, its headers, its body as a stream, and that body read
 * whole, once. A model's answer is never read as form data. Its body's web stream is made only when
 * something asks for it: a streamed answer is read off the Node stream (takeNode), and making a web
 * stream it never used cost a steady turn 0.04 ms after the model's last byte (timed in the daemon).
 */
class FetchAnswer implements Response {
  readonly type = "basic";
  readonly redirected = false;
  readonly ok: boolean;
  private used = false;
  /** The answer's Node stream, until its web stream is made or it is taken; undefined where it has no body. */
  private res: IncomingMessage | undefined;
  /** Its web stream, once made (null: it has no body). */
  private stream: ReadableStream<Uint8Array<ArrayBuffer>> | null | undefined;

  constructor(
    body: IncomingMessage | ReadableStream<Uint8Array<ArrayBuffer>> | null,
    readonly status: number,
    readonly statusText: string,
    readonly headers: FetchHeaders,
    readonly url: string,
  ) {
    this.ok = status >= 200 && status < 300;
    if (body === null || body instanceof ReadableStream) this.stream = body;
    else this.res = body;
  }

  get body(): ReadableStream<Uint8Array<ArrayBuffer>> | null {
    if (this.stream === undefined) {
      // Taken already: a body that was read is a stream that is used up, as fetch's is.
      this.stream = this.res === undefined ? new ReadableStream({ start: (c) => c.close() }) : new AnswerBody(this.res);
      this.res = undefined;
    }
    return this.stream;
  }

  /** Whether there is a body at all (a 204 or a HEAD's answer has none), without making its web stream. */
  get hasBody(): boolean {
    return this.stream !== null;
  }

  /** The body's Node stream, taken to be read as it is (readAnswerEvents): the body is used from then on. */
  takeNode(): IncomingMessage | undefined {
    if (this.bodyUsed) return undefined;
    // A web stream made already (a clone's body is a web stream's branch): read as a web stream.
    const res = this.res ?? (this.stream instanceof AnswerBody ? this.stream.res : undefined);
    if (res === undefined) return undefined;
    this.used = true;
    this.res = undefined;
    return res;
  }

  get bodyUsed(): boolean {
    return this.used || (this.stream?.locked ?? false) || (this.stream instanceof AnswerBody && this.stream.disturbed);
  }

  private async whole(): Promise<Buffer> {
    if (this.bodyUsed) throw new TypeError("the answer's body was read already");
    this.used = true;
    const stream = this.body;
    if (!stream) return Buffer.alloc(0);
    const parts: Uint8Array[] = [];
    const reader = stream.getReader();
    let size = 0;
    for (let read = await reader.read(); !read.done; read = await reader.read()) {
      parts.push(read.value);
      size += read.value.length;
      // An answer read whole is an error's (a model's answers stream): what is past the bound is left unread.
      if (size >= WHOLE_MAX) {
        await reader.cancel();
        return Buffer.concat(parts).subarray(0, WHOLE_MAX);
      }
    }
    return Buffer.concat(parts);
  }

  async arrayBuffer(): Promise<ArrayBuffer> {
    const bytes = await this.whole();
    return bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength) as ArrayBuffer;
  }

  async bytes(): Promise<Uint8Array<ArrayBuffer>> {
    return new Uint8Array(await this.arrayBuffer());
  }

  async text(): Promise<string> {
    return new TextDecoder().decode(await this.whole());
  }

  async json(): Promise<unknown> {
    const parsed: unknown = JSON.parse(await this.text());
    return parsed;
  }

  async blob(): Promise<Blob> {
    return new Blob([await this.arrayBuffer()], { type: this.headers.get("content-type") ?? "" });
  }

  formData(): Promise<FormData> {
    return Promise.reject(new TypeError("a model's answer is not read as form data"));
  }

  clone(): FetchAnswer {
    if (this.bodyUsed) throw new TypeError("the answer's body was read already");
    let other: ReadableStream<Uint8Array<ArrayBuffer>> | null = null;
    const stream = this.body;
    if (stream) [this.stream, other] = stream.tee();
    return new FetchAnswer(other, this.status, this.statusText, new FetchHeaders(this.headers), this.url);
  }
}

/** A request's target and headers as checked for sending (checkRequest): sent again as they are (sendChecked). */
export interface CheckedRequest {
  readonly url: URL;
  /** By their names, lowercase, each once (values of a name sent twice joined), as fetch sends them. */
  readonly headers: Readonly<Record<string, string>>;
}

/** The target and headers of a request, checked as fetch checks them: a TypeError where they are not a request's. */
export function checkRequest(input: string | URL | Request, headersInit?: HeadersInit): CheckedRequest {
  // Never `instanceof Request`: naming fetch's classes loads them (turn/headers.ts).
  const url = httpUrl(typeof input === "object" && !(input instanceof URL) ? input.url : String(input));
  const headers: Record<string, string> = {};
  new FetchHeaders(headersInit).forEach((value, name) => (headers[name] = value));
  return { url, headers };
}

/**
 * fetch over node:http and node:https: the method, headers, body and signal of `init`; resolves with
 * the answer as a Response whose body streams as it arrives, and rejects as fetch does when no answer
 * comes (the connection refused or cut, the signal aborted), with Node's error as the cause.
 */
export function nodeFetch(input: string | URL | Request, init: RequestInit = {}): Promise<Response> {
  let checked: CheckedRequest;
  try {
    checked = checkRequest(input, init.headers);
  } catch (e) {
    return Promise.reject(e as TypeError);
  }
  const body = init.body;
  if (body !== undefined && body !== null && typeof body !== "string" && !(body instanceof Uint8Array)) {
    return Promise.reject(new TypeError("only a string or bytes can be sent as a body"));
  }
  return sendChecked(checked, { method: init.method ?? "GET", ...(body !== undefined && body !== null ? { body } : {}), ...(init.signal ? { signal: init.signal } : {}) });
}

/** Each checked request's headers as Node takes them whole (rawHeaders), made once. */
const rawOf = new WeakMap<CheckedRequest, readonly string[]>();

/**
 * A checked request's headers as Node takes them whole, a name then its value in turn, with its Host
 * (the URL's, unless it names one) and, for a body or a method that may have one, its length, as
 * fetch sends them. Given an object, Node sets each header on its own, checked and kept by its lower
 * case name, and then looks up those it adds, before it writes the head: a hundredth of a
 * millisecond of every model request. Given them whole, it checks each as it writes the head.
 */
function rawHeaders(checked: CheckedRequest, init: { method: string; body?: string | Uint8Array }): string[] {
  let raw = rawOf.get(checked);
  if (raw === undefined) {
    const named: string[] = [];
    for (const [name, value] of Object.entries(checked.headers)) if (name !== "content-length") named.push(name, value);
    raw = checked.headers.host === undefined ? ["host", checked.url.host, ...named] : named;
    rawOf.set(checked, raw);
  }
  const { body } = init;
  if (body === undefined && (init.method === "GET" || init.method === "HEAD")) return [...raw];
  return [...raw, "content-length", String(body === undefined ? 0 : typeof body === "string" ? Buffer.byteLength(body) : body.byteLength)];
}

/**
 * A request checked already (checkRequest) sent as nodeFetch sends one, with this method, body and
 * signal: the model's requests after its first are the first's target and headers again, and
 * checking them again at each cost a steady turn some hundredths of a millisecond.
 */
export function sendChecked(checked: CheckedRequest, init: { method: string; body?: string | Uint8Array; signal?: AbortSignal }): Promise<Response> {
  const { url } = checked;
  const { signal } = init;
  return new Promise((resolve, reject) => {
    const failed = (e: Error) => reject(new TypeError("fetch failed", { cause: e }));
    let req;
    try {
      req = send(url, { method: init.method, headers: rawHeaders(checked, init) }, (res) => {
        const status = res.statusCode ?? 0;
        try {
          // A status a Response can't have (outside 200 to 599): no answer to speak of.
          if (status < 200 || status > 599) throw new RangeError(`an answer's status must be from 200 to 599, not ${status}`);
          const none = NO_BODY.has(status) || init.method === "HEAD";
          if (none) res.resume();
          resolve(new FetchAnswer(none ? null : res, status, res.statusMessage ?? "", headersOf(res), url.href));
        } catch (e) {
          res.destroy();
          failed(e as Error);
        }
      });
    } catch (e) {
      failed(e as Error);
      return;
    }
    if (signal) abortWith(req, signal);
    req.on("error", (e) => (signal?.aborted ? reject(signal.reason ?? e) : failed(e)));
    req.end(init.body);
  });
}

/**
 * Ends a request, and its answer with it, as its signal aborts: what Node does with a request's
 * `signal`, which also watches the request to its end through `finished` (half a dozen listeners at
 * every request, most of the time Node took to make one); here one listener, gone as it closes.
 */
function abortWith(req: ClientRequest, signal: AbortSignal): void {
  const abort = () => req.destroy(Object.assign(new Error("The operation was aborted", { cause: signal.reason }), { name: "AbortError", code: "ABORT_ERR" }));
  if (signal.aborted) {
    process.nextTick(abort);
    return;
  }
  signal.addEventListener("abort", abort, { once: true });
  req.once("close", () => signal.removeEventListener("abort", abort));
}

/** An answer read whole, as bytes that were at most the bound asked for. */
export interface TextAnswer {
  status: number;
  headers: IncomingHttpHeaders;
  text: string;
}

/** An answer longer than the bound it was read with: its reading stopped there. */
export class TooLarge extends Error {}

/**
 * A small request whose answer is read whole, at most `max` bytes (a runtime's facts, a list of
 * models), over Node's HTTP client alone. A redirect is answered as such, never followed. Rejects
 * when no answer comes, as the signal aborts, or with TooLarge.
 */
export function askText(url: string, init: { method?: string; headers?: Record<string, string>; body?: string; signal?: AbortSignal; max: number }): Promise<TextAnswer> {
  let target: URL;
  try {
    target = httpUrl(url);
  } catch (e) {
    return Promise.reject(e as TypeError);
  }
  const headers = { ...init.headers, ...(init.body !== undefined ? { "content-length": String(Buffer.byteLength(init.body)) } : {}) };
  return new Promise((resolve, reject) => {
    const req = send(
      target,
      { method: init.method ?? "GET", headers, ...(init.signal ? { signal: init.signal } : {}) },
      (res) => {
        const declared = Number(res.headers["content-length"] ?? "0");
        if (declared > init.max) {
          reject(new TooLarge(`${declared} bytes`));
          res.destroy();
          return;
        }
        const chunks: Buffer[] = [];
        let size = 0;
        res.on("data", (chunk: Buffer) => {
          size += chunk.length;
          if (size > init.max) {
            reject(new TooLarge(`over ${init.max} bytes`));
            res.destroy();
            return;
          }
          chunks.push(chunk);
        });
        res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text: Buffer.concat(chunks).toString("utf8") }));
        res.on("error", reject);
        res.on("aborted", () => reject(new Error("the answer was cut short")));
      },
      "ask",
    );
    req.on("error", reject);
    req.end(init.body);
  });
}

