// The built daemon on stdio, driven by the real ACP SDK client, with the scripted model server and a
// real MCP server from npm: what a user sees, what the model was sent, what is kept on disk.
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";
import * as acp from "@agentclientprotocol/sdk";
import type { ContentBlock, SessionNotification, SessionUpdate } from "@agentclientprotocol/sdk";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { paths, readEventsFrom } from "../store/index.js";
import { MAX_RETRIES } from "../turn/model.js";
import { answerText, configure, daemonTestHooks, scriptedSettings, startDaemon, tempDir, type Client, type Daemon, failure, stdioClient, until, watched } from "./acp-client.js";
import { lastUserText, type ModelServer, type RecordedRequest } from "./model-server.js";
import { BIN, ROOT } from "./fixtures/built.js";
import { deferred } from "./fixtures/deferred.js";

const EVERYTHING = `"${process.execPath}" "${ROOT}node_modules/@modelcontextprotocol/server-everything/dist/index.js" stdio`;

let server: ModelServer;
const cleanup = daemonTestHooks([BIN, "dist/daemon/serve.js", "dist/acp/app.js"], (s) => (server = s));

function agent(extra: Record<string, unknown> = {}): string {
  const dir = tempDir();
  cleanup.push(() => dir.remove());
  configure(dir.path, scriptedSettings(server.url, extra));
  return dir.path;
}

/** The daemon on stdio; `withTools` names the everything MCP server as Link's bridge would. */
function daemon(dir: string, env: NodeJS.ProcessEnv = {}, withTools = false): Daemon {
  const d = startDaemon(["--agent", dir], { ...(withTools ? { LNK_TOOL_EVERYTHING: EVERYTHING } : {}), ...env });
  return watched(d, cleanup);
}

async function client(d: Daemon): Promise<Client> {
  return stdioClient(d, cleanup);
}

const text = (s: string): ContentBlock[] => [{ type: "text", text: s }];
const contents = (r: RecordedRequest) => JSON.stringify(r.body.messages ?? []);

/**
 * Prompts `first`, then, once the model has been asked `asked` times, `second`, which waits in the
 * running turn's queue (requests are handled in order: once a session/list sent after it is
 * answered, it is queued); then lets the model's held answer go, and expects both prompts ended well.
 */
async function queuedBehind(c: Client, sessionId: string, first: string, asked: number, gate: { resolve: () => void }, second = "two"): Promise<void> {
  const one = c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: text(first) });
  await server.waitForRequest(asked);
  const two = c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: text(second) });
  await c.agent.request(acp.methods.agent.session.list, {});
  gate.resolve();
  expect(await one).toMatchObject({ stopReason: "end_turn" });
  expect(await two).toMatchObject({ stopReason: "end_turn" });
}


/** Every tool_call has a final tool_call_update (completed or failed). */
function openCalls(updates: readonly SessionNotification[]): string[] {
  const open = new Set<string>();
  for (const { update } of updates) {
    if (update.sessionUpdate === "tool_call") open.add(update.toolCallId);
    if (update.sessionUpdate === "tool_call_update" && (update.status === "completed" || update.status === "failed")) open.delete(update.toolCallId);
  }
  return [...open];
}

const kinds = (updates: readonly SessionNotification[]) => updates.map((u) => u.update.sessionUpdate);
const of = <K extends SessionUpdate["sessionUpdate"]>(updates: readonly SessionNotification[], kind: K) =>
  updates.map((u) => u.update).filter((u): u is Extract<SessionUpdate, { sessionUpdate: K }> => u.sessionUpdate === kind);

