// The model call against a hostile or broken endpoint, over the built daemon on stdio with the real ACP
// client: a key echoed back in an error, a provider that asks to wait an hour, a stream that stalls
// or only keeps itself alive, and usage numbers no count can be. Each turn ends with what a person
// can act on, promptly, and nothing secret is kept, sent or logged.
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import * as acp from "@agentclientprotocol/sdk";
import type { ContentBlock } from "@agentclientprotocol/sdk";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { eventName, paths, readEventsFrom } from "../store/index.js";
import { answerText, configure, daemonTestHooks, openClient, scriptedSettings, startDaemon, stdioStream, tempDir, type Client, type Daemon, failure, lockFreed, watched } from "./acp-client.js";
import type { ModelServer } from "./model-server.js";
import { BIN, ROOT } from "./fixtures/built.js";
import { UPDATE_TEXT_MAX } from "../acp/outbox.js";
import { ANSWER_BODY_MAX, ANSWER_EVENT_MAX } from "../turn/http.js";
import { MODEL_ANSWER_MAX_BYTES, MODEL_ANSWER_MAX_CALLS, QUOTED_MAX } from "../turn/model.js";

let server: ModelServer;
const cleanup = daemonTestHooks([BIN, "dist/daemon/serve.js", "dist/acp/app.js"], (s) => (server = s));

const KEY = "sk-live-0123456789abcdef-SECRET";

function agent(extra: Record<string, unknown> = {}, model: Record<string, unknown> = {}): string {
  const dir = tempDir("lnk-hardening-model-");
  cleanup.push(() => dir.remove());
  const settings = scriptedSettings(server.url, extra) as { model: Record<string, unknown> };
  configure(dir.path, { ...settings, model: { ...settings.model, ...model } });
  return dir.path;
}

function daemon(dir: string, env: NodeJS.ProcessEnv = {}): Daemon {
  const d = startDaemon(["--agent", dir], env);
  return watched(d, cleanup);
}

async function session(d: Daemon): Promise<{ c: Client; sessionId: string }> {
  const c = await openClient(stdioStream(d.child));
  cleanup.push(() => c.close());
  const { sessionId } = await c.agent.request(acp.methods.agent.session.new, { cwd: ROOT, mcpServers: [] });
  return { c, sessionId };
}

const text = (s: string): ContentBlock[] => [{ type: "text", text: s }];
const prompt = (c: Client, sessionId: string, s: string) => c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: text(s) });


const events = (dir: string, thread: string) => readEventsFrom(paths({ dir }).conversation(thread), 1).map((e) => e.event);

/**
 * Every file of a conversation's folder, as text, once its turn has let its lock go (its copy and mark
 * are made after its answer). A file removed between the listing and its reading (the owed file, once
 * the answer reached the client) holds nothing on disk.
 */
async function onDisk(dir: string, thread: string): Promise<string> {
  const conv = paths({ dir }).conversation(thread);
  await lockFreed(conv.lock);
  return readdirSync(conv.dir)
    .flatMap((n) => {
      try {
        return [readFileSync(join(conv.dir, n), "utf8")];
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code === "ENOENT") return [];
        throw e;
      }
    })
    .join("\n");
}

const Body = z.record(z.string(), z.unknown());

/**
 * An endpoint of the test's own: each request for an answer (POST .../chat/completions) answered as
 * `answer` says, given its number (from 1), body and headers; any other (a runtime's questions) 404.
 */
async function hostile(answer: (res: import("node:http").ServerResponse, n: number, body: Record<string, unknown>, headers: import("node:http").IncomingHttpHeaders) => void): Promise<string> {
  let n = 0;
  const raw = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      if (req.method !== "POST" || !req.url?.endsWith("/chat/completions")) {
        res.writeHead(404).end();
        return;
      }
      const text = Buffer.concat(chunks).toString("utf8");
      answer(res, ++n, text ? Body.parse(JSON.parse(text)) : {}, req.headers);
    });
  });
  await new Promise<void>((resolve) => raw.listen(0, "127.0.0.1", resolve));
  cleanup.push(() => {
    raw.closeAllConnections();
    return new Promise<void>((resolve) => raw.close(() => resolve()));
  });
  return `http://127.0.0.1:${(raw.address() as AddressInfo).port}/v1`;
}

