// The model's requests over Node's own HTTP client (turn/http.ts), against a real server on loopback:
// the answer streams as it arrives, connections are kept and reused, and what fails fails as fetch
// fails, with Node's error as the cause.
import { spawn } from "node:child_process";
import { getEventListeners } from "node:events";
import { readFileSync } from "node:fs";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { createServer as createTlsServer } from "node:https";
import { join } from "node:path";
import { createServer as createTcpServer, type AddressInfo, type Socket } from "node:net";
import fc from "fast-check";
import { afterEach, describe, expect, it } from "vitest";
import { FetchHeaders } from "../turn/headers.js";
import { ANSWER_EVENT_MAX, askText, connectAhead, nodeFetch, readAnswerEvents, TooLarge } from "../turn/http.js";
import { assertBuilt, ROOT } from "./fixtures/built.js";

let server: Server | undefined;
const sockets = new Set<Socket>();

interface Served {
  url: string;
  connections: () => number;
  /** The server's end of each connection, in the order they were taken. */
  accepted: Socket[];
  /** Resolves once the server has taken `n` connections. */
  taken: (n: number) => Promise<void>;
}

async function serve(handler: (req: IncomingMessage, res: ServerResponse) => void): Promise<Served> {
  const accepted: Socket[] = [];
  const waiting: (() => void)[] = [];
  server = createServer(handler);
  server.on("connection", (s: Socket) => {
    accepted.push(s);
    sockets.add(s);
    s.on("close", () => sockets.delete(s));
    for (const wake of waiting.splice(0)) wake();
  });
  await new Promise<void>((resolve) => server?.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  const taken = async (n: number) => {
    while (accepted.length < n) await new Promise<void>((resolve) => waiting.push(resolve));
  };
  return { url: `http://127.0.0.1:${port}`, connections: () => accepted.length, accepted, taken };
}

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** What a test left running, stopped after it. */
const cleanup: (() => void)[] = [];

afterEach(async () => {
  for (const stop of cleanup.splice(0)) stop();
  for (const s of sockets) s.destroy();
  await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
  server = undefined;
});

async function readAll(body: ReadableStream<Uint8Array> | null): Promise<string> {
  if (!body) return "";
  return new Response(body).text();
}

/** A server answering with `status` and `headers`, its body what it was sent: method, content type, key and body. */
function echoing(status: number, headers: Record<string, string>) {
  return serve((req, res) => {
    const parts: Buffer[] = [];
    req.on("data", (c: Buffer) => parts.push(c));
    req.on("end", () => {
      res.writeHead(status, { "content-type": "application/json", ...headers });
      res.end(JSON.stringify({ method: req.method, type: req.headers["content-type"], auth: req.headers.authorization, body: Buffer.concat(parts).toString() }));
    });
  });
}

/** A Headers listed (the DOM types this project builds with leave out its iterators). */
const listed = (h: Headers): [string, string][] => [...(h as unknown as Iterable<[string, string]>)];

/** What a Headers holds and says, or the error's kind if building it threw. */
function observe(make: () => Headers, names: readonly string[]): unknown {
  let h: Headers;
  try {
    h = make();
  } catch (e) {
    return { threw: (e as Error).constructor.name };
  }
  const got: Record<string, unknown> = { entries: [...(h as unknown as { entries(): Iterable<[string, string]> }).entries()], listed: listed(h), cookies: h.getSetCookie() };
  for (const n of names) got[`get ${n}`] = h.get(n);
  for (const n of names) got[`has ${n}`] = h.has(n);
  const each: [string, string][] = [];
  h.forEach((value, name) => each.push([name, value]));
  got.forEach = each;
  return got;
}

type Op = ["append" | "set" | "delete", string, string];

function apply(h: Headers, ops: readonly Op[]): Headers {
  for (const [op, name, value] of ops) {
    if (op === "delete") h.delete(name);
    else h[op](name, value);
  }
  return h;
}

describe("FetchHeaders", () => {
  it("holds, joins, lists and refuses as Node's own Headers does, for any names, values and order of calls", () => {
    const name = fc.oneof(fc.constantFrom("content-type", "Content-Type", "X-Request-Id", "set-cookie", "Set-Cookie", "retry-after", "a", "B"), fc.string({ maxLength: 6 }), fc.string({ unit: "binary", maxLength: 4 }));
    const value = fc.oneof(
      fc.constantFrom("text/plain", " padded\t", "a, b", "", "x\ny", "nul\0", "\u00e9t\u00e9", "\u4e2d", "x\u0085", "  "),
      fc.string({ maxLength: 8 }),
      fc.string({ unit: "binary", maxLength: 6 }),
    );
    const op = fc.tuple(fc.constantFrom("append", "set", "delete") as fc.Arbitrary<Op[0]>, name, value);
    const init = fc.oneof(
      fc.constant(undefined),
      fc.array(fc.tuple(name, value), { maxLength: 4 }),
      fc.dictionary(name, value, { maxKeys: 4 }),
    );
    fc.assert(
      fc.property(init, fc.array(op, { maxLength: 8 }), (given, ops) => {
        const names = [...new Set([...ops.map(([, n]) => n), "content-type", "set-cookie"])];
        const ours = observe(() => apply(new FetchHeaders(given), ops), names);
        const node = observe(() => apply(new Headers(given), ops), names);
        expect(ours).toEqual(node);
      }),
      { numRuns: 400 },
    );
  });

  it("is built from another Headers, its own or Node's", () => {
    const node = new Headers([["X-A", "1"], ["x-a", "2"], ["Set-Cookie", "a=1"], ["set-cookie", "b=2"]]);
    expect(listed(new FetchHeaders(node))).toEqual(listed(node));
    expect(listed(new FetchHeaders(new FetchHeaders(node)))).toEqual(listed(node));
    expect(Object.prototype.toString.call(new FetchHeaders())).toBe("[object Headers]");
  });
});

describe("nodeFetch", () => {
  it("answers with a body read whole once, as fetch's Response reads it: text, JSON, bytes, a Blob, or a clone of it", async () => {
    const sent = '\ufeff{"answer":"caf\u00e9"}';
    const { url } = await serve((_req, res) => {
      res.writeHead(200, { "content-type": "application/json; charset=utf-8", "x-twice": "1" });
      res.end(sent);
    });
    const expected = new Response(sent, { headers: { "content-type": "application/json; charset=utf-8" } });
    const clone = expected.clone();
    const answer = await nodeFetch(url);
    expect(answer.url).toBe(`${url}/`);
    expect([answer.type, answer.redirected, answer.bodyUsed]).toEqual(["basic", false, false]);
    const copy = answer.clone();
    expect(await answer.text()).toBe(await expected.text());
    expect(answer.bodyUsed).toBe(true);
    await expect(answer.text()).rejects.toThrow(TypeError);
    await expect(answer.json()).rejects.toThrow(TypeError);
    expect(await copy.json()).toEqual(await clone.json());
    expect(() => copy.clone()).toThrow(TypeError);
    const bytes = await (await nodeFetch(url)).arrayBuffer();
    expect(Buffer.from(bytes)).toEqual(Buffer.from(sent));
    expect(Buffer.from(await (await nodeFetch(url)).bytes())).toEqual(Buffer.from(sent));
    const blob = await (await nodeFetch(url)).blob();
    expect([blob.type, blob.size]).toEqual(["application/json; charset=utf-8", Buffer.byteLength(sent)]);
    await expect((await nodeFetch(url)).formData()).rejects.toThrow(TypeError);
  });

  it("sends the method, headers and body, and answers with the status, headers and body", async () => {
    const { url } = await echoing(201, { "x-request-id": "r-1" });
    const answer = await nodeFetch(`${url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: "Bearer k" },
      body: new TextEncoder().encode('{"a":1}'),
    });
    expect(answer.status).toBe(201);
    expect(answer.ok).toBe(true);
    expect(answer.headers.get("x-request-id")).toBe("r-1");
    expect(await answer.json()).toEqual({ method: "POST", type: "application/json", auth: "Bearer k", body: '{"a":1}' });
  });

  it("sends the head fetch sends: its Host, its body's length in bytes (none for a GET, 0 for a POST without one), never in chunks", async () => {
    const heads: Record<string, string | undefined>[] = [];
    const { url } = await serve((req, res) => {
      heads.push({ method: req.method, host: req.headers.host, length: req.headers["content-length"], chunked: req.headers["transfer-encoding"], type: req.headers["content-type"] });
      req.resume();
      req.on("end", () => res.end());
    });
    const ask = async (init: RequestInit) => (await nodeFetch(url, init)).text();
    const host = new URL(url).host;
    await ask({ method: "POST", headers: { "content-type": "text/plain" }, body: "héllo ✓" });
    await ask({ method: "POST", body: new Uint8Array(5) });
    await ask({ method: "POST" });
    await ask({});
    expect(heads).toEqual([
      { method: "POST", host, length: String(Buffer.byteLength("héllo ✓")), chunked: undefined, type: "text/plain" },
      { method: "POST", host, length: "5", chunked: undefined, type: undefined },
      { method: "POST", host, length: "0", chunked: undefined, type: undefined },
      { method: "GET", host, length: undefined, chunked: undefined, type: undefined },
    ]);
  });

  it("hands over the answer's first bytes before the rest is sent", async () => {
    let finish: (() => void) | undefined;
    const { url } = await serve((_req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write("data: one\n\n");
      finish = () => res.end("data: two\n\n");
    });
    const answer = await nodeFetch(url);
    const reader = (answer.body as ReadableStream<Uint8Array>).getReader();
    const first = await reader.read();
    expect(new TextDecoder().decode(first.value)).toBe("data: one\n\n");
    finish?.();
    let rest = "";
    for (let r = await reader.read(); !r.done; r = await reader.read()) rest += new TextDecoder().decode(r.value);
    expect(rest).toBe("data: two\n\n");
  });

  it("streams to a loop over its body: each chunk as it comes, the body used after (read again, it fails); one cut short fails the loop", async () => {
    let finish: (() => void) | undefined;
    const { url } = await serve((req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write("data: one\n\n");
      finish = req.url === "/cut" ? () => res.socket?.destroy() : () => res.end("data: two\n\n");
    });
    const answer = await nodeFetch(url);
    const got: string[] = [];
    for await (const chunk of answer.body as unknown as AsyncIterable<Uint8Array>) {
      got.push(new TextDecoder().decode(chunk));
      // The rest is sent only once the first chunk is in hand.
      if (got.length === 1) finish?.();
    }
    expect(got[0]).toBe("data: one\n\n");
    expect(got.join("")).toBe("data: one\n\ndata: two\n\n");
    expect(answer.bodyUsed).toBe(true);
    await expect(answer.text()).rejects.toThrow(TypeError);
    // Cut by the server after its first chunk: the loop fails, as a reader's read fails.
    const cut = await nodeFetch(`${url}/cut`);
    const loop = async () => {
      for await (const chunk of cut.body as unknown as AsyncIterable<Uint8Array>) if (chunk.length > 0) finish?.();
    };
    await expect(loop()).rejects.toThrow(/aborted|ECONNRESET|premature/i);
  });

  it("reads a streamed answer's events off its stream as each ends; the body used after; one cut short, or an event that never ends, fails the read", async () => {
    let finish: (() => void) | undefined;
    const { url } = await serve((req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      if (req.url === "/endless") {
        // One event, never ended, in reads of 64 KiB: read no further than its bound.
        const part = `data: ${"x".repeat(64 * 1024)}`;
        for (let sent = 0; sent <= ANSWER_EVENT_MAX + part.length; sent += part.length) res.write(part);
        return void res.end();
      }
      res.write("data: one\n\n");
      finish = req.url === "/cut" ? () => res.socket?.destroy() : () => res.end(": keepalive\r\nevent: x\r\ndata: two\r\ndata: lines\r\n\r\n");
    });
    const answer = await nodeFetch(url);
    const got: { type: string | undefined; data: string }[] = [];
    await readAnswerEvents(answer, (e) => {
      got.push(e);
      // The rest is sent only once the first event is in hand.
      if (got.length === 1) finish?.();
    });
    expect(got).toEqual([
      { type: undefined, data: "one" },
      { type: "x", data: "two\nlines" },
    ]);
    expect(answer.bodyUsed).toBe(true);
    await expect(answer.text()).rejects.toThrow(TypeError);
    await expect(readAnswerEvents(answer, () => undefined)).rejects.toThrow(TypeError);
    const cut = await nodeFetch(`${url}/cut`);
    await expect(readAnswerEvents(cut, () => finish?.())).rejects.toThrow(/aborted|ECONNRESET|premature/i);
    await expect(readAnswerEvents(await nodeFetch(`${url}/endless`), () => undefined)).rejects.toThrow(new TooLarge(`the answer sent an event of over ${ANSWER_EVENT_MAX} bytes with no end`));
  });


  it("makes an answer's web stream only when it is asked for: read off the Node stream either way, until the web stream is read from", async () => {
    const { url } = await serve((_req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.end("data: one\n\ndata: two\n\n");
    });
    const events = async (answer: Response) => {
      const got: string[] = [];
      await readAnswerEvents(answer, (e) => void got.push(e.data));
      return got;
    };
    // Its web stream asked for first, not read from: the events are read off the same Node stream.
    const asked = await nodeFetch(url);
    expect(asked.body).toBeInstanceOf(ReadableStream);
    expect(asked.bodyUsed).toBe(false);
    expect(await events(asked)).toEqual(["one", "two"]);
    expect(asked.bodyUsed).toBe(true);
    // Never asked for: read off the Node stream; asked for after, it is a stream with nothing left, the body used.
    const never = await nodeFetch(url);
    expect(await events(never)).toEqual(["one", "two"]);
    const after = never.body;
    expect(after).not.toBeNull();
    expect((await after?.getReader().read())?.done).toBe(true);
    expect(never.bodyUsed).toBe(true);
    // Read from as a web stream: its events are no longer the Node stream's to give.
    const read = await nodeFetch(url);
    const first = await read.body?.getReader().read();
    expect(Buffer.from(first?.value ?? new Uint8Array()).toString()).toContain("data: one");
    await expect(events(read)).rejects.toThrow(TypeError);
  });
  it("says a streamed answer had no body when it had none (a 204), as the answer's fault, not the reader's", async () => {
    const { url } = await serve((_req, res) => {
      res.writeHead(204);
      res.end();
    });
    await expect(readAnswerEvents(await nodeFetch(url), () => undefined)).rejects.toThrow("the answer (204) had no body");
  });

  it("stops reading a streamed answer at what its reader throws, and closes its connection", async () => {
    const served = await serve((_req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write("data: one\n\n");
      // Never ended: only the reader's close ends it.
    });
    const answer = await nodeFetch(served.url);
    await expect(
      readAnswerEvents(answer, () => {
        throw new Error("not this one");
      }),
    ).rejects.toThrow("not this one");
    const socket = served.accepted[0] as Socket;
    await new Promise<void>((resolve) => (socket.destroyed ? resolve() : socket.once("close", () => resolve())));
    expect(socket.destroyed).toBe(true);
  });

  it("keeps the connection for the next request", async () => {
    const server = await serve((_req, res) => res.end("ok"));
    for (let i = 0; i < 3; i++) expect(await (await nodeFetch(server.url)).text()).toBe("ok");
    expect(server.connections()).toBe(1);
  });

  it("answers a status without a body with none", async () => {
    const { url } = await serve((_req, res) => {
      res.writeHead(204);
      res.end();
    });
    const answer = await nodeFetch(url, { method: "DELETE" });
    expect(answer.status).toBe(204);
    expect(await readAll(answer.body)).toBe("");
  });

  it("fails as fetch does when nothing listens, Node's error its cause", async () => {
    const { url } = await serve((_req, res) => res.end());
    await new Promise<void>((resolve) => server?.close(() => resolve()));
    for (const s of sockets) s.destroy();
    server = undefined;
    const failed = await nodeFetch(url).catch((e: unknown) => e);
    expect(failed).toBeInstanceOf(TypeError);
    expect((failed as TypeError).cause).toMatchObject({ code: "ECONNREFUSED" });
  });

  it("ends at once when its signal aborts, before or while the answer streams", async () => {
    const { url } = await serve((_req, res) => {
      res.writeHead(200);
      res.write("part");
    });
    const early = new AbortController();
    early.abort(new Error("never mind"));
    await expect(nodeFetch(url, { signal: early.signal })).rejects.toThrow("never mind");
    const late = new AbortController();
    const answer = await nodeFetch(url, { signal: late.signal });
    const reader = (answer.body as ReadableStream<Uint8Array>).getReader();
    await reader.read();
    late.abort(new Error("stop"));
    await expect(reader.read()).rejects.toBeDefined();
  });

  it("leaves nothing listening on its signal once its answer is read: a signal of many requests holds no listener of theirs", async () => {
    const { url } = await serve((_req, res) => res.end("answered"));
    const signal = new AbortController().signal;
    for (let i = 0; i < 5; i++) expect(await (await nodeFetch(url, { signal })).text()).toBe("answered");
    await pause(20);
    expect(getEventListeners(signal, "abort")).toHaveLength(0);
  });

  it("speaks TLS to an https:// URL: a server that answers in plain HTTP fails the handshake, as fetch fails", async () => {
    const { url } = await serve((_req, res) => res.end("plain"));
    const failed = await nodeFetch(url.replace(/^http:/, "https:")).catch((e: unknown) => e);
    expect(failed).toBeInstanceOf(TypeError);
    expect(String((failed as TypeError).cause)).toMatch(/SSL|TLS|wrong version|EPROTO/i);
    await expect(askText(url.replace(/^http:/, "https:"), { max: 10 })).rejects.toThrow(/SSL|TLS|wrong version|EPROTO/i);
  });

  it("refuses what it can't send: a URL not of HTTP, a body of another kind", async () => {
    await expect(nodeFetch("file:///etc/passwd")).rejects.toThrow(/not an HTTP URL/);
    await expect(nodeFetch("not a url")).rejects.toThrow(/invalid URL/);
    await expect(nodeFetch("http://127.0.0.1:9/", { method: "POST", body: new Blob(["x"]) })).rejects.toThrow(/string or bytes/);
  });

  it("takes any answer an endpoint sends on the wire: a Response with the bytes sent, or a TypeError, never a hang", async () => {
    // A raw endpoint: its status line, headers and body bytes as the fuzz made them, in pieces.
    let next: Buffer[] = [];
    const raw = createTcpServer((s) => {
      sockets.add(s);
      s.on("close", () => sockets.delete(s));
      s.once("data", () => {
        const pieces = next;
        const send = (i: number): void => {
          if (i >= pieces.length) s.end();
          else s.write(pieces[i] as Buffer, () => setImmediate(() => send(i + 1)));
        };
        send(0);
      });
      s.on("error", () => undefined);
    });
    await new Promise<void>((resolve) => raw.listen(0, "127.0.0.1", resolve));
    const { port } = raw.address() as AddressInfo;
    /** What a read of the answer came to within 5 s, or "hung". */
    const orHung = async <T>(read: Promise<T>): Promise<T | "hung"> => {
      let timer: NodeJS.Timeout | undefined;
      const hung = new Promise<"hung">((resolve) => (timer = setTimeout(() => resolve("hung"), 5_000)));
      try {
        return await Promise.race([read, hung]);
      } finally {
        clearTimeout(timer);
      }
    };
    /** The answer asked for as a turn asks its model. */
    const ask = () => nodeFetch(`http://127.0.0.1:${port}/`, { method: "POST", body: "{}", headers: { connection: "close" } });
    /** The bytes an answer's body holds: none for a status that has none. */
    const bodyOf = (status: number, body: Buffer) => ([204, 205, 304].includes(status) ? Buffer.alloc(0) : body);
    const token = fc.stringMatching(/^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,12}$/);
    const answer = fc.record({
      status: fc.oneof(
        { weight: 6, arbitrary: fc.integer({ min: 200, max: 599 }) },
        { weight: 1, arbitrary: fc.integer({ min: 0, max: 1200 }) },
        { weight: 1, arbitrary: fc.constantFrom("abc", "-1", "2000", "") },
      ),
      reason: fc.oneof(fc.constant("OK"), fc.string({ maxLength: 20 })),
      headers: fc.array(
        fc.oneof(
          { weight: 6, arbitrary: fc.tuple(token, fc.stringMatching(/^[\x21-\x7e]([\x20-\x7e]{0,28}[\x21-\x7e])?$/)) },
          { weight: 1, arbitrary: fc.tuple(fc.string({ maxLength: 12 }), fc.uint8Array({ maxLength: 20 }).map((b) => Buffer.from(b).toString("latin1"))) },
        ),
        { maxLength: 6 },
      ),
      framing: fc.constantFrom("length", "close", "chunked", "wrong-length"),
      body: fc.uint8Array({ maxLength: 300 }),
      cuts: fc.array(fc.nat(), { maxLength: 4 }),
    });
    try {
      await fc.assert(
        fc.asyncProperty(answer, async (a) => {
          const body = Buffer.from(a.body);
          const head = [`HTTP/1.1 ${a.status} ${a.reason.replace(/[\r\n]/g, " ")}`, ...a.headers.map(([k, v]) => `${k.replace(/[\r\n:]/g, "")}: ${v.replace(/[\r\n]/g, " ")}`)];
          let payload: Buffer;
          if (a.framing === "length") payload = Buffer.concat([Buffer.from([...head, `content-length: ${body.length}`, "", ""].join("\r\n"), "latin1"), body]);
          else if (a.framing === "wrong-length") payload = Buffer.concat([Buffer.from([...head, `content-length: ${body.length + 5}`, "", ""].join("\r\n"), "latin1"), body]);
          else if (a.framing === "chunked") {
            payload = Buffer.concat([Buffer.from([...head, "transfer-encoding: chunked", "", ""].join("\r\n"), "latin1"), Buffer.from(`${body.length.toString(16)}\r\n`), body, Buffer.from("\r\n0\r\n\r\n")]);
          } else payload = Buffer.concat([Buffer.from([...head, "connection: close", "", ""].join("\r\n"), "latin1"), body]);
          const at = [...new Set(a.cuts.map((c) => c % (payload.length + 1)))].sort((x, y) => x - y);
          next = [0, ...at].map((from, i) => payload.subarray(from, at[i] ?? payload.length)).filter((p) => p.length > 0);
          const got = await orHung(
            ask().then(
              async (r) => ({ ok: true as const, status: r.status, body: await new Response(r.body).arrayBuffer().then((b) => Buffer.from(b), () => undefined) }),
              (e: unknown) => ({ ok: false as const, error: e }),
            ),
          );
          expect(got).not.toBe("hung");
          // The same answer looped over, as the openai client reads a streamed one: its bytes, or an error.
          const loop = async (r: Response): Promise<Buffer | Error> => {
            const parts: Uint8Array[] = [];
            try {
              if (r.body) for await (const chunk of r.body as unknown as AsyncIterable<Uint8Array>) parts.push(chunk);
            } catch (e) {
              return e as Error;
            }
            return Buffer.concat(parts);
          };
          const looped = await orHung(
            ask().then(
              async (r) => ({ ok: true as const, status: r.status, body: await loop(r) }),
              (e: unknown) => ({ ok: false as const, error: e }),
            ),
          );
          expect(looped).not.toBe("hung");
          if (looped !== "hung" && !looped.ok) expect(looped.error).toBeInstanceOf(TypeError);
          if (looped !== "hung" && looped.ok) {
            if (looped.body instanceof Error) expect(a.framing).toBe("wrong-length");
            else if (a.framing !== "wrong-length") expect(looped.body).toEqual(bodyOf(looped.status, body));
          }
          // The same answer read whole and bounded, as a runtime's facts are: its bytes, or an error.
          const max = 200;
          const whole = await orHung(
            askText(`http://127.0.0.1:${port}/`, { headers: { connection: "close" }, max }).then(
              (r) => ({ ok: true as const, status: r.status, text: r.text }),
              (e: unknown) => ({ ok: false as const, error: e }),
            ),
          );
          expect(whole).not.toBe("hung");
          if (whole !== "hung" && whole.ok && a.framing !== "wrong-length" && ![204, 205, 304].includes(whole.status) && whole.status >= 200) {
            expect(body.length).toBeLessThanOrEqual(max);
            expect(whole.text).toBe(body.toString("utf8"));
          }
          if (whole !== "hung" && !whole.ok) expect(whole.error).toBeInstanceOf(Error);
          if (got === "hung") return;
          if (!got.ok) {
            expect(got.error).toBeInstanceOf(TypeError);
            return;
          }
          expect(got.status).toBeGreaterThanOrEqual(200);
          expect(got.status).toBeLessThanOrEqual(599);
          // Its body is the bytes sent (none for a status that has none), or, sent short of its length, an error while read.
          if (a.framing === "wrong-length" && got.body === undefined) return;
          expect(got.body).toEqual(bodyOf(got.status, body));
        }),
        { numRuns: 150 },
      );
    } finally {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => raw.close(() => resolve()));
    }
  });

  describe("askText", () => {
    it("reads an answer whole, with its status and headers, and sends its body", async () => {
      const { url } = await echoing(404, { location: "/elsewhere" });
      const r = await askText(`${url}/api/show`, { method: "POST", headers: { "content-type": "application/json" }, body: '{"model":"m"}', max: 1024 });
      expect(r.status).toBe(404);
      expect(r.headers.location).toBe("/elsewhere");
      expect(JSON.parse(r.text)).toEqual({ method: "POST", body: '{"model":"m"}', type: "application/json" });
    });

    it("stops at its bound, whether the answer says its length or not", async () => {
      const { url } = await serve((req, res) => {
        if (req.url === "/said") {
          res.writeHead(200, { "content-length": "5000" });
          res.end("x".repeat(5000));
        } else {
          res.writeHead(200);
          res.write("x".repeat(3000));
          res.end("y".repeat(3000));
        }
      });
      await expect(askText(`${url}/said`, { max: 4096 })).rejects.toBeInstanceOf(TooLarge);
      await expect(askText(`${url}/unsaid`, { max: 4096 })).rejects.toBeInstanceOf(TooLarge);
      expect((await askText(`${url}/unsaid`, { max: 6000 })).text).toBe("x".repeat(3000) + "y".repeat(3000));
    });

    it("ends when its signal aborts, and fails when nothing listens", async () => {
      const { url } = await serve(() => undefined);
      const stop = new AbortController();
      const asked = askText(url, { signal: stop.signal, max: 10 });
      setTimeout(() => stop.abort(new Error("enough")), 20);
      await expect(asked).rejects.toBeDefined();
      await expect(askText("http://127.0.0.1:9/", { max: 10 })).rejects.toMatchObject({ code: "ECONNREFUSED" });
    });
  });
});

