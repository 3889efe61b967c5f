// A client's requests after its first are sent as its SDK made that one (turn/model.ts sendAgain),
// with their own body: over the real wire to the scripted server, each must reach the endpoint as
// the SDK's own would, and each failure must be said as the SDK's request would have it said.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Settings } from "../protocol/index.js";
import { askModel, ModelError, requestBody, type ModelAnswer } from "../turn/model.js";
import { startModelServer, type ErrorReply, type ModelServer } from "./model-server.js";

/** How a raw endpoint answers one request. */
type Answer = (req: IncomingMessage, res: ServerResponse) => void;

/** A whole streamed answer of `text`, as an OpenAI-compatible endpoint sends one. */
const streamedText =
  (text: string): Answer =>
  (_req, res) => {
    res.writeHead(200, { "content-type": "text/event-stream" });
    res.end(`data: ${JSON.stringify({ id: "a", choices: [{ index: 0, delta: { content: text }, finish_reason: "stop" }] })}\n\ndata: [DONE]\n\n`);
  };

let server: ModelServer;
beforeAll(async () => {
  server = await startModelServer();
});
afterAll(async () => {
  await server.close();
});

/** Settings of a client of its own (the key names it), whose retries wait at most 10 ms. */
function settingsOf(url: string, key: string, model = 300): Settings {
  return Settings.parse({ model: { provider: "scripted", name: "scripted-model", base_url: url, key }, timeouts: { retry_wait: 0.01, model } });
}

const ask = (settings: Settings, text: string, signal?: AbortSignal): Promise<ModelAnswer> =>
  askModel({ settings, model: "scripted-model", messages: [{ role: "user", content: text }], calls: [], ...(signal ? { signal } : {}) });

/** How an ask failed: its reason, status and words; or that it did not. */
async function failureOf(asking: Promise<unknown>): Promise<{ reason: string; status: number | undefined; message: string } | "answered"> {
  try {
    await asking;
    return "answered";
  } catch (e) {
    if (!(e instanceof ModelError)) throw e;
    return { reason: e.reason, status: e.status, message: e.message };
  }
}

let clients = 0;
/** A key no client was made for yet. */
const newKey = () => `sk-test-${++clients}-${"x".repeat(24)}`;

describe("a client's later requests", () => {
  it("reach the endpoint as its first did: the same path and headers, their own body", async () => {
    const settings = settingsOf(server.url, newKey());
    const seen = server.requests.length;
    server.script({ text: "one" }, { text: "two" }, { text: "three" });
    expect((await ask(settings, "first")).text).toBe("one");
    expect((await ask(settings, "second")).text).toBe("two");
    expect((await ask(settings, "third")).text).toBe("three");
    const [first, ...later] = server.requests.slice(seen);
    if (!first) throw new Error("no request reached the server");
    const own = ({ "content-length": _, host: __, connection: ___, ...rest }: Record<string, unknown>) => rest;
    expect(first.headers.authorization).toBe(`Bearer ${settings.model.key}`);
    expect(first.headers["user-agent"]).toMatch(/^OpenAI\/JS /);
    for (const r of later) {
      expect(r.path).toBe(first.path);
      expect(own(r.headers)).toEqual(own(first.headers));
    }
    expect(later.map((r) => r.body.messages?.[0]?.content)).toEqual(["second", "third"]);
  });

  it("fail as a client's first request would, for every refusal of the endpoint", async () => {
    const refusals: ErrorReply["error"][] = [
      { status: 400, message: "This model's maximum context length is 8192 tokens", code: "context_length_exceeded" },
      { status: 401, message: "Incorrect API key provided", echoAuthorization: true },
      { status: 404, message: "The model does not exist", type: "not_found_error" },
      { status: 429, message: "Rate limit reached", headers: { "retry-after": "3600" } },
      { status: 503, message: "overloaded", headers: { "x-should-retry": "false" } },
    ];
    for (const error of refusals) {
      // The same refusal, once to a client that has made no request, once to one that has.
      const fresh = settingsOf(server.url, newKey());
      server.script({ error });
      const first = await failureOf(ask(fresh, "hi"));
      const used = settingsOf(server.url, newKey());
      server.script({ text: "fine" }, { error });
      expect((await ask(used, "hi")).text).toBe("fine");
      const later = await failureOf(ask(used, "hi"));
      expect(first).not.toBe("answered");
      // Each names its own key where the endpoint echoed it; the rest is word for word the same.
      const words = (f: typeof first, key: string | undefined) => (f === "answered" ? f : { ...f, message: f.message.replaceAll(key ?? "", "KEY") });
      expect(words(later, used.model.key)).toEqual(words(first, fresh.model.key));
      expect(JSON.stringify(later)).not.toContain(used.model.key);
    }
  });

  it("carry nothing the SDK makes anew for each request: two clients' first requests are alike", async () => {
    // What sendAgain rests on: were the SDK to add a header of its own to each request (an
    // idempotency key, a request id), a later request would carry its first one's. Two clients of
    // one endpoint (its URL written two ways) and key each make their first request.
    const key = newKey();
    const seen = server.requests.length;
    server.script({ text: "a" }, { text: "b" });
    await ask(settingsOf(server.url, key), "same");
    await ask(settingsOf(`${server.url}/`, key), "same");
    const [a, b] = server.requests.slice(seen);
    expect(a?.path).toBe(b?.path);
    expect(b?.headers).toEqual(a?.headers);
  });

  it("that are refused for now are asked again, and answered", async () => {
    const settings = settingsOf(server.url, newKey());
    server.script({ text: "first" }, { error: { status: 500, message: "try again" } }, { error: { status: 429, message: "slow down", headers: { "retry-after-ms": "5" } } }, { text: "second" });
    expect((await ask(settings, "a")).text).toBe("first");
    expect((await ask(settings, "b")).text).toBe("second");
  });

  it("that never reach the endpoint fail as a first one to it would: a network failure naming it", async () => {
    // An endpoint that answers once, then is gone.
    const answer = streamedText("once");
    let once: Server | undefined = createServer((req, res) => {
      req.resume();
      req.on("end", () => answer(req, res));
    });
    await new Promise<void>((resolve) => once?.listen(0, "127.0.0.1", resolve));
    const url = `http://127.0.0.1:${(once.address() as AddressInfo).port}/v1`;
    const used = settingsOf(url, newKey());
    expect((await ask(used, "hi")).text).toBe("once");
    once.closeAllConnections();
    await new Promise<void>((resolve) => once?.close(() => resolve()));
    once = undefined;
    const later = await failureOf(ask(used, "hi"));
    const first = await failureOf(ask(settingsOf(url, newKey()), "hi"));
    expect(later).toEqual(first);
    expect(later).toMatchObject({ reason: "network" });
  });

  it("end at once when the turn is cancelled, as aborted answers", async () => {
    const settings = settingsOf(server.url, newKey());
    server.script({ text: "first" }, { text: "never", stall: { after: 0 } });
    expect((await ask(settings, "a")).text).toBe("first");
    const cancel = new AbortController();
    const asking = ask(settings, "b", cancel.signal);
    setTimeout(() => cancel.abort(), 50);
    const answer = await asking;
    expect(answer.aborted).toBe(true);
    expect(answer.text).toBe("");
  });

  it("of another timeout are made by the SDK again, and reach the endpoint with that timeout", async () => {
    const key = newKey();
    const seen = server.requests.length;
    server.script({ text: "a" }, { text: "b" }, { text: "c" });
    await ask(settingsOf(server.url, key, 300), "a");
    await ask(settingsOf(server.url, key, 60), "b");
    await ask(settingsOf(server.url, key, 300), "c");
    expect(server.requests.slice(seen).map((r) => r.headers["x-stainless-timeout"])).toEqual(["301", "61", "301"]);
  });
});