describe("a conversation over stdio", { timeout: 120_000 }, () => {
  it("streams the answer, the tool call and its result; keeps it; replays it; resumes it after a restart", async () => {
    const dir = agent({ verbosity: "all" });
    const d1 = daemon(dir, {}, true);
    const c1 = await client(d1);
    const { sessionId } = await c1.agent.request(acp.methods.agent.session.new, { cwd: ROOT, mcpServers: [] });
    const calls = [
      { name: "everything__echo", arguments: { message: "ping" } },
      { name: "everything__get-sum", arguments: { a: "not a number" } },
    ];
    server.script(
      { tool_calls: calls, usage: { prompt_tokens: 100, completion_tokens: 10, cached_tokens: 60 } },
      { text: "The tool said ping.", usage: { prompt_tokens: 130, completion_tokens: 5 } },
    );
    const res = await c1.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: text("call the echo tool") });
    expect(res).toEqual({ stopReason: "end_turn", usage: { inputTokens: 230, outputTokens: 15, cachedReadTokens: 60, totalTokens: 245 } });
    expect(answerText(c1.updates)).toBe("The tool said ping.");
    const [call, sum] = of(c1.updates, "tool_call");
    expect(call).toMatchObject({ title: "everything: echo", status: "in_progress", rawInput: { message: "ping" }, _meta: { link: { verbosity: "all" } } });
    expect(sum).toMatchObject({ title: "everything: get-sum", _meta: { link: { verbosity: "all" } } });
    const results = of(c1.updates, "tool_call_update");
    expect(results.find((u) => u.toolCallId === call?.toolCallId)).toMatchObject({
      status: "completed",
      content: [{ type: "content", content: { type: "text", text: "Echo: ping" } }],
      _meta: { link: { verbosity: "all" } },
    });
    expect(results.find((u) => u.toolCallId === sum?.toolCallId)).toMatchObject({ status: "failed" });
    expect(openCalls(c1.updates)).toEqual([]);
    expect(contents(server.requests[1] as RecordedRequest)).toContain("Echo: ping");
    const events = readEventsFrom(paths({ dir }).conversation(sessionId), 1).map((e) => e.event);
    expect(events.map((e) => ("role" in e ? `${e.kind}:${e.role}` : e.kind))).toEqual([
      "message:user",
      "message:assistant",
      "tool_result",
      "tool_result",
      "message:assistant",
    ]);

    c1.close();
    d1.child.stdin?.end();
    expect(await d1.exited).toEqual({ code: 0, signal: null });

    // A new process: the session is its conversation on disk.
    const d2 = daemon(dir, {}, true);
    const c2 = await client(d2);
    await c2.agent.request(acp.methods.agent.session.load, { sessionId, cwd: ROOT, mcpServers: [] });
    expect(kinds(c2.updates)).toEqual(["user_message_chunk", "tool_call", "tool_call_update", "tool_call", "tool_call_update", "agent_message_chunk", "available_commands_update"]);
    expect(of(c2.updates, "tool_call").map((u) => [u.title, u.status])).toEqual([
      ["everything: echo", "completed"],
      ["everything: get-sum", "failed"],
    ]);
    expect(of(c2.updates, "tool_call")[0]).toMatchObject({ rawInput: { message: "ping" } });
    expect(of(c2.updates, "tool_call_update")[0]).toMatchObject({ status: "completed", content: [{ content: { text: "Echo: ping" } }] });
    expect(of(c2.updates, "tool_call_update")[1]).toMatchObject({ status: "failed" });
    expect(answerText(c2.updates)).toBe("The tool said ping.");

    const list = await c2.agent.request(acp.methods.agent.session.list, {});
    expect(list.sessions).toMatchObject([{ sessionId, title: "call the echo tool" }]);

    // The model is the conversation's: set here, sent with the next turn, kept as a command event.
    const set = await c2.agent.request(acp.methods.agent.session.setConfigOption, { sessionId, configId: "model", value: "bigger-model" });
    expect(set.configOptions[0]).toMatchObject({ category: "model", currentValue: "bigger-model" });

    c2.close();
    await d2.stop();
    const d3 = daemon(dir, {}, true);
    const c3 = await client(d3);
    const resumed = await c3.agent.request(acp.methods.agent.session.resume, { sessionId, cwd: ROOT });
    expect(resumed.configOptions?.[0]).toMatchObject({ currentValue: "bigger-model" });
    expect(c3.updates).toEqual([]);
    server.script({ text: "Still here." });
    const image = { type: "image" as const, mimeType: "image/png", data: "iVBORw0KGgo=" };
    const doc = { type: "resource" as const, resource: { uri: "file:///notes.txt", text: "remember the gate code" } };
    await c3.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: [...text("and now?"), image, doc] });
    const last = server.requests.at(-1) as RecordedRequest;
    expect(last.body.model).toBe("bigger-model");
    expect(contents(last)).toContain("call the echo tool");
    expect(contents(last)).toContain("The tool said ping.");
    expect(contents(last)).toContain("data:image/png;base64,iVBORw0KGgo=");
    expect(contents(last)).toContain("remember the gate code");
    expect(answerText(c3.updates)).toBe("Still here.");
  });

  it("reads no further from a client that reads none of its output, and ends once it has read nothing for LNK_ACP_UNREAD_MS", async () => {
    const d = daemon(agent(), { LNK_ACP_UNREAD_MS: "1000" });
    // Its stdout is never read. Each request is answered, so each one read would be one more answer
    // held: 100,000 of them, some 7 MB sent, 5 MB of answers.
    // The daemon ends with most of what was sent unread: the pipe then fails, as it should.
    d.child.stdin!.on("error", () => undefined);
    const asks = Array.from({ length: 100_000 }, (_, i) => `{"jsonrpc":"2.0","id":${i + 2},"method":"session/list","params":{}}\n`).join("");
    d.child.stdin!.write(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}\n`);
    d.child.stdin!.write(asks);
    // What is still in this process's pipe to the daemon, as it ends: what it never took.
    let left = 0;
    const watch = setInterval(() => {
      // Until the pipe fails: a stream destroyed holds nothing.
      if (!d.child.stdin!.destroyed) left = d.child.stdin!.writableLength;
    }, 20);
    const late = setTimeout(() => d.stop("SIGKILL"), 30_000);
    const exit = await d.exited;
    clearInterval(watch);
    clearTimeout(late);
    expect(exit).toEqual({ code: 0, signal: null });
    expect(d.stderr()).toMatch(/"the client read none of its output: its connection is closed"/);
    // It took what filled its output (the pipes' room and its own), never the rest.
    expect(asks.length - left).toBeLessThan(asks.length / 10);
  });

  it("keeps what a session holds bounded: a working folder past a path's length, or servers past 256 KiB, is refused -32602, for a new session and a loaded one", async () => {
    const dir = agent();
    const c = await client(daemon(dir));
    const { sessionId } = await c.agent.request(acp.methods.agent.session.new, { cwd: dir, mcpServers: [] });
    const long = `/${"x".repeat(5000)}`;
    const servers = [{ name: "big", command: "x", args: ["a".repeat(300 * 1024)], env: [] }];
    for (const [method, params] of [
      [acp.methods.agent.session.new, { cwd: long, mcpServers: [] }],
      [acp.methods.agent.session.new, { cwd: dir, mcpServers: servers }],
      [acp.methods.agent.session.resume, { sessionId, cwd: long, mcpServers: [] }],
      [acp.methods.agent.session.resume, { sessionId, cwd: dir, mcpServers: servers }],
    ] as const) {
      const failed = await failure(c.agent.request(method, params as never));
      expect(failed.code).toBe(-32602);
      expect(failed.message).toMatch(/cwd: 5001 characters|mcpServers: \d+ characters of JSON/);
    }
    await c.agent.request(acp.methods.agent.session.list, {});
  });

  it("answers bad params -32602, an unknown session -32002, and lives through a malformed line and an oversized message", async () => {
    const d = daemon(agent(), { LNK_ACP_MAX_BYTES: "4096" });
    const lines = createInterface({ input: d.child.stdout! });
    const answers = new Map<unknown, { resolve: (v: Record<string, unknown>) => void }>();
    const got: Record<string, unknown>[] = [];
    lines.on("line", (line) => {
      const msg = z.record(z.string(), z.unknown()).parse(JSON.parse(line));
      got.push(msg);
      answers.get(msg.id)?.resolve(msg);
    });
    const send = (raw: string, id: unknown) =>
      new Promise<Record<string, unknown>>((resolve) => {
        answers.set(id, { resolve });
        d.child.stdin!.write(`${raw}\n`);
      });
    const call = (id: number, method: string, params: unknown) => send(JSON.stringify({ jsonrpc: "2.0", id, method, params }), id);

    expect((await send("this is not json", null)).error).toMatchObject({ code: -32700 });
    expect((await call(1, "initialize", { protocolVersion: 1, clientCapabilities: {} })).result).toBeDefined();
    expect((await call(2, "session/new", { mcpServers: [] })).error).toMatchObject({ code: -32602 });
    expect((await call(3, "session/new", { cwd: "/", mcpServers: [], _meta: { link: { thread: "a/b" } } })).error).toMatchObject({ code: -32602 });
    expect((await call(4, "session/prompt", { sessionId: "nobody", prompt: text("hi") })).error).toMatchObject({ code: -32002 });
    const big = await call(5, "session/prompt", { sessionId: "nobody", prompt: text("x".repeat(10_000)) });
    expect(big.error).toMatchObject({ code: -32600 });
    expect(String((big.error as { message: string }).message)).toMatch(/limit of 4096/);
    const fresh = await call(6, "session/new", { cwd: "/", mcpServers: [] });
    expect(fresh.result).toMatchObject({ sessionId: expect.any(String) });
    // A response to a request the daemon never sent: the SDK complains, in the log.
    d.child.stdin!.write(`${JSON.stringify({ jsonrpc: "2.0", id: 987, result: {} })}\n`);
    expect((await call(7, "session/list", {})).result).toBeDefined();
    expect(d.child.exitCode).toBeNull();
    // stdout held answers only; stderr, one JSON object a line, the SDK's complaint among them (its
    // pipe is read apart from stdout's, so the line may come a little after the answer).
    // (and what a new session is told after its answer: the commands it offers, the endpoint's models).
    const told = new Set(["available_commands_update", "config_option_update"]);
    const offered = (m: Record<string, unknown>) => m.method === "session/update" && told.has(String((m.params as { update?: { sessionUpdate?: string } }).update?.sessionUpdate));
    expect(got.every((m) => m.jsonrpc === "2.0" && ("id" in m || offered(m)))).toBe(true);
    for (const until = Date.now() + 5_000; !d.stderr().includes("987") && Date.now() < until; ) await new Promise((r) => setTimeout(r, 20));
    const log = d.stderr().trim().split("\n").map((line) => z.record(z.string(), z.unknown()).parse(JSON.parse(line)));
    expect(log.some((l) => l.msg === "library" && String(l.message).includes("987"))).toBe(true);
  });
});

describe("a session's own MCP servers", () => {
  it("are added to that conversation's tools only", async () => {
    const d = daemon(agent());
    const c = await client(d);
    const [command, script] = [process.execPath, `${ROOT}node_modules/@modelcontextprotocol/server-everything/dist/index.js`];
    const mine = await c.agent.request(acp.methods.agent.session.new, { cwd: ROOT, mcpServers: [{ name: "mine", command, args: [script, "stdio"], env: [] }] });
    const other = await c.agent.request(acp.methods.agent.session.new, { cwd: ROOT, mcpServers: [] });
    server.script({ tool_calls: [{ name: "mine__echo", arguments: { message: "own tool" } }] }, { text: "Done." });
    await c.agent.request(acp.methods.agent.session.prompt, { sessionId: mine.sessionId, prompt: text("use your own tool") });
    expect(of(c.updates, "tool_call_update")).toMatchObject([{ status: "completed", content: [{ content: { text: "Echo: own tool" } }] }]);
    expect(JSON.stringify(server.requests[0]?.body)).toContain("mine__echo");
    server.script({ text: "No tools here." });
    await c.agent.request(acp.methods.agent.session.prompt, { sessionId: other.sessionId, prompt: text("and here?") });
    expect(JSON.stringify(server.requests.at(-1)?.body)).not.toContain("mine__echo");
  });
});

describe("turns that fail or stop", { timeout: 120_000 }, () => {
  it("a model that fails (400, then 500) answers -32603 and leaves no tool call open", async () => {
    const dir = agent();
    const d = daemon(dir, {}, true);
    const c = await client(d);
    const { sessionId } = await c.agent.request(acp.methods.agent.session.new, { cwd: ROOT, mcpServers: [] });
    server.script({ tool_calls: [{ name: "everything__echo", arguments: { message: "a" } }] }, { error: { status: 400, message: "bad request from the model" } });
    const bad = await failure(c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: text("one") }));
    expect(bad.code).toBe(-32603);
    expect(bad.message).toMatch(/bad request from the model/);
    expect(bad.message).not.toMatch(/\n\s+at /);
    const down = { error: { status: 500, message: "the model is down" } };
    server.script(...Array.from({ length: MAX_RETRIES + 1 }, () => down));
    const failed = await failure(c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: text("two") }));
    expect(failed.code).toBe(-32603);
    expect(of(c.updates, "tool_call")).toHaveLength(1);
    expect(openCalls(c.updates)).toEqual([]);
    const kept = readEventsFrom(paths({ dir }).conversation(sessionId), 1).map((e) => e.event.kind);
    expect(kept.filter((k) => k === "failure")).toHaveLength(2);
  });

  it("session/cancel stops a turn mid-call: cancelled, the events so far kept, no tool call open", async () => {
    const dir = agent();
    const d = daemon(dir, {}, true);
    const c = await client(d);
    const { sessionId } = await c.agent.request(acp.methods.agent.session.new, { cwd: ROOT, mcpServers: [] });
    server.script({ tool_calls: [{ name: "everything__trigger-long-running-operation", arguments: { duration: 60, steps: 60 } }] });
    const answer = c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: text("take your time") });
    await c.waitForUpdate((n) => n.update.sessionUpdate === "tool_call");
    await c.agent.notify(acp.methods.agent.session.cancel, { sessionId });
    expect(await answer).toMatchObject({ stopReason: "cancelled" });
    expect(openCalls(c.updates)).toEqual([]);
    const kept = readEventsFrom(paths({ dir }).conversation(sessionId), 1).map((e) => e.event);
    expect(kept[0]).toMatchObject({ kind: "message", role: "user", text: "take your time" });
    expect(kept[1]).toMatchObject({ kind: "message", role: "assistant", tool_calls: [{ name: "everything__trigger-long-running-operation" }] });

    // The conversation goes on.
    server.script({ text: "Stopped, as asked." });
    expect(await c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: text("ok?") })).toMatchObject({ stopReason: "end_turn" });

    // Shown again, the stopped call is failed.
    const before = c.updates.length;
    await c.agent.request(acp.methods.agent.session.load, { sessionId, cwd: ROOT, mcpServers: [] });
    const replayed = c.updates.slice(before);
    expect(of(replayed, "tool_call")).toMatchObject([{ status: "failed" }]);
    expect(of(replayed, "tool_call_update")).toMatchObject([{ status: "failed" }]);
  });

  it("a prompt sent right after session/cancel is answered by a turn of its own, not cancelled with the turn it followed", async () => {
    const dir = agent();
    const c = await client(daemon(dir));
    const { sessionId } = await c.agent.request(acp.methods.agent.session.new, { cwd: ROOT, mcpServers: [] });
    server.script({ text: "Too late.", delayMs: 10_000 }, { text: "The second, answered." });
    const asked = server.requests.length;
    const first = c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: text("take your time") });
    await server.waitForRequest(asked + 1);
    // Both in one go: the second comes while the first is still ending.
    void c.agent.notify(acp.methods.agent.session.cancel, { sessionId });
    const second = c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: text("and then this") });
    expect(await first).toMatchObject({ stopReason: "cancelled" });
    expect(await second).toMatchObject({ stopReason: "end_turn" });
    expect(answerText(c.updates)).toContain("The second, answered.");
    const kept = readEventsFrom(paths({ dir }).conversation(sessionId), 1).map((e) => e.event);
    expect(kept.filter((e) => e.kind === "message" && e.role === "user").map((e) => (e as { text: string }).text)).toEqual(["take your time", "and then this"]);
  });

  it("a session/cancel after that prompt, the first turn still ending, cancels the prompt too: it never runs", async () => {
    const dir = agent();
    const c = await client(daemon(dir));
    const { sessionId } = await c.agent.request(acp.methods.agent.session.new, { cwd: ROOT, mcpServers: [] });
    server.script({ text: "Too late.", delayMs: 10_000 }, { text: "Asked for, then cancelled." });
    const asked = server.requests.length;
    const first = c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: text("take your time") });
    await server.waitForRequest(asked + 1);
    // All in one go: the second prompt and its cancel come while the first turn is still ending.
    void c.agent.notify(acp.methods.agent.session.cancel, { sessionId });
    const second = c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: text("and then this") });
    void c.agent.notify(acp.methods.agent.session.cancel, { sessionId });
    expect(await first).toMatchObject({ stopReason: "cancelled" });
    expect(await second).toMatchObject({ stopReason: "cancelled" });
    // The model was never asked again, and the session still serves.
    expect(server.requests).toHaveLength(asked + 1);
    expect(answerText(c.updates)).not.toContain("Asked for, then cancelled.");
    expect(await c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: text("now") })).toMatchObject({ stopReason: "end_turn" });
    expect(answerText(c.updates)).toContain("Asked for, then cancelled.");
  });

  it("a session loaded by another process while its turn runs a call here shows the call in progress, not failed", async () => {
    const dir = agent();
    const c = await client(daemon(dir, {}, true));
    const { sessionId } = await c.agent.request(acp.methods.agent.session.new, { cwd: ROOT, mcpServers: [] });
    server.script({ tool_calls: [{ name: "everything__trigger-long-running-operation", arguments: { duration: 60, steps: 60 } }] });
    const answer = c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: text("take your time") });
    await c.waitForUpdate((n) => n.update.sessionUpdate === "tool_call");
    await until(() => readEventsFrom(paths({ dir }).conversation(sessionId), 1).length === 2, "the call written");
    const other = await client(daemon(dir));
    await other.agent.request(acp.methods.agent.session.load, { sessionId, cwd: ROOT, mcpServers: [] });
    expect(of(other.updates, "tool_call")).toMatchObject([{ status: "in_progress" }]);
    expect(of(other.updates, "tool_call_update")).toEqual([]);
    await c.agent.notify(acp.methods.agent.session.cancel, { sessionId });
    expect(await answer).toMatchObject({ stopReason: "cancelled" });
    // Once that turn is over, the call it left without a result is shown failed.
    const before = other.updates.length;
    await other.agent.request(acp.methods.agent.session.load, { sessionId, cwd: ROOT, mcpServers: [] });
    expect(of(other.updates.slice(before), "tool_call_update")).toMatchObject([{ status: "failed" }]);
  });

  it("a second prompt steers the running turn: one turn, one request at a time, both answered", async () => {
    const d = daemon(agent());
    const c = await client(d);
    const { sessionId } = await c.agent.request(acp.methods.agent.session.new, { cwd: ROOT, mcpServers: [] });
    const gate = deferred();
    server.script(async () => {
      await gate.promise;
      return { text: "First answer." };
    });
    server.script({ text: "Second answer." });
    await queuedBehind(c, sessionId, "one", 1, gate);
    expect(server.requests).toHaveLength(2);
    const [r1, r2] = server.requests as [RecordedRequest, RecordedRequest];
    expect(contents(r1)).not.toContain("two");
    // The second request was made only once the first was answered, and carries both messages.
    expect(contents(r2)).toContain("First answer.");
    expect(contents(r2)).toContain("two");
    expect(answerText(c.updates)).toBe("First answer.Second answer.");
    // One turn answered both: the daemon started no second one.
    expect(d.stderr().match(/"msg":"turn"/g)).toHaveLength(1);
  });

  it("a prompt that steers a turn past its last round of calls is answered by that turn, the model told once more to call nothing", async () => {
    const dir = agent();
    const d = daemon(dir, {}, true);
    const c = await client(d);
    const { sessionId } = await c.agent.request(acp.methods.agent.session.new, { cwd: ROOT, mcpServers: [] });
    // A model that calls a tool at every round it may; told to call nothing, it answers, the first
    // time once the second prompt waits in the turn's queue.
    const gate = deferred();
    let told = 0;
    server.fallback = async (r) => {
      if ((r.body as { tool_choice?: string }).tool_choice !== "none") return { tool_calls: [{ name: "everything__echo", arguments: { message: "again" } }] };
      if (++told === 1) {
        await gate.promise;
        return { text: "Stopping here." };
      }
      return { text: "And the second, answered." };
    };
    // Eight rounds of calls, then the request that may call nothing, which the second prompt steers.
    await queuedBehind(c, sessionId, "loop", 9, gate);
    // One more request after the last round's, carrying the message that steered the turn, and it
    // too may call nothing: the turn's rounds are spent.
    expect(server.requests).toHaveLength(10);
    const [ninth, tenth] = server.requests.slice(8) as [RecordedRequest, RecordedRequest];
    expect(contents(ninth)).not.toContain("two");
    expect(lastUserText(tenth).split("\n").at(-1)).toBe("two");
    expect((tenth.body as { tool_choice?: string }).tool_choice).toBe("none");
    const events = readEventsFrom(paths({ dir }).conversation(sessionId), 1).map((e) => e.event);
    expect(events.filter((e) => e.kind === "tool_result")).toHaveLength(8);
    expect(events.slice(-3)).toMatchObject([
      { kind: "message", role: "assistant", text: "Stopping here." },
      { kind: "message", role: "user", text: "two" },
      { kind: "message", role: "assistant", text: "And the second, answered." },
    ]);
    expect(events.at(-1)).not.toHaveProperty("tool_calls");
    expect(answerText(c.updates)).toBe("Stopping here.And the second, answered.");
    // One turn answered both: the daemon started no second one.
    expect(d.stderr().match(/"msg":"turn"/g)).toHaveLength(1);
  });

  it("asks the model over Node's HTTP client alone: its turns never load Node's fetch, which costs a start 20 to 30 ms", async () => {
    const dir = agent();
    // Loaded first in the daemon's process: at its exit, says which of Node's modules of fetch it loaded.
    const probe = tempDir("lnk-fetch-probe-");
    cleanup.push(() => probe.remove());
    const file = join(probe.path, "fetch-probe.cjs");
    writeFileSync(file, 'process.on("exit", () => process.stderr.write(`fetch loaded: ${JSON.stringify(process.moduleLoadList.filter((m) => m.includes("undici")))}\\n`));\n');
    const d = daemon(dir, { NODE_OPTIONS: `--require ${file}` });
    const c = await client(d);
    const { sessionId } = await c.agent.request(acp.methods.agent.session.new, { cwd: ROOT, mcpServers: [] });
    server.script({ text: "The first." }, { error: { status: 429, message: "slow down", headers: { "retry-after": "0" } } }, { text: "The second." });
    for (const ask of ["one", "two"]) {
      expect((await c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: text(ask) })).stopReason).toBe("end_turn");
    }
    expect(answerText(c.updates, sessionId)).toBe("The first.The second.");
    c.close();
    d.child.stdin?.end();
    expect(await d.exited).toEqual({ code: 0, signal: null });
    expect(d.stderr()).toContain("fetch loaded: []");
  });

  it("a client that hangs up mid-turn: the turn still finishes and is kept, then the daemon ends", async () => {
    const dir = agent();
    const d = daemon(dir);
    const c = await client(d);
    const { sessionId } = await c.agent.request(acp.methods.agent.session.new, { cwd: ROOT, mcpServers: [] });
    const gate = deferred();
    server.script(async () => {
      await gate.promise;
      return { text: "Kept for later." };
    });
    void c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: text("are you there?") }).catch(() => undefined);
    await server.waitForRequest(1);
    c.close();
    d.child.stdin?.destroy();
    d.child.stdout?.destroy();
    gate.resolve();
    expect(await d.exited).toEqual({ code: 0, signal: null });
    const kept = readEventsFrom(paths({ dir }).conversation(sessionId), 1).map((e) => e.event);
    expect(kept.at(-1)).toMatchObject({ kind: "message", role: "assistant", text: "Kept for later." });
    expect(d.stderr()).not.toMatch(/unhandled|"level":"error"/);
  });

  it("SIGTERM aborts the running turn, keeps what it wrote and exits 0", async () => {
    const dir = agent();
    const d = daemon(dir);
    const c = await client(d);
    const { sessionId } = await c.agent.request(acp.methods.agent.session.new, { cwd: ROOT, mcpServers: [] });
    server.script({ text: "never finished", hang: true });
    void c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: text("long one") }).catch(() => undefined);
    await server.waitForRequest(1);
    expect(await d.stop("SIGTERM")).toEqual({ code: 0, signal: null });
    const kept = readEventsFrom(paths({ dir }).conversation(sessionId), 1).map((e) => e.event);
    expect(kept[0]).toMatchObject({ kind: "message", role: "user", text: "long one" });
  });
});