describe("connectAhead", () => {
  /** A server that answers each request with the port of the connection it came on (the client's end). */
  const whichConnection = () => serve((req, res) => res.end(String(req.socket.remotePort)));

  it("opens the model's connection before its request, and the request goes out on it", async () => {
    const s = await whichConnection();
    connectAhead(s.url);
    await s.taken(1);
    const opened = s.accepted[0] as Socket;
    expect(await (await nodeFetch(`${s.url}/v1/chat/completions`)).text()).toBe(String(opened.remotePort));
    expect(s.connections()).toBe(1);
  });

  it("keeps it for the model: a runtime's asks go over connections of their own", async () => {
    const s = await whichConnection();
    connectAhead(s.url);
    await s.taken(1);
    const opened = s.accepted[0] as Socket;
    const asked = await askText(`${s.url}/props`, { max: 100 });
    expect(asked.text).not.toBe(String(opened.remotePort));
    expect(await (await nodeFetch(`${s.url}/v1/chat/completions`)).text()).toBe(String(opened.remotePort));
    expect(s.connections()).toBe(2);
  });

  it("opens none while one is opened ahead already, or kept alive", async () => {
    const s = await whichConnection();
    connectAhead(s.url);
    connectAhead(s.url);
    await s.taken(1);
    await nodeFetch(s.url).then((r) => r.text());
    connectAhead(s.url);
    await nodeFetch(s.url).then((r) => r.text());
    await pause(30);
    expect(s.connections()).toBe(1);
  });

  it("closes it when no request came for it in its time", async () => {
    const s = await whichConnection();
    connectAhead(s.url, { ms: 30 });
    await s.taken(1);
    const opened = s.accepted[0] as Socket;
    await new Promise((resolve) => opened.once("close", resolve));
    // The next request makes a connection of its own.
    expect(await (await nodeFetch(s.url)).text()).not.toBe(String(opened.remotePort));
    expect(s.connections()).toBe(2);
  });

  it("lets go of one the server closed, or that could not be made: the request fares as it would have", async () => {
    const s = await whichConnection();
    connectAhead(s.url);
    await s.taken(1);
    (s.accepted[0] as Socket).destroy();
    // Once this end has seen it closed, it is let go: the next one asked for is made anew.
    for (let waited = 0; s.connections() < 2 && waited < 3000; waited += 5) {
      connectAhead(s.url);
      await pause(5);
    }
    expect(await (await nodeFetch(s.url)).text()).toBe(String((s.accepted[1] as Socket | undefined)?.remotePort));
    expect(s.connections()).toBe(2);

    // Nothing listens: the failure is the request's own, as before, and nothing else's.
    connectAhead("http://127.0.0.1:9/v1");
    await pause(30);
    const failed = await nodeFetch("http://127.0.0.1:9/v1/chat/completions").catch((e: unknown) => e);
    expect((failed as TypeError).cause).toMatchObject({ code: "ECONNREFUSED" });
    // Over TLS to a server that speaks plain HTTP: the handshake fails, the request says so.
    const plain = await serve((_req, res) => res.end("plain"));
    connectAhead(plain.url.replace(/^http:/, "https:"));
    const tls = await nodeFetch(plain.url.replace(/^http:/, "https:")).catch((e: unknown) => e);
    expect(tls).toBeInstanceOf(TypeError);
    // Not a URL of HTTP: nothing is opened, nothing thrown.
    expect(() => connectAhead("file:///etc/passwd")).not.toThrow();
  });

  it("over https, makes the TLS handshake ahead too: the request goes out on the connection made and secured before it", async () => {
    assertBuilt(["dist/turn/http.js"], ["turn"]);
    const tls = join(ROOT, "test", "fixtures", "tls");
    const secured: number[] = [];
    const tlsServer = createTlsServer({ key: readFileSync(join(tls, "key.pem")), cert: readFileSync(join(tls, "cert.pem")) }, (req, res) => res.end(String(req.socket.remotePort)));
    tlsServer.on("secureConnection", (s: Socket) => secured.push(s.remotePort ?? 0));
    await new Promise<void>((resolve) => tlsServer.listen(0, "127.0.0.1", resolve));
    try {
      const { port } = tlsServer.address() as AddressInfo;
      // A process that trusts the test's certificate (as one trusts a provider's): it opens ahead,
      // then asks once told to, and says on which connection its answer came.
      const script = `
        const { connectAhead, nodeFetch } = await import(${JSON.stringify(join(ROOT, "dist", "turn", "http.js"))});
        connectAhead("https://localhost:${port}/v1");
        process.stdin.once("data", async () => {
          process.stdout.write(await (await nodeFetch("https://localhost:${port}/v1/chat/completions")).text());
          process.exit(0);
        });`;
      const child = spawn(process.execPath, ["--input-type=module", "-e", script], { env: { ...process.env, NODE_EXTRA_CA_CERTS: join(tls, "cert.pem") }, stdio: ["pipe", "pipe", "inherit"] });
      let out = "";
      child.stdout.setEncoding("utf8").on("data", (d: string) => (out += d));
      cleanup.push(() => child.kill());
      for (let waited = 0; secured.length === 0 && waited < 3000; waited += 10) await pause(10);
      expect(secured, "a connection secured before any request").toHaveLength(1);
      child.stdin.write("go\n");
      await new Promise((resolve) => child.once("close", resolve));
      expect(out).toBe(String(secured[0]));
      expect(secured).toHaveLength(1);
    } finally {
      tlsServer.closeAllConnections();
      await new Promise<void>((resolve) => tlsServer.close(() => resolve()));
    }
  });
});