/** An endpoint that answers every request as `answer` says. */
const endpoint = (answer: (res: import("node:http").ServerResponse) => void): Promise<string> => hostile((res) => answer(res));

/** Server-sent events of chunks, as an OpenAI-compatible stream sends them. */
const sseOf = (...chunks: unknown[]) => chunks.map((c) => `data: ${typeof c === "string" ? c : JSON.stringify(c)}\n\n`).join("");
const chunk = (delta: Record<string, unknown>, finish: string | null = null, id = "r1") => ({ id, object: "chat.completion.chunk", choices: [{ index: 0, delta, finish_reason: finish }] });

describe("an endpoint that echoes the key", { timeout: 30_000 }, () => {
  it("the key, from the settings or LNK_MODEL_KEY, is in no event, ACP error or log line", async () => {
    const cases = [
      { dir: agent({}, { key: KEY }), env: {} },
      { dir: agent(), env: { LNK_MODEL_KEY: KEY } },
    ];
    for (const { dir, env } of cases) {
      const d = daemon(dir, env);
      const { c, sessionId } = await session(d);
      server.script({ error: { status: 401, message: "Incorrect API key provided", code: "invalid_api_key", echoAuthorization: true } });
      const failed = await failure(prompt(c, sessionId, "hello"));
      // The endpoint did get the key, and said it back.
      expect(server.requests.at(-1)?.headers.authorization).toBe(`Bearer ${KEY}`);
      expect(failed.code).toBe(-32603);
      expect(failed.message).toMatch(/401: Incorrect API key provided \(you sent: Bearer \[redacted\]\)/);
      expect(JSON.stringify(failed)).not.toContain(KEY);
      const [, fail] = events(dir, sessionId);
      expect(fail).toMatchObject({ kind: "failure", reason: "model_error", status: 401 });
      expect(await onDisk(dir, sessionId)).not.toContain(KEY);
      expect(JSON.stringify(c.updates)).not.toContain(KEY);
      expect(await d.stop()).toEqual({ code: 0, signal: null });
      expect(d.stderr()).toMatch(/"failure":"the model answered 401/);
      expect(d.stderr()).not.toContain(KEY);
    }
  });
});

describe("the openai client's own environment variables", { timeout: 30_000 }, () => {
  it("none reaches the endpoint or the log: the settings alone say what a request carries", async () => {
    const dir = agent({}, { key: KEY });
    const d = daemon(dir, {
      OPENAI_ORG_ID: "org-of-another-account",
      OPENAI_PROJECT_ID: "proj-of-another-account",
      OPENAI_CUSTOM_HEADERS: "X-Private: header-secret-value\nAuthorization: Bearer env-key-value",
      OPENAI_LOG: "debug",
      LNK_DEBUG: "1",
    });
    const { c, sessionId } = await session(d);
    server.script({ text: "Answered." });
    const answered = await prompt(c, sessionId, "words of the conversation");
    expect(answered.stopReason).toBe("end_turn");
    const headers = server.requests.at(-1)?.headers ?? {};
    expect(headers.authorization).toBe(`Bearer ${KEY}`);
    expect(headers).not.toHaveProperty("openai-organization");
    expect(headers).not.toHaveProperty("openai-project");
    expect(headers).not.toHaveProperty("x-private");
    expect(await d.stop()).toEqual({ code: 0, signal: null });
    const log = d.stderr();
    // The turn's own lines are there (LNK_DEBUG), the client's none: no request's body or headers.
    expect(log).toMatch(/"msg":"turn ended"/);
    expect(log).not.toMatch(/"msg":"library"/);
    for (const secret of ["another-account", "header-secret-value", "env-key-value", KEY]) expect(log).not.toContain(secret);
  });
});

describe("an endpoint that redirects", { timeout: 30_000 }, () => {
  it("is not followed: the turn fails naming the status, and the key goes nowhere else", async () => {
    // Every request is sent on to the scripted model, at another address.
    const redirecting = createServer((req, res) => {
      req.resume();
      res.writeHead(307, { location: `${server.url}${req.url?.replace(/^\/v1/, "") ?? ""}` });
      res.end();
    });
    await new Promise<void>((resolve) => redirecting.listen(0, "127.0.0.1", resolve));
    cleanup.push(() => new Promise<void>((resolve) => redirecting.close(() => resolve())));
    const { port } = redirecting.address() as AddressInfo;
    const dir = agent({}, { base_url: `http://127.0.0.1:${port}/v1`, key: KEY });
    const d = daemon(dir);
    const { c, sessionId } = await session(d);
    const asked = server.requests.length;
    const failed = await failure(prompt(c, sessionId, "hello"));
    expect(failed.message).toMatch(/the model answered 307/);
    expect(server.requests.length).toBe(asked);
    const [, fail] = events(dir, sessionId);
    expect(fail).toMatchObject({ kind: "failure", reason: "model_error", status: 307 });
    expect(await d.stop()).toEqual({ code: 0, signal: null });
    expect(d.stderr()).not.toContain(KEY);
  });
});

describe("a provider that asks to wait before a retry", { timeout: 30_000 }, () => {
  it("an hour: the turn fails at once with a failure event saying how long it asked for", async () => {
    const dir = agent();
    const d = daemon(dir);
    const { c, sessionId } = await session(d);
    server.script({ error: { status: 429, message: "Rate limit reached", headers: { "retry-after": "3600" } } }, { text: "never asked" });
    const failed = await failure(prompt(c, sessionId, "hello"));
    expect(failed.message).toMatch(/asked to wait 3600 s before trying again, longer than the 60 s a retry waits at most \(timeouts\.retry_wait\)/);
    expect(server.requests).toHaveLength(1);
    expect(events(dir, sessionId).at(-1)).toMatchObject({ kind: "failure", reason: "model_error", status: 429 });
  });

  it("a second: it is waited, asked again, and answered", async () => {
    const dir = agent();
    const d = daemon(dir);
    const { c, sessionId } = await session(d);
    server.script({ error: { status: 429, message: "Rate limit reached", headers: { "retry-after": "1" } } }, { text: "Answered after the wait." });
    expect(await prompt(c, sessionId, "hello")).toMatchObject({ stopReason: "end_turn" });
    expect(server.requests).toHaveLength(2);
    expect(answerText(c.updates)).toBe("Answered after the wait.");
    expect(events(dir, sessionId).at(-1)).toMatchObject({ kind: "message", role: "assistant", text: "Answered after the wait." });
  });

  it("the wait ends with session/cancel, and with SIGTERM", async () => {
    const dir = agent();
    const d = daemon(dir);
    const { c, sessionId } = await session(d);
    // 50 s, within the 60 s a retry waits: longer than this test may take.
    const slow = { error: { status: 503, message: "Overloaded", headers: { "retry-after": "50" } } };
    server.script(slow);
    const cancelled = prompt(c, sessionId, "one");
    await server.waitForRequest(1);
    await c.agent.notify(acp.methods.agent.session.cancel, { sessionId });
    expect(await cancelled).toMatchObject({ stopReason: "cancelled" });

    server.script(slow);
    void prompt(c, sessionId, "two").catch(() => undefined);
    await server.waitForRequest(2);
    expect(await d.stop("SIGTERM")).toEqual({ code: 0, signal: null });
    expect(server.requests).toHaveLength(2);
    const users = events(dir, sessionId).filter((e) => e.kind === "message" && e.role === "user");
    expect(users.map((e) => (e as { text: string }).text)).toEqual(["one", "two"]);
  });
});

describe("a stream that stalls", { timeout: 30_000 }, () => {
  it("after its first chunk, or with only keepalive comments: the idle timeout ends the turn, saying so", async () => {
    const dir = agent({ timeouts: { model_idle: 0.5 } });
    const d = daemon(dir);
    const { c, sessionId } = await session(d);
    server.script({ text: "Hello, this never ends", chunks: 4, stall: { after: 1 } });
    const stalled = await failure(prompt(c, sessionId, "one"));
    expect(stalled.message).toMatch(/the model sent nothing for 0\.5 s \(timeouts\.model_idle\)/);
    expect(answerText(c.updates)).toBe("Hello");

    server.script({ text: "never sent", stall: { after: 0, keepaliveMs: 50 } });
    const alive = await failure(prompt(c, sessionId, "two"));
    expect(alive.message).toMatch(/the model sent nothing for 0\.5 s \(timeouts\.model_idle\)/);
    const failures = events(dir, sessionId).filter((e) => e.kind === "failure");
    expect(failures).toMatchObject([
      { reason: "network", message: expect.stringMatching(/timeouts\.model_idle/) },
      { reason: "network", message: expect.stringMatching(/timeouts\.model_idle/) },
    ]);
    // The endpoint saw the client hang up both streams (once the server has seen each end).
    await Promise.all(server.requests.map((r) => r.ended));
    expect(server.requests.map((r) => r.aborted)).toEqual([true, true]);
  });

  it("that goes on too long: the total timeout ends the turn, saying so", async () => {
    const dir = agent({ timeouts: { model: 1, model_idle: 10 } });
    const d = daemon(dir);
    const { c, sessionId } = await session(d);
    server.script({ text: "x".repeat(200), chunks: 200, chunkDelayMs: 50 });
    const long = await failure(prompt(c, sessionId, "one"));
    expect(long.message).toMatch(/the model's answer took longer than 1 s \(timeouts\.model\)/);
    expect(events(dir, sessionId).at(-1)).toMatchObject({ kind: "failure", reason: "network" });
  });
});

describe("an endpoint that floods", { timeout: 60_000 }, () => {
  it("an answer past the most one holds is cut there, saying so, each update the client reads bounded; the conversation goes on", async () => {
    const dir = agent();
    const d = daemon(dir);
    const { c, sessionId } = await session(d);
    // Characters of one, two and three bytes: some 2 MB of UTF-8 past the bound.
    const flood = "words, wörter, 言葉 ".repeat(Math.ceil((MODEL_ANSWER_MAX_BYTES + 100_000) / 17));
    server.script({ text: flood, chunks: 48 });
    const cut = await failure(prompt(c, sessionId, "say everything"));
    expect(cut.message).toMatch(new RegExp(`ran past ${MODEL_ANSWER_MAX_BYTES} bytes as JSON, the most one answer holds`));
    const [, fail] = events(dir, sessionId);
    expect(fail).toMatchObject({ kind: "failure", reason: "model_error" });
    // What came before the cut was streamed, each update at most UPDATE_TEXT_MAX characters, none split inside a character.
    const chunks = c.updates.filter((u) => u.update.sessionUpdate === "agent_message_chunk").map((u) => (u.update as { content: { text: string } }).content.text);
    for (const t of chunks) expect(t.length).toBeLessThanOrEqual(UPDATE_TEXT_MAX);
    const streamed = chunks.join("");
    expect(chunks.length).toBeGreaterThanOrEqual(Math.ceil(streamed.length / UPDATE_TEXT_MAX));
    expect(Buffer.byteLength(streamed)).toBeGreaterThanOrEqual(MODEL_ANSWER_MAX_BYTES);
    expect(flood.startsWith(streamed)).toBe(true);
    // The conversation takes its next turn.
    server.script({ text: "Short, this time." });
    const next = await prompt(c, sessionId, "in a word?");
    expect(next.stopReason).toBe("end_turn");
    expect(events(dir, sessionId).at(-1)).toMatchObject({ kind: "message", role: "assistant", text: "Short, this time." });
    expect(await d.stop()).toEqual({ code: 0, signal: null });
  });

  /** An endpoint of this test's own, writing what `answer` writes on each request. */
  it("an event with no end, or a body past its bound, stops being read there, saying so; an error's page is quoted short", async () => {
    const block = Buffer.alloc(1024 * 1024, "x".charCodeAt(0));
    const sse = (res: import("node:http").ServerResponse) => res.writeHead(200, { "content-type": "text/event-stream" });
    // 3 MiB with no newline, in one data line; 3 MiB of short lines with no blank line between.
    const endless = await endpoint((res) => {
      sse(res);
      res.write("data: ");
      for (let i = 0; i < 3; i++) res.write(block);
      res.end();
    });
    const line = Buffer.from(`data: ${"y".repeat(100)}\n`);
    const unended = await endpoint((res) => {
      sse(res);
      res.end(Buffer.concat(Array.from({ length: Math.ceil((3 * 1024 * 1024) / line.length) }, () => line)));
    });
    // 260 MiB of comments (no data): each an event of its own, short; the body long.
    const comment = Buffer.concat([Buffer.from(": "), block.subarray(0, 64 * 1024 - 4), Buffer.from("\n\n")]);
    const long = await endpoint((res) => {
      sse(res);
      let left = 260 * 16;
      const more = (): void => {
        while (left > 0) {
          left--;
          if (!res.write(comment)) return void res.once("drain", more);
        }
        res.end();
      };
      more();
    });
    // A 400 whose body is a 20 MiB page.
    const page = await endpoint((res) => {
      res.writeHead(400, { "content-type": "text/html" });
      for (let i = 0; i < 20; i++) res.write(block);
      res.end();
    });
    for (const [url, said] of [
      [endless, `the answer sent an event of over ${ANSWER_EVENT_MAX} bytes with no end`],
      [unended, `the answer sent an event of over ${ANSWER_EVENT_MAX} bytes with no end`],
      [long, `the answer ran past ${ANSWER_BODY_MAX} bytes`],
    ] as const) {
      const dir = agent({}, { base_url: url });
      const d = daemon(dir);
      const { c, sessionId } = await session(d);
      const cut = await failure(prompt(c, sessionId, "hello"));
      expect(cut.message).toContain(said);
      expect(events(dir, sessionId).at(-1)).toMatchObject({ kind: "failure", reason: "model_error" });
      expect(await d.stop()).toEqual({ code: 0, signal: null });
    }
    const dir = agent({}, { base_url: page });
    const d = daemon(dir);
    const { c, sessionId } = await session(d);
    const refused = await failure(prompt(c, sessionId, "hello"));
    expect(refused.message).toMatch(/the model answered 400: x+… \(\d+ more characters\)/);
    expect(refused.message.length).toBeLessThan(QUOTED_MAX + 200);
    const fail = events(dir, sessionId).at(-1) as { kind: string; message: string };
    expect(fail).toMatchObject({ kind: "failure", reason: "model_error" });
    expect(fail.message.length).toBeLessThan(QUOTED_MAX + 200);
    expect(await d.stop()).toEqual({ code: 0, signal: null });
  });

  it("a call numbered in the billions cuts the answer at once, saying so, where walking to it would take minutes", async () => {
    const dir = agent();
    const d = daemon(dir);
    const { c, sessionId } = await session(d);
    server.script({ tool_calls: [{ name: "echo", arguments: { text: "x" }, index: 3_000_000_000 }] });
    const cut = await failure(prompt(c, sessionId, "call something"));
    expect(cut.message).toMatch(new RegExp(`made a call numbered 3000000000, where one answer makes at most ${MODEL_ANSWER_MAX_CALLS}`));
    expect(events(dir, sessionId).at(-1)).toMatchObject({ kind: "failure", reason: "model_error" });
    server.script({ text: "Fine." });
    expect((await prompt(c, sessionId, "again")).stopReason).toBe("end_turn");
    expect(await d.stop()).toEqual({ code: 0, signal: null });
  });
});

describe("usage numbers no count can be", { timeout: 30_000 }, () => {
  it("the answer is kept and streamed; sane numbers are kept, the others left out and named", async () => {
    const dir = agent();
    const d = daemon(dir);
    const { c, sessionId } = await session(d);
    server.script(
      {
        text: "Kept despite the numbers.",
        usageJson: '{"prompt_tokens":-5,"completion_tokens":2.5,"total_tokens":"NaN","prompt_tokens_details":{"cached_tokens":1e999},"cost":-1}',
      },
      { text: "Kept again.", usageJson: '{"prompt_tokens":12,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":null},"cost":"NaN"}' },
    );
    expect(await prompt(c, sessionId, "one")).toMatchObject({ stopReason: "end_turn" });
    expect(await prompt(c, sessionId, "two")).toMatchObject({ stopReason: "end_turn", usage: { inputTokens: 12, outputTokens: 3 } });
    expect(answerText(c.updates)).toBe("Kept despite the numbers.Kept again.");
    const answers = events(dir, sessionId).filter((e) => e.kind === "message" && e.role === "assistant");
    expect(answers).toHaveLength(2);
    expect(answers[0]).toMatchObject({ text: "Kept despite the numbers.", usage: { in: 0, out: 0, cached: 0 } });
    expect(answers[0]).toHaveProperty("left_out", ["prompt_tokens -5", "completion_tokens 2.5", "cached_tokens Infinity", "cost -1"]);
    expect(answers[0]).not.toHaveProperty("cost");
    expect(answers[1]).toMatchObject({ text: "Kept again.", usage: { in: 12, out: 3, cached: 0 }, left_out: ['cost "NaN"'] });
    expect(answers[1]).not.toHaveProperty("cost");
  });
});

describe("an answer that is not what it seems", { timeout: 60_000 }, () => {
  const EVERYTHING = `"${process.execPath}" "${ROOT}node_modules/@modelcontextprotocol/server-everything/dist/index.js" stdio`;
  const sse = (res: import("node:http").ServerResponse) => res.writeHead(200, { "content-type": "text/event-stream" });

  it("a 200 that is no stream (a page, a whole JSON answer) fails the turn, saying so, and keeps no answer", async () => {
    const page = await endpoint((res) => {
      res.writeHead(200, { "content-type": "text/html" });
      res.end("<html><body>Welcome to the proxy</body></html>");
    });
    const whole = await endpoint((res) => {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ id: "c1", object: "chat.completion", choices: [{ index: 0, message: { role: "assistant", content: "Not streamed." }, finish_reason: "stop" }] }));
    });
    for (const [url, type] of [
      [page, "text/html"],
      [whole, "application/json"],
    ] as const) {
      const dir = agent({}, { base_url: url });
      const d = daemon(dir);
      const { c, sessionId } = await session(d);
      const failed = await failure(prompt(c, sessionId, "hello"));
      expect(failed.message).toContain(`the model answered 200 with ${type}, not a stream of events`);
      expect(events(dir, sessionId).map((e) => e.kind)).toEqual(["message", "failure"]);
      expect(await d.stop()).toEqual({ code: 0, signal: null });
    }
  });

  it("a stream that ends before its answer did (no [DONE], no finish_reason) fails the turn and runs none of its calls", async () => {
    const cut = await endpoint((res) => {
      sse(res);
      res.end(sseOf(chunk({ role: "assistant", content: "Step 1 of 5: delete the old " }), chunk({ tool_calls: [{ index: 0, id: "call_1", type: "function", function: { name: "everything__echo", arguments: '{"message": "par' } }] })));
    });
    const dir = agent({}, { base_url: cut });
    const d = daemon(dir, { LNK_TOOL_EVERYTHING: EVERYTHING });
    const { c, sessionId } = await session(d);
    const failed = await failure(prompt(c, sessionId, "hello"));
    expect(failed.message).toMatch(/the model's stream was cut: it ended before the answer did/);
    expect(events(dir, sessionId).map((e) => e.kind)).toEqual(["message", "failure"]);
    expect(c.updates.some((u) => u.update.sessionUpdate === "tool_call")).toBe(false);
    expect(await d.stop()).toEqual({ code: 0, signal: null });
  });

  it("thinking details nested thousands deep fail the turn, saying so, and a folder's event that holds them is refused by name", async () => {
    // Written by hand: JSON.stringify itself runs out of stack on what the endpoint sends.
    const deep = (depth: number) => `${"[".repeat(depth)}1${"]".repeat(depth)}`;
    const nested = await endpoint((res) => {
      sse(res);
      res.end(
        `data: {"id":"r1","choices":[{"index":0,"delta":{"role":"assistant","content":"Thought deeply.","reasoning_details":[${deep(20_000)}]},"finish_reason":null}]}\n\n` +
          sseOf(chunk({ tool_calls: [{ index: 0, id: "call_1", type: "function", function: { name: "everything__echo", arguments: '{"message":"x"}' } }] }, "tool_calls"), "[DONE]"),
      );
    });
    const dir = agent({}, { base_url: nested });
    const d = daemon(dir, { LNK_TOOL_EVERYTHING: EVERYTHING });
    const { c, sessionId } = await session(d);
    const failed = await failure(prompt(c, sessionId, "think"));
    expect(failed.message).toMatch(/the model's reasoning_details nest deeper than 64 arrays and objects/);
    expect(events(dir, sessionId).map((e) => e.kind)).toEqual(["message", "failure"]);
    expect(events(dir, sessionId).at(-1)).toMatchObject({ kind: "failure", reason: "model_error" });
    expect(c.updates.some((u) => u.update.sessionUpdate === "tool_call")).toBe(false);
    // An answer on disk with such details (another program's, or a hand's) is named, not a crash.
    const conv = paths({ dir }).conversation(sessionId);
    const time = new Date().toISOString();
    writeFileSync(
      join(conv.dir, eventName(3)),
      `{"v":1,"kind":"message","role":"assistant","time":"${time}","text":"old","model":"m","provider":"p","latency_ms":1,"stop":"end_turn","thinking":{"reasoning_details":[${deep(5_000)}]}}`,
    );
    const refused = await failure(prompt(c, sessionId, "again"));
    expect(refused.message).toContain(eventName(3));
    expect(refused.message).toMatch(/nests deeper than 64/);
    expect(d.stderr()).not.toMatch(/Maximum call stack|RangeError/);
    expect(await d.stop()).toEqual({ code: 0, signal: null });
  });

  it("an answer said whole ([DONE]) is taken at once, though its body goes on", async () => {
    const open = await endpoint((res) => {
      sse(res);
      // The body never ends.
      res.write(sseOf(chunk({ role: "assistant", content: "A complete answer." }), chunk({}, "stop"), "[DONE]"));
    });
    const dir = agent({ timeouts: { model_idle: 5 } }, { base_url: open });
    const d = daemon(dir);
    const { c, sessionId } = await session(d);
    const began = Date.now();
    expect(await prompt(c, sessionId, "hello")).toMatchObject({ stopReason: "end_turn" });
    // A hang detector only: the idle timeout (5 s) would have ended it with a failure.
    expect(Date.now() - began).toBeLessThan(4_000);
    expect(answerText(c.updates)).toBe("A complete answer.");
    expect(await d.stop()).toEqual({ code: 0, signal: null });
  });

  it("the key echoed in the answer's id or its counts is in no event", async () => {
    const echo = await hostile((res, _n, _body, headers) => {
      sse(res);
      const auth = String(headers.authorization);
      res.end(sseOf({ ...chunk({ role: "assistant", content: "Echoed." }, "stop", auth), usage: { prompt_tokens: auth, completion_tokens: 2 } }, "[DONE]"));
    });
    const dir = agent({}, { base_url: echo, key: KEY });
    const d = daemon(dir);
    const { c, sessionId } = await session(d);
    expect(await prompt(c, sessionId, "hello")).toMatchObject({ stopReason: "end_turn" });
    const kept = await onDisk(dir, sessionId);
    expect(kept).toContain("Echoed.");
    expect(kept).not.toContain("0123456789abcdef");
    const [, answer] = events(dir, sessionId);
    expect(answer).toMatchObject({ response_id: "Bearer [redacted]", left_out: ['prompt_tokens "Bearer [redacted]"'] });
    // A key set while the daemon runs is the one kept out from its next answer on.
    const next = "sk-live-fedcba9876543210-OTHER";
    const settings = scriptedSettings(server.url) as { model: Record<string, unknown> };
    configure(dir, { ...settings, model: { ...settings.model, base_url: echo, key: next } });
    expect(await prompt(c, sessionId, "again")).toMatchObject({ stopReason: "end_turn" });
    expect(events(dir, sessionId)[3]).toMatchObject({ response_id: "Bearer [redacted]", left_out: ['prompt_tokens "Bearer [redacted]"'] });
    expect(await onDisk(dir, sessionId)).not.toContain("fedcba9876543210");
    expect(await d.stop()).toEqual({ code: 0, signal: null });
    expect(d.stderr()).not.toContain(KEY);
    expect(d.stderr()).not.toContain(next);
  });

  it("two calls under one id are each answered, under ids of their own", async () => {
    const asked: Record<string, unknown>[] = [];
    const twice = await hostile((res, n, body) => {
      asked.push(body);
      sse(res);
      if (n === 1) {
        const call = (index: number, message: string) => ({ index, id: "call_same", type: "function", function: { name: "everything__echo", arguments: JSON.stringify({ message }) } });
        res.end(sseOf(chunk({ role: "assistant", tool_calls: [call(0, "first"), call(1, "second")] }), chunk({}, "tool_calls"), "[DONE]"));
      } else res.end(sseOf(chunk({ role: "assistant", content: "Both answered." }, "stop"), "[DONE]"));
    });
    const dir = agent({}, { base_url: twice });
    const d = daemon(dir, { LNK_TOOL_EVERYTHING: EVERYTHING });
    const { c, sessionId } = await session(d);
    expect(await prompt(c, sessionId, "call echo twice")).toMatchObject({ stopReason: "end_turn" });
    const messages = (asked[1]?.messages ?? []) as { role: string; tool_calls?: { id: string }[]; tool_call_id?: string; content?: unknown }[];
    const ids = messages.find((m) => m.role === "assistant")?.tool_calls?.map((t) => t.id) ?? [];
    expect(new Set(ids).size).toBe(2);
    const results = messages.filter((m) => m.role === "tool");
    expect(results.map((m) => m.tool_call_id)).toEqual(ids);
    expect(results.map((m) => JSON.stringify(m.content))).toEqual([expect.stringContaining("Echo: first"), expect.stringContaining("Echo: second")]);
    expect(await d.stop()).toEqual({ code: 0, signal: null });
  });

  it("an endpoint that refuses the tools' descriptions as too long, each time a little shorter, is asked again once only", async () => {
    let bound = 60;
    const refusing = await hostile((res) => {
      res.writeHead(400, { "content-type": "application/json" });
      res.end(JSON.stringify({ error: { message: `Invalid 'tools[0].function.description': string too long. Expected a string with maximum length ${bound--}, but got a string with length 100 instead.`, type: "invalid_request_error", code: "string_above_max_length" } }));
    });
    const dir = agent({}, { base_url: refusing });
    const d = daemon(dir, { LNK_TOOL_EVERYTHING: EVERYTHING });
    const { c, sessionId } = await session(d);
    await failure(prompt(c, sessionId, "hello"));
    expect(60 - bound).toBe(2);
    expect(await d.stop()).toEqual({ code: 0, signal: null });
  });
});