describe("a window too large to be made one request", () => {
  it("fails as too long, saying so, rather than as a fault of the harness", () => {
    // Nine messages of 64 MiB each, one string shared: some 576 MiB of JSON, past the longest
    // string V8 makes (a window of a million tokens of images and files would be as large).
    const settings = settingsOf("http://127.0.0.1:9/v1", newKey());
    const big = "x".repeat(64 * 1024 * 1024);
    const messages = [{ role: "system" as const, content: "s" }, ...Array.from({ length: 9 }, () => Object.freeze({ role: "user" as const, content: big }))];
    let thrown: unknown;
    try {
      requestBody({ settings, model: "scripted-model", messages, calls: [], conversation: "too-large" });
    } catch (e) {
      thrown = e;
    }
    expect(thrown).toBeInstanceOf(ModelError);
    expect(thrown).toMatchObject({ reason: "context_too_long" });
    expect((thrown as Error).message).toMatch(/too large to make.*\/new/);
  });
});

// A server of raw answers, each request taking the next: what the scripted server never sends.
describe("a client's later request to an endpoint that answers outside the API's words", () => {
  const streamed = streamedText("ok");
  const answers: Answer[] = [];
  let raw: Server;
  let url = "";
  beforeAll(async () => {
    raw = createServer((req, res) => {
      req.resume();
      req.on("end", () => (answers.shift() ?? streamed)(req, res));
    });
    await new Promise<void>((resolve) => raw.listen(0, "127.0.0.1", resolve));
    url = `http://127.0.0.1:${(raw.address() as AddressInfo).port}/v1`;
  });
  afterAll(async () => {
    raw.closeAllConnections();
    await new Promise<void>((resolve) => raw.close(() => resolve()));
  });

  const outside: [string, Answer][] = [
    ["hangs up", (req) => req.socket.destroy()],
    ["answers a page of HTML", (_req, res) => res.writeHead(502, { "content-type": "text/html", "retry-after": "3600" }).end("<html><body>Bad gateway</body></html>")],
    ["answers an empty refusal", (_req, res) => res.writeHead(400).end()],
    ["answers JSON that is no error", (_req, res) => res.writeHead(400, { "content-type": "application/json" }).end("[1,2,3]")],
  ];
  for (const [what, answer] of outside) {
    it(`that ${what} fails as the SDK's own request would`, async () => {
      const used = settingsOf(url, newKey());
      answers.push(streamed, answer, answer, answer);
      expect((await ask(used, "a")).text).toBe("ok");
      const later = await failureOf(ask(used, "b"));
      answers.length = 0;
      answers.push(answer, answer, answer);
      const first = await failureOf(ask(settingsOf(url, newKey()), "b"));
      answers.length = 0;
      expect(later).not.toBe("answered");
      expect(later).toEqual(first);
    });
  }
});
