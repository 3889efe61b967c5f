// The ACP layer in process, against a stand-in turn: sessions, steering, cancel, tool calls always
// closed, errors, replay, prompt content and oversized lines.
import { failure } from "./acp-client.js";
import { isUtf8 } from "node:buffer";
import { mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as acp from "@agentclientprotocol/sdk";
import type { ContentBlock, SessionNotification, SessionUpdate } from "@agentclientprotocol/sdk";
import fc from "fast-check";
import { afterEach, describe, expect, it } from "vitest";
import { AcpState, createAgentApp } from "../acp/app.js";
import { Outbox } from "../acp/outbox.js";
import { ContentError, promptContent } from "../acp/content.js";
import type { AcpDeps } from "../acp/deps.js";
import { CallNames } from "../acp/call-names.js";
import { replay } from "../acp/replay.js";
import { LineSplitter, topLevelId } from "../daemon/lines.js";
import { NewSessionLink, ParamsError, PromptLink, parseLink } from "../acp/meta.js";
import type { Event, Numbered } from "../protocol/index.js";
import { appendEvent, ensureConversation, forgetEvents, paths, readEventsFrom, readToolsList, writeMark, writeSettings, type AgentRef, type ConversationPaths } from "../store/index.js";
import type { TurnEvent, TurnInput, TurnListener, TurnOutcome } from "../turn/types.js";
import { Turns, type StartTurn } from "../acp/turns.js";
import { deferred } from "./fixtures/deferred.js";

const dirs: string[] = [];
afterEach(async () => {
  // A prompt's owed file is made on the event loop's next pass (acp/delivery.ts): a prompt answered
  // at once, in process, may end its test first. Made, then removed with the folder.
  await new Promise((resolve) => setImmediate(resolve));
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function agentDir(): AgentRef {
  const dir = mkdtempSync(join(tmpdir(), "lnk-acp-layer-"));
  dirs.push(dir);
  writeSettings({ dir }, { model: { provider: "test", name: "base-model", base_url: "http://127.0.0.1:9/v1" }, verbosity: "all" });
  return { dir };
}

const quiet = { info: () => undefined, warn: () => undefined, error: () => undefined };
type Run = (input: TurnInput, listener: TurnListener) => Promise<TurnOutcome>;

/** A client connected in process to one app over the shared state. */
async function connect(state: AcpState) {
  const updates: SessionNotification[] = [];
  const conn = acp
    .client()
    .onNotification(acp.methods.client.session.update, ({ params }) => void updates.push(params))
    .connect(createAgentApp(state, new Outbox()));
  await conn.agent.request(acp.methods.agent.initialize, { protocolVersion: 1, clientCapabilities: {} });
  return { agent: conn.agent, updates, close: () => conn.close() };
}

/** A client with one new session, and a way to prompt it with text. */
async function session(state: AcpState) {
  const c = await connect(state);
  const { sessionId } = await c.agent.request(acp.methods.agent.session.new, { cwd: "/", mcpServers: [] });
  const prompt = (text: string) => c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text }] });
  return { c, sessionId, prompt };
}

function setup(runTurn: Run) {
  const agent = agentDir();
  const deps: AcpDeps = { agent, version: "0.0.0", log: quiet, runTurn };
  return { agent, state: new AcpState(deps) };
}

const done = (extra: Partial<TurnOutcome> = {}): TurnOutcome => ({ stop: "end_turn", modelMs: 0, ...extra });


describe("initialize and sessions", () => {
  it("advertises what is supported, with Link's contract under _meta", async () => {
    const { state } = setup(async () => done());
    const conn = acp.client().connect(createAgentApp(state, new Outbox()));
    const init = await conn.agent.request(acp.methods.agent.initialize, { protocolVersion: 1, clientCapabilities: {} });
    expect(init.agentCapabilities).toMatchObject({
      loadSession: true,
      promptCapabilities: { image: true, embeddedContext: true },
      mcpCapabilities: { http: true },
      sessionCapabilities: { list: {}, resume: {}, close: {} },
      _meta: { link: { contract: 2, agentState: { export: ["instructions", "skills", "memory", "sessions"], import: ["sessions"] } } },
    });
    conn.close();
  });

  it("names a group's conversation <channel>-<group>, narrows its tools, and offers the model", async () => {
    const { agent, state } = setup(async () => done());
    const c = await connect(state);
    const s = await c.agent.request(acp.methods.agent.session.new, {
      cwd: "/",
      mcpServers: [],
      _meta: { link: { channel: "telegram", group: "42", tools: ["memory", "everything"] } },
    });
    expect(s.sessionId).toBe("telegram-42");
    expect(readToolsList(paths(agent).conversation("telegram-42"))).toEqual(["memory", "everything"]);
    await c.agent.request(acp.methods.agent.session.new, { cwd: "/", mcpServers: [], _meta: { link: { channel: "telegram", group: "42", tools: ["memory", "web"] } } });
    expect(readToolsList(paths(agent).conversation("telegram-42"))).toEqual(["memory"]);
    expect(s.configOptions?.[0]).toMatchObject({ id: "model", category: "model", currentValue: "base-model" });

    const set = await c.agent.request(acp.methods.agent.session.setConfigOption, { sessionId: s.sessionId, configId: "model", value: "other-model" });
    expect(set.configOptions[0]).toMatchObject({ currentValue: "other-model" });
    const events = readEventsFrom(paths(agent).conversation("telegram-42"), 1).map((e) => e.event);
    expect(events).toMatchObject([{ kind: "command", name: "/model:set", model: "other-model" }]);
    c.close();
  });

  it("answers bad params -32602 and an unknown session -32002", async () => {
    const { state } = setup(async () => done());
    const c = await connect(state);
    const newWith = (link: unknown) => c.agent.request(acp.methods.agent.session.new, { cwd: "/", mcpServers: [], _meta: { link } });
    expect((await failure(newWith({ thread: "../escape" }))).code).toBe(-32602);
    expect((await failure(newWith({ group: "9" }))).code).toBe(-32602);
    expect((await failure(newWith({ tools: "memory" }))).code).toBe(-32602);
    const s = await newWith({ thread: "t1" });
    const prompt = (meta: unknown) =>
      c.agent.request(acp.methods.agent.session.prompt, { sessionId: s.sessionId, prompt: [{ type: "text", text: "hi" }], _meta: { link: meta } });
    const bad = await failure(prompt({ from: { id: 7 } }));
    expect(bad.code).toBe(-32602);
    expect(bad.message).toMatch(/from/);
    expect((await failure(prompt({ verbosity: "loud" }))).code).toBe(-32602);
    const empty = c.agent.request(acp.methods.agent.session.prompt, { sessionId: s.sessionId, prompt: [] });
    expect((await failure(empty)).code).toBe(-32602);
    const setOther = c.agent.request(acp.methods.agent.session.setConfigOption, { sessionId: s.sessionId, configId: "mode", value: "x" });
    expect((await failure(setOther)).code).toBe(-32602);
    const unknown = { sessionId: "nobody", prompt: [{ type: "text" as const, text: "hi" }] };
    expect((await failure(c.agent.request(acp.methods.agent.session.prompt, unknown))).code).toBe(-32002);
    expect((await failure(c.agent.request(acp.methods.agent.session.resume, { sessionId: "nobody", cwd: "/" }))).code).toBe(-32002);
    expect((await failure(c.agent.request(acp.methods.agent.session.load, { sessionId: "../x", cwd: "/", mcpServers: [] }))).code).toBe(-32002);
    c.close();
  });
});

describe("prompts", () => {
  it("sends the text chunks of one pass of the event loop as one update, in order with the rest, and those of later passes apart", async () => {
    const { state } = setup(async (_input, listener) => {
      // Read from the model at once: one pass.
      for (const delta of ["The ", "quick ", "fox"]) listener({ type: "text", delta });
      listener({ type: "tool_call", id: "c1", name: "x__look", arguments: {} });
      listener({ type: "tool_result", id: "c1", name: "x__look", status: "completed", text: "seen" });
      listener({ type: "text", delta: " jumps" });
      // Then chunks that come one by one, each in a pass of its own.
      for (const delta of [" over", " the dog."]) {
        await new Promise((resolve) => setImmediate(resolve));
        listener({ type: "text", delta });
      }
      return done();
    });
    const { c, prompt } = await session(state);
    await prompt("go");
    const sent = c.updates
      .map((u) => u.update)
      .filter((u) => u.sessionUpdate !== "available_commands_update" && u.sessionUpdate !== "usage_update")
      .map((u) => (u.sessionUpdate === "agent_message_chunk" ? (u.content as { text: string }).text : u.sessionUpdate));
    expect(sent).toEqual(["The quick fox", "tool_call", "tool_call_update", " jumps", " over", " the dog."]);
    c.close();
  });

  it("passes who, where and when to the turn and streams its reports with the chat's verbosity", async () => {
    let seen: TurnInput | undefined;
    const { state } = setup(async (input, listener) => {
      seen = input;
      listener({ type: "text", delta: "Hel" });
      listener({ type: "tool_call", id: "c1", name: "everything__echo", arguments: { message: "x" } });
      listener({ type: "tool_result", id: "c1", name: "everything__echo", status: "completed", text: "Echo: x" });
      listener({ type: "text", delta: "lo" });
      return done({ usage: { in: 10, out: 2, cached: 4 } });
    });
    const c = await connect(state);
    const s = await c.agent.request(acp.methods.agent.session.new, { cwd: "/", mcpServers: [], _meta: { link: { channel: "signal" } } });
    const from = { id: "u2", name: "Ann", owner: false };
    const res = await c.agent.request(acp.methods.agent.session.prompt, {
      sessionId: s.sessionId,
      prompt: [{ type: "text", text: "hello" }],
      _meta: { link: { from, time: "2026-01-02T03:04:05Z", verbosity: "verbose" } },
    });
    expect(res).toEqual({ stopReason: "end_turn", usage: { inputTokens: 10, outputTokens: 2, cachedReadTokens: 4, totalTokens: 12 } });
    // The session's working folder goes with the message, to be kept with it.
    expect(seen?.message).toEqual({ text: "hello", from, channel: "signal", cwd: "/", time: new Date("2026-01-02T03:04:05Z") });
    const kinds = c.updates.map((u) => u.update.sessionUpdate);
    expect(kinds).toEqual(["agent_message_chunk", "tool_call", "tool_call_update", "agent_message_chunk"]);
    expect(c.updates[1]?.update).toMatchObject({ title: "everything: echo", status: "in_progress", rawInput: { message: "x" }, _meta: { link: { verbosity: "verbose" } } });
    expect(c.updates[2]?.update).toMatchObject({ status: "completed", _meta: { link: { verbosity: "verbose" } } });
    c.close();
  });

  it("closes every open tool call as failed when the turn throws, and answers -32603 without a stack", async () => {
    const { state } = setup(async (_input, listener) => {
      listener({ type: "tool_call", id: "c1", name: "x__run", arguments: {} });
      throw new Error("the tool host fell over");
    });
    const { c, prompt } = await session(state);
    const err = await failure(prompt("go"));
    expect(err.code).toBe(-32603);
    expect(err.message).toBe("Internal error: the tool host fell over");
    expect(c.updates.map((u) => u.update)).toMatchObject([
      { sessionUpdate: "tool_call", toolCallId: "c1", _meta: { link: { verbosity: "all" } } },
      { sessionUpdate: "tool_call_update", toolCallId: "c1", status: "failed" },
    ]);
    c.close();
  });

  it("a second prompt steers the running turn and gets that turn's stop reason; cancel stops both", async () => {
    const gate = deferred();
    const started = deferred();
    let turns = 0;
    let steered: string[] = [];
    const { state } = setup(async (input) => {
      turns++;
      started.resolve();
      await gate.promise;
      steered = (input.steering?.take() ?? []).map((m) => m.text);
      return done();
    });
    const { c, prompt } = await session(state);
    const first = prompt("one");
    await started.promise;
    const second = prompt("two");
    // Answered in order: once this is, the second prompt has reached the conversation's queue.
    await c.agent.request(acp.methods.agent.session.list, {});
    gate.resolve();
    expect(await first).toMatchObject({ stopReason: "end_turn" });
    expect(await second).toMatchObject({ stopReason: "end_turn" });
    expect(turns).toBe(1);
    expect(steered).toEqual(["two"]);
    c.close();
  });

  it("a message that arrives after the turn's last look is answered by a turn of its own, never two at once", async () => {
    const gate = deferred();
    const started = deferred();
    let running = 0;
    let most = 0;
    const texts: string[] = [];
    const { state } = setup(async (input) => {
      running++;
      most = Math.max(most, running);
      texts.push(input.message.text);
      started.resolve();
      await gate.promise;
      running--;
      return done();
    });
    const { c, prompt } = await session(state);
    const first = prompt("one");
    await started.promise;
    const second = prompt("two");
    await c.agent.request(acp.methods.agent.session.list, {});
    gate.resolve();
    await Promise.all([first, second]);
    expect(texts).toEqual(["one", "two"]);
    expect(most).toBe(1);
    c.close();
  });

  it("session/cancel aborts the turn's signal; the answer is cancelled and open calls are closed", async () => {
    const started = deferred();
    const { state } = setup(
      (input, listener) =>
        new Promise((resolve) => {
          listener({ type: "tool_call", id: "slow", name: "x__wait", arguments: {} });
          started.resolve();
          input.signal?.addEventListener("abort", () => resolve({ stop: "cancelled", modelMs: 0 }));
        }),
    );
    const { c, sessionId, prompt } = await session(state);
    const answer = prompt("wait");
    await started.promise;
    await c.agent.notify(acp.methods.agent.session.cancel, { sessionId });
    expect(await answer).toMatchObject({ stopReason: "cancelled" });
    expect(c.updates.at(-1)?.update).toMatchObject({ sessionUpdate: "tool_call_update", toolCallId: "slow", status: "failed" });
    c.close();
  });
});

describe("prompts and cancels in any order", () => {
  it("a prompt a cancel came after, before its turn began, never begins one; every prompt is answered", async () => {
    const flush = () => new Promise((resolve) => setImmediate(resolve));
    await fc.assert(
      fc.asyncProperty(fc.array(fc.constantFrom("prompt", "cancel", "end"), { maxLength: 24 }), async (ops) => {
        const turns = new Turns();
        const sub = { send: () => undefined };
        let op = 0;
        /** The turn under way: ended by an "end", cancelled when its signal was aborted. */
        let current: { signal: AbortSignal; resolve: (o: TurnOutcome) => void } | undefined;
        const sent: number[] = [];
        const began = new Map<number, number>();
        const cancels: number[] = [];
        const answered = new Map<number, TurnOutcome>();
        const end = () => {
          const turn = current;
          current = undefined;
          turn?.resolve(done(turn.signal.aborted ? { stop: "cancelled" } : {}));
        };
        for (; op < ops.length; op++) {
          if (ops[op] === "prompt") {
            const i = sent.length;
            sent.push(op);
            const start: StartTurn = (_message, _steering, signal) =>
              new Promise((resolve) => {
                began.set(i, op);
                current = { signal, resolve };
              });
            void turns.prompt("k", { text: `m${i}` }, "new", start, sub).then((o) => answered.set(i, o));
          } else if (ops[op] === "cancel") {
            cancels.push(op);
            turns.cancel("k");
          } else end();
          await flush();
        }
        for (let left = 0; left < 2 * sent.length + 2 && turns.count > 0; left++) {
          end();
          await flush();
        }
        expect(answered.size).toBe(sent.length);
        for (const [i, at] of began) expect(cancels.filter((c) => c > (sent[i] ?? 0) && c < at)).toEqual([]);
      }),
      { numRuns: Number(process.env.FUZZ_RUNS ?? 200) },
    );
  });
});

describe("session/load replays the conversation", () => {
  const t = "2026-01-01T00:00:00.000Z";
  const user = (text: string): Event => ({ v: 1, kind: "message", role: "user", time: t, text, header: "" });
  const answer = (text: string, calls: { id: string; name: string }[] = []): Event => ({
    v: 1,
    kind: "message",
    role: "assistant",
    time: t,
    text,
    model: "m",
    provider: "p",
    latency_ms: 1,
    stop: calls.length ? "tool_calls" : "end_turn",
    ...(calls.length ? { tool_calls: calls.map((c) => ({ ...c, arguments: '{"a":1}' })) } : {}),
  });
  const result = (id: string, text: string, error = false): Event => ({ v: 1, kind: "tool_result", time: t, call_id: id, tool: "x__y", text, error });

  it("shows each message and each call with its final status; a call never answered is failed", () => {
    const events: Numbered[] = [
      user("first"),
      answer("", [{ id: "call_0", name: "everything__echo" }, { id: "call_1", name: "everything__get-sum" }]),
      result("call_0", "Echo: hi"),
      result("call_1", "bad arguments", true),
      answer("done"),
      { v: 1, kind: "command", time: t, name: "/model:set", model: "m2" } as Event,
      user("second"),
      answer("", [{ id: "call_0", name: "memory__search" }]),
      result("call_0", "found"),
      answer("", [{ id: "call_9", name: "x__lost" }]),
    ].map((event, i) => ({ n: i + 1, event }));
    const updates = replay(events, "new");
    expect(updates.map((u) => [u.sessionUpdate, "status" in u ? u.status : undefined, "toolCallId" in u ? u.toolCallId : undefined])).toEqual([
      ["user_message_chunk", undefined, undefined],
      ["tool_call", "completed", "call_0"],
      ["tool_call_update", "completed", "call_0"],
      ["tool_call", "failed", "call_1"],
      ["tool_call_update", "failed", "call_1"],
      ["agent_message_chunk", undefined, undefined],
      ["user_message_chunk", undefined, undefined],
      ["tool_call", "completed", "call_0#2"],
      ["tool_call_update", "completed", "call_0#2"],
      ["tool_call", "failed", "call_9"],
      ["tool_call_update", "failed", "call_9"],
    ]);
    expect(updates[2]).toMatchObject({ content: [{ type: "content", content: { type: "text", text: "Echo: hi" } }], _meta: { link: { verbosity: "new" } } });
    expect(updates[8]).toMatchObject({ content: [{ content: { text: "found" } }] });
  });

  it("the model is the conversation's last /model:set, or what the window's mark says came before it", async () => {
    const { agent, state } = setup(async () => done());
    const conv = paths(agent).conversation("marked");
    await appendEvent(conv, { v: 1, kind: "command", time: t, name: "/model:set", model: "early-model" });
    await appendEvent(conv, user("q"));
    await appendEvent(conv, answer("a"));
    const c = await connect(state);
    const resume = () => c.agent.request(acp.methods.agent.session.resume, { sessionId: "marked", cwd: "/" });
    expect((await resume()).configOptions?.[0]).toMatchObject({ currentValue: "early-model" });
    writeMark(conv, { v: 1, event: 2, time: t, tokens_before: 0, budget: 100, model: "marked-model" });
    expect((await resume()).configOptions?.[0]).toMatchObject({ currentValue: "marked-model" });
    await appendEvent(conv, { v: 1, kind: "command", time: t, name: "/model:set", model: "late-model" });
    expect((await resume()).configOptions?.[0]).toMatchObject({ currentValue: "late-model", options: [{ value: "late-model" }, { value: "base-model" }] });
    c.close();
  });

  it("over ACP, before it answers", async () => {
    const { agent, state } = setup(async () => done());
    const conv = paths(agent).conversation("old");
    for (const e of [user("q"), answer("a")]) await appendEvent(conv, e);
    const c = await connect(state);
    const loaded = await c.agent.request(acp.methods.agent.session.load, { sessionId: "old", cwd: "/", mcpServers: [] });
    expect(loaded.configOptions?.[0]).toMatchObject({ currentValue: "base-model" });
    expect(c.updates.map((u) => u.update)).toMatchObject([
      { sessionUpdate: "user_message_chunk", content: { text: "q" } },
      { sessionUpdate: "agent_message_chunk", content: { text: "a" } },
      { sessionUpdate: "available_commands_update" },
    ]);
    const list = await c.agent.request(acp.methods.agent.session.list, {});
    expect(list.sessions).toMatchObject([{ sessionId: "old", title: "q", updatedAt: t }]);
    c.close();
  });
});

describe("prompt content", () => {
  it("joins text, appends embedded text resources and makes images parts", () => {
    const got = promptContent([
      { type: "text", text: "look at" },
      { type: "image", mimeType: "image/png", data: "AAAA" },
      { type: "resource", resource: { uri: "file:///a.txt", text: "contents" } },
      { type: "resource_link", uri: "file:///b.md", name: "b.md" },
    ]);
    expect(got.text).toBe("look at\nfile:///b.md\n\nfile:///a.txt\n```\ncontents\n```");
    expect(got.parts).toEqual([{ type: "image_url", image_url: { url: "data:image/png;base64,AAAA" } }]);
    expect(() => promptContent([{ type: "audio", mimeType: "audio/wav", data: "AA" }])).toThrow(/audio/);
  });

  it("refuses media whose data is not base64 or whose type is not one, which a provider would refuse at every later turn", () => {
    for (const [block, said] of [
      [{ type: "image", mimeType: "image/png", data: "not base64!" }, /an image block's data is not base64/],
      [{ type: "image", mimeType: "image/png", data: "AAA" }, /not base64/],
      [{ type: "image", mimeType: "image/png", data: "AA-_" }, /not base64/],
      [{ type: "image", mimeType: "image/png;x=1", data: "AAAA" }, /mimeType "image\/png;x=1" is not a media type/],
      [{ type: "image", mimeType: "png", data: "AAAA" }, /not a media type/],
      [{ type: "resource", resource: { uri: "file:///a.pdf", mimeType: "application/pdf", blob: "%PDF" } }, /a resource block's data is not base64/],
    ] as const) {
      expect(() => promptContent([block as ContentBlock]), JSON.stringify(block)).toThrow(said);
    }
  });

  it("makes every medium a data: URL of a media type and base64, or refuses it, whatever the block holds", () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 40 }), fc.oneof(fc.string({ maxLength: 40 }), fc.base64String({ maxLength: 40 })), fc.boolean(), (mimeType, data, image) => {
        const block = (image ? { type: "image", mimeType, data } : { type: "resource", resource: { uri: "file:///x", mimeType, blob: data } }) as ContentBlock;
        let got;
        try {
          got = promptContent([block]);
        } catch (e) {
          expect(e).toBeInstanceOf(ContentError);
          return;
        }
        for (const part of got.parts) {
          const url = part.type === "image_url" ? part.image_url.url : part.type === "file" ? (part.file.file_data ?? "") : "";
          expect(url).toMatch(/^data:[a-z0-9][a-z0-9!#$&^_.+-]*\/[a-z0-9][a-z0-9!#$&^_.+-]*;base64,([A-Za-z0-9+/]{4})*([A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/i);
        }
      }),
      { numRuns: 2_000 },
    );
  });
});

describe("oversized lines", () => {
  it("finds only the top-level id", () => {
    expect(topLevelId('{"jsonrpc":"2.0","id":7,"method":"x"')).toBe(7);
    expect(topLevelId('{"params":{"id":1},"id":"abc","method"')).toBe("abc");
    expect(topLevelId('{"method":"id","params":{"id":3}')).toBeUndefined();
    // An id JSON can't read (a bad escape, a raw control character): none, and no throw.
    expect(topLevelId('{"jsonrpc":"2.0","id":"\\q","method":"x"')).toBeUndefined();
    expect(topLevelId('{"jsonrpc":"2.0","id":"a\tb","method":"x"')).toBeUndefined();
  });

  /** What a LineSplitter of bound `max` hands on of the bytes in `chunks`, then their end. */
  const split = (chunks: readonly Uint8Array[], max: number): string => {
    const lines = new LineSplitter(max);
    const decoder = new TextDecoder();
    let out = "";
    const take = (line: Uint8Array) => void (out += decoder.decode(line));
    for (const chunk of chunks) if (chunk.length) lines.push(chunk, take);
    lines.end(take);
    return out;
  };

  it("passes lines under the limit and stands a small refusal in for one over it", () => {
    const input = new TextEncoder().encode(`{"a":1}\n{"jsonrpc":"2.0","id":5,"method":"m","params":"${"x".repeat(200)}"}\n{"b":2}\n`);
    const chunks = [input.slice(0, 30), input.slice(30, 120), input.slice(120)];
    const lines = split(chunks, 100).trim().split("\n");
    expect(lines[0]).toBe('{"a":1}');
    expect(JSON.parse(lines[1] ?? "")).toEqual({ jsonrpc: "2.0", id: 5, method: "_link/oversized", params: { bytes: 249, max: 100 } });
    expect(lines[2]).toBe('{"b":2}');
  });

  it("hands on each line within the limit byte for byte and one stand-in for each over it, however the bytes come in pieces", () => {
    const max = 48;
    const encoder = new TextEncoder();
    // Any text but a newline: characters of one to four bytes, so a cut may fall inside one.
    const anyText = fc.string({ unit: "binary", maxLength: 70 }).map((t) => t.replaceAll("\n", " "));
    // And lines of the limit's size, give or take a byte.
    const lineText = fc.oneof(anyText, fc.integer({ min: max - 2, max: max + 2 }).map((n) => "x".repeat(n)));
    fc.assert(
      fc.property(fc.array(lineText, { minLength: 1, maxLength: 8 }), fc.boolean(), fc.array(fc.nat({ max: 2000 }), { maxLength: 12 }), (texts, ended, cuts) => {
        const bytes = encoder.encode(texts.join("\n") + (ended ? "\n" : ""));
        const stops = [...new Set(cuts.map((c) => c % (bytes.length + 1)))].sort((a, b) => a - b);
        const pieces = [0, ...stops, bytes.length].slice(1).map((end, i, all) => bytes.slice(i === 0 ? 0 : (all[i - 1] as number), end));
        const got = split(pieces, max).split("\n");
        const size = (text: string) => encoder.encode(text).length;
        // The last text, unended and empty, is no line at all.
        const lines = ended || texts.at(-1) !== "" ? texts : texts.slice(0, -1);
        // Each line handed on ends with its newline, but an unended last one within the limit (a stand-in always does).
        const last = lines.at(-1);
        if (ended || texts.at(-1) === "" || (last !== undefined && size(last) > max)) expect(got.pop()).toBe("");
        expect(got).toHaveLength(lines.length);
        lines.forEach((text, i) => {
          if (size(text) <= max) expect(got[i]).toBe(new TextDecoder().decode(encoder.encode(text)));
          else {
            // Under the id the line's head holds, should a text hold one; else not a request at all.
            const stand: unknown = JSON.parse(got[i] ?? "");
            if (typeof stand === "string") expect(stand).toBe(`message of ${size(text)} bytes is over the limit of ${max}`);
            else expect(stand).toMatchObject({ method: "_link/oversized", params: { bytes: size(text), max } });
          }
        });
      }),
      { numRuns: 500 },
    );
  });

  it("hands on a line of any bytes as it is when they are UTF-8 text, and a stand-in the agent refuses when they are not", () => {
    const lineBytes = fc.uint8Array({ maxLength: 40 }).map((b) => b.map((x) => (x === 0x0a ? 0x20 : x)));
    const withId = fc.tuple(lineBytes, fc.integer({ min: 0, max: 999 })).map(([b, id]) => Buffer.concat([Buffer.from(`{"jsonrpc":"2.0","id":${id},"method":"m","params":"`), b, Buffer.from('"}')]));
    fc.assert(
      fc.property(fc.oneof(lineBytes, withId), (bytes) => {
        const lines: Uint8Array[] = [];
        const splitter = new LineSplitter(1024);
        splitter.push(Buffer.concat([bytes, Buffer.of(0x0a)]), (l) => void lines.push(l));
        splitter.end((l) => void lines.push(l));
        expect(lines).toHaveLength(1);
        const got = Buffer.from(lines[0] as Uint8Array);
        if (isUtf8(bytes)) expect(got.equals(Buffer.concat([bytes, Buffer.of(0x0a)])) || JSON.parse(got.toString()).method === "_link/too-deep").toBe(true);
        else {
          const stand: unknown = JSON.parse(got.toString());
          if (typeof stand === "string") expect(stand).toBe("message is not UTF-8 text");
          else expect(stand).toMatchObject({ jsonrpc: "2.0", method: "_link/not-text", id: expect.any(Number) });
        }
      }),
      { numRuns: 500 },
    );
  });

  it("answers one over the limit under its id wherever the id stands in it, however it comes in pieces", async () => {
    const id = fc.oneof(fc.integer(), fc.string({ maxLength: 20 }), fc.double({ noNaN: true, noDefaultInfinity: true }));
    const member = fc.tuple(fc.string({ maxLength: 6 }).filter((k) => k !== "id"), fc.jsonValue({ maxDepth: 3 }));
    fc.assert(
      await fc.asyncProperty(id, fc.array(member, { maxLength: 4 }), fc.nat({ max: 5 }), fc.nat({ max: 9000 }), fc.array(fc.nat({ max: 400 }), { maxLength: 8 }), async (idValue, members, at, pad, cuts) => {
        const entries: [string, unknown][] = [...members, ["params", { pad: "p".repeat(pad), nested: { id: "not this one" } }]];
        entries.splice(at % (entries.length + 1), 0, ["id", idValue]);
        const text = `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${JSON.stringify(v)}`).join(",")}}`;
        const expected: unknown = JSON.parse(text).id;
        const bytes = new TextEncoder().encode(`${text}\n`);
        const max = 64;
        fc.pre(bytes.length > max + 1);
        // The line in pieces cut where the fuzzer says.
        const stops = [...new Set(cuts.map((c) => c % bytes.length))].sort((a, b) => a - b);
        const pieces = [0, ...stops, bytes.length].slice(1).map((end, i, all) => bytes.slice(i === 0 ? 0 : (all[i - 1] as number), end));
        const stand: unknown = JSON.parse(split(pieces, max).trim());
        expect(stand).toMatchObject({ id: expected, method: "_link/oversized" });
      }),
      { numRuns: 300 },
    );
  });
});

describe("call names", () => {
  /** The rule as a replay first had it: each id the smallest of id, id#2, id#3, … not given yet. */
  const smallestFree = (ids: readonly string[]): string[] => {
    const used = new Set<string>();
    return ids.map((id) => {
      let out = id;
      for (let i = 2; used.has(out); i++) out = `${id}#${i}`;
      used.add(out);
      return out;
    });
  };
  const anId = fc.constantFrom("a", "b", "a#2", "a#3", "b#2", "a#2#2", "");

  it("are each the smallest free suffix, and a turn's names go on from the conversation's without changing them", () => {
    fc.assert(
      fc.property(fc.array(anId, { maxLength: 40 }), fc.nat(), (ids, cut) => {
        const at = ids.length === 0 ? 0 : cut % (ids.length + 1);
        const whole = new CallNames();
        expect(ids.map((id) => whole.name(id))).toEqual(smallestFree(ids));
        // Seeded with the first `at`, then on from them: the same names; the seed is left as it was.
        const before = new CallNames();
        const first = ids.slice(0, at).map((id) => before.name(id));
        const turn = before.after();
        expect([...first, ...ids.slice(at).map((id) => turn.name(id))]).toEqual(smallestFree(ids));
        expect(before.size).toBe(at);
        const again = before.after();
        expect(ids.slice(at).map((id) => again.name(id))).toEqual(smallestFree(ids).slice(at));
      }),
    );
  });

  it("go on past an id used ten thousand times, in a turn's names as in the conversation's", () => {
    const names = new CallNames();
    for (let i = 0; i < 10_000; i++) names.name("call_0");
    expect(names.after().name("call_0")).toBe("call_0#10001");
  });
});

describe("a turn's calls and the conversation's call names", () => {
  const through = paths({ dir: "/nowhere" }).conversation("t");
  const asked: TurnEvent = { type: "asked", after: 0, through };
  const call: TurnEvent = { type: "tool_call", id: "c", name: "x__y", arguments: {} };
  const shownIds = (sent: SessionUpdate[]) => sent.map((u) => [u.sessionUpdate, "toolCallId" in u ? u.toolCallId : u.sessionUpdate === "agent_message_chunk" && u.content.type === "text" ? u.content.text : ""]);
  const names = (...ids: string[]) => {
    const n = new CallNames();
    for (const id of ids) n.name(id);
    return n;
  };

  it("shows a call once the names are read, named on from them, in order with all that came after it", async () => {
    const turns = new Turns();
    const sent: SessionUpdate[] = [];
    const read = deferred<CallNames>();
    const reported = deferred();
    const start: StartTurn = async (_m, _s, _signal, listener) => {
      listener(asked);
      listener({ type: "text", delta: "a" });
      listener(call);
      listener({ type: "tool_result", id: "c", name: "x__y", status: "completed", text: "ok" });
      listener({ type: "text", delta: "b" });
      reported.resolve();
      return { stop: "end_turn", modelMs: 0 };
    };
    const answer = turns.prompt("k", { text: "hi" }, "all", start, { send: (u) => sent.push(u) }, undefined, () => read.promise);
    await reported.promise;
    expect(shownIds(sent)).toEqual([["agent_message_chunk", "a"]]);
    read.resolve(names("c"));
    await expect(answer).resolves.toMatchObject({ stop: "end_turn" });
    expect(shownIds(sent)).toEqual([
      ["agent_message_chunk", "a"],
      ["tool_call", "c#2"],
      ["tool_call_update", "c#2"],
      ["agent_message_chunk", "b"],
    ]);
  });

  it("answers a turn that showed no call, or was stopped, without waiting for names never read", async () => {
    const turns = new Turns();
    const sent: SessionUpdate[] = [];
    const never = () => new Promise<CallNames>(() => undefined);
    const plain: StartTurn = async (_m, _s, _signal, listener) => {
      listener(asked);
      listener({ type: "text", delta: "a" });
      return { stop: "end_turn", modelMs: 0 };
    };
    await expect(turns.prompt("plain", { text: "hi" }, "all", plain, { send: (u) => sent.push(u) }, undefined, never)).resolves.toMatchObject({ stop: "end_turn" });
    const calling: StartTurn = async (_m, _s, signal, listener) => {
      listener(asked);
      listener(call);
      await new Promise((resolve) => signal.addEventListener("abort", resolve));
      return { stop: "cancelled", modelMs: 0 };
    };
    sent.length = 0;
    const answer = turns.prompt("calling", { text: "hi" }, "all", calling, { send: (u) => sent.push(u) }, undefined, never);
    await new Promise((resolve) => setImmediate(resolve));
    expect(turns.cancel("calling")).toBe(true);
    await expect(answer).resolves.toMatchObject({ stop: "cancelled" });
    // The held call is shown, named as the turn's own, and closed as failed.
    expect(sent.map((u) => [u.sessionUpdate, "toolCallId" in u ? u.toolCallId : "", "status" in u ? u.status : ""])).toEqual([
      ["tool_call", "c", "in_progress"],
      ["tool_call_update", "c", "failed"],
    ]);
  });
});

describe("a session shown again while its turn runs, on the connection that prompted it", () => {
  it("holds the turn's updates back until the load has shown the conversation, then shows what the turn streamed so far and the rest, and answers the prompt after them", async () => {
    const go = deferred();
    const { agent, state } = setup(async (_input, listener) => {
      listener({ type: "text", delta: "live 1" });
      await go.promise;
      listener({ type: "text", delta: "live 2" });
      return done();
    });
    const conv = paths(agent).conversation("long");
    ensureConversation(conv);
    // Long enough to be shown in several lots, the event loop let go between.
    const t = "2026-01-01T00:00:00.000Z";
    for (let i = 0; i < 600; i++) {
      writeFileSync(conv.event(2 * i + 1), `${JSON.stringify({ v: 1, kind: "message", role: "user", time: t, text: `q${i}`, header: "" })}\n`);
      writeFileSync(conv.event(2 * i + 2), `${JSON.stringify({ v: 1, kind: "message", role: "assistant", time: t, text: `a${i}`, model: "m", provider: "p", latency_ms: 1, stop: "end_turn" })}\n`);
    }
    const order: string[] = [];
    const conn = acp
      .client()
      .onNotification(acp.methods.client.session.update, ({ params }) => {
        const u = params.update;
        order.push(u.sessionUpdate === "agent_message_chunk" && u.content.type === "text" && u.content.text.startsWith("live") ? u.content.text : u.sessionUpdate);
        // The load under way: the turn goes on.
        if (u.sessionUpdate === "user_message_chunk") go.resolve();
      })
      .connect(createAgentApp(state, new Outbox()));
    await conn.agent.request(acp.methods.agent.initialize, { protocolVersion: 1, clientCapabilities: {} });
    await conn.agent.request(acp.methods.agent.session.resume, { sessionId: "long", cwd: "/", mcpServers: [] });
    const prompting = conn.agent.request(acp.methods.agent.session.prompt, { sessionId: "long", prompt: [{ type: "text", text: "now" }] }).then(() => order.push("answer"));
    while (!order.includes("live 1")) await new Promise((resolve) => setImmediate(resolve));
    await Promise.all([prompting, conn.agent.request(acp.methods.agent.session.load, { sessionId: "long", cwd: "/", mcpServers: [] })]);
    const first = order.indexOf("user_message_chunk");
    const shown = order.indexOf("available_commands_update", first);
    expect(order.slice(first, shown).filter((u) => u === "user_message_chunk")).toHaveLength(600);
    expect(order.slice(first, shown).filter((u) => u.startsWith("live"))).toEqual([]);
    // The load showed the conversation on disk; the answer on its way follows it whole: its text
    // streamed before the load, then the rest, then the prompt's answer.
    const after = order.slice(shown + 1);
    expect(after.filter((u) => u.startsWith("live")).join("")).toBe("live 1live 2");
    expect(after.at(-1)).toBe("answer");
    conn.close();
  });
});

describe("a session shown again while its turn runs a call", () => {
  it("shows the call the turn runs in progress, not failed, and once the turn is over, a call left without its result as failed", async () => {
    const go = deferred();
    const started = deferred();
    const t = "2026-01-01T00:00:00.000Z";
    const call = (id: string): Event => ({ v: 1, kind: "message", role: "assistant", time: t, text: "", model: "m", provider: "p", latency_ms: 1, stop: "tool_calls", tool_calls: [{ id, name: "x__y", arguments: "{}" }] });
    // The running turn writes its question and its call, as a turn does, then runs the call.
    const { agent, state } = setup(async (input, listener) => {
      const through = paths(input.agent).conversation(input.thread);
      listener({ type: "asked", after: 2, through });
      for (const event of [{ v: 1, kind: "message", role: "user", time: t, text: "now", header: "" } as Event, call("running")]) listener({ type: "event", n: await appendEvent(through, event), event });
      listener({ type: "tool_call", id: "running", name: "x__y", arguments: {} });
      started.resolve();
      await go.promise;
      return done();
    });
    const conv = paths(agent).conversation("busy");
    // A call an earlier turn left without its result.
    for (const event of [{ v: 1, kind: "message", role: "user", time: t, text: "before", header: "" } as Event, call("old")]) await appendEvent(conv, event);
    const prompter = await connect(state);
    await prompter.agent.request(acp.methods.agent.session.resume, { sessionId: "busy", cwd: "/", mcpServers: [] });
    const prompting = prompter.agent.request(acp.methods.agent.session.prompt, { sessionId: "busy", prompt: [{ type: "text", text: "go" }] });
    await started.promise;
    const statuses = async () => {
      const c = await connect(state);
      await c.agent.request(acp.methods.agent.session.load, { sessionId: "busy", cwd: "/", mcpServers: [] });
      c.close();
      return c.updates.map((n) => n.update).flatMap((u) => (u.sessionUpdate === "tool_call" || u.sessionUpdate === "tool_call_update" ? [[u.sessionUpdate, u.toolCallId, u.status]] : []));
    };
    expect(await statuses()).toEqual([
      ["tool_call", "old", "failed"],
      ["tool_call_update", "old", "failed"],
      ["tool_call", "running", "in_progress"],
    ]);
    go.resolve();
    await prompting;
    expect(await statuses()).toEqual([
      ["tool_call", "old", "failed"],
      ["tool_call_update", "old", "failed"],
      ["tool_call", "running", "failed"],
      ["tool_call_update", "running", "failed"],
    ]);
    prompter.close();
  });
});

/**
 * What a client shows of a session, from its updates in order: each run of the owner's text and of
 * the agent's, and each tool call with its last status; a call announced twice is marked so.
 */
function shownView(updates: readonly SessionUpdate[]): string[] {
  const view: string[] = [];
  const calls = new Map<string, number>();
  let run: "user" | "agent" | undefined;
  for (const u of updates) {
    if ((u.sessionUpdate === "user_message_chunk" || u.sessionUpdate === "agent_message_chunk") && u.content.type === "text") {
      const who = u.sessionUpdate === "user_message_chunk" ? "user" : "agent";
      if (run === who) view[view.length - 1] += u.content.text;
      else view.push(`${who}: ${u.content.text}`);
      run = who;
    } else if (u.sessionUpdate === "tool_call") {
      run = undefined;
      if (calls.has(u.toolCallId)) view.push(`announced again: ${u.toolCallId}`);
      calls.set(u.toolCallId, view.length);
      view.push(`call ${u.toolCallId}: ${u.status ?? ""}`);
    } else if (u.sessionUpdate === "tool_call_update") {
      const at = calls.get(u.toolCallId);
      if (at === undefined) view.push(`update of no call: ${u.toolCallId}`);
      else view[at] = `call ${u.toolCallId}: ${u.status ?? ""}`;
    }
  }
  return view;
}

describe("a session loaded on another connection while its turn runs", () => {
  it("follows the turn from where it stands, wherever it is loaded: shown whole, once, as a load after the turn shows it", async () => {
    const t = "2026-01-01T00:00:00.000Z";
    const question: Event = { v: 1, kind: "message", role: "user", time: t, text: "look it up", header: "" };
    const asking: Event = { v: 1, kind: "message", role: "assistant", time: t, text: "Let me look.", model: "m", provider: "p", latency_ms: 1, stop: "tool_calls", tool_calls: [{ id: "c1", name: "x__y", arguments: "{}" }] };
    const found: Event = { v: 1, kind: "tool_result", time: t, call_id: "c1", tool: "x__y", text: "found it", error: false };
    const answer: Event = { v: 1, kind: "message", role: "assistant", time: t, text: "It is done.", model: "m", provider: "p", latency_ms: 1, stop: "end_turn" };
    // The turn's steps, each as a turn takes it: it writes an event, then reports it.
    const steps = (conv: ConversationPaths, listener: TurnListener): (() => Promise<void>)[] => {
      const write = async (event: Event) => listener({ type: "event", n: await appendEvent(conv, event), event });
      return [
        async () => listener({ type: "asked", after: readEventsFrom(conv, 1).length, through: conv }),
        () => write(question),
        async () => listener({ type: "text", delta: "Let me " }),
        async () => listener({ type: "text", delta: "look." }),
        () => write(asking),
        async () => listener({ type: "tool_call", id: "c1", name: "x__y", arguments: {} }),
        () => write(found),
        async () => listener({ type: "tool_result", id: "c1", name: "x__y", status: "completed", text: "found it" }),
        async () => listener({ type: "text", delta: "It is " }),
        async () => listener({ type: "text", delta: "done." }),
        () => write(answer),
      ];
    };
    const count = steps(paths({ dir: "/" }).conversation("x"), () => undefined).length;
    for (let at = 0; at <= count; at++) {
      const gate = deferred();
      const paused = deferred();
      const { agent, state } = setup(async (input, listener) => {
        const all = steps(paths(input.agent).conversation(input.thread), listener);
        for (let i = 0; i < all.length; i++) {
          if (i === at) {
            paused.resolve();
            await gate.promise;
          }
          await (all[i] as () => Promise<void>)();
        }
        if (at === all.length) {
          paused.resolve();
          await gate.promise;
        }
        return done();
      });
      // An earlier turn, on disk before this one.
      const first = paths(agent).conversation("s");
      await appendEvent(first, { v: 1, kind: "message", role: "user", time: t, text: "hello", header: "" });
      await appendEvent(first, { v: 1, kind: "message", role: "assistant", time: t, text: "Hi.", model: "m", provider: "p", latency_ms: 1, stop: "end_turn" });
      const a = await connect(state);
      await a.agent.request(acp.methods.agent.session.resume, { sessionId: "s", cwd: "/", mcpServers: [] });
      const prompting = a.agent.request(acp.methods.agent.session.prompt, { sessionId: "s", prompt: [{ type: "text", text: "look it up" }] });
      await paused.promise;
      const b = await connect(state);
      await b.agent.request(acp.methods.agent.session.load, { sessionId: "s", cwd: "/", mcpServers: [] });
      gate.resolve();
      await prompting;
      const whole = ["user: hello", "agent: Hi.", "user: look it up", "agent: Let me look.", "call c1: completed", "agent: It is done."];
      const followed = () => shownView(b.updates.map((n) => n.update));
      for (let i = 0; i < 200 && followed().join("\n") !== whole.join("\n"); i++) await new Promise((resolve) => setTimeout(resolve, 5));
      // Nothing shown twice after it either.
      await new Promise((resolve) => setTimeout(resolve, 20));
      expect({ at, view: followed() }).toEqual({ at, view: whole });
      // A load after the turn shows the same.
      const c = await connect(state);
      await c.agent.request(acp.methods.agent.session.load, { sessionId: "s", cwd: "/", mcpServers: [] });
      expect({ at, view: shownView(c.updates.map((n) => n.update)) }).toEqual({ at, view: whole });
      for (const x of [a, b, c]) x.close();
    }
  });
});

describe("a session loaded while its turn runs and a command is written beside it", () => {
  it("shows the command another writer added after where the turn stood, as a load after the turn does", async () => {
    const t = "2026-01-01T00:00:00.000Z";
    const gate = deferred();
    const paused = deferred();
    const { state } = setup(async (input, listener) => {
      const conv = paths(input.agent).conversation(input.thread);
      const write = async (event: Event) => listener({ type: "event", n: await appendEvent(conv, event), event });
      listener({ type: "asked", after: readEventsFrom(conv, 1).length, through: conv });
      await write({ v: 1, kind: "message", role: "user", time: t, text: "look it up", header: "" });
      listener({ type: "text", delta: "Let me " });
      paused.resolve();
      await gate.promise;
      listener({ type: "text", delta: "look." });
      await write({ v: 1, kind: "message", role: "assistant", time: t, text: "Let me look.", model: "m", provider: "p", latency_ms: 1, stop: "end_turn" });
      return done();
    });
    const a = await connect(state);
    const { sessionId } = await a.agent.request(acp.methods.agent.session.new, { cwd: "/", mcpServers: [] });
    const prompting = a.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "look it up" }] });
    await paused.promise;
    // The owner chooses a model while the turn runs: written at once, without the turn's lock.
    await a.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "/model:set other-model" }] });
    const b = await connect(state);
    await b.agent.request(acp.methods.agent.session.load, { sessionId, cwd: "/", mcpServers: [] });
    gate.resolve();
    await prompting;
    // (Two messages of the owner's one after the other read as one run of its text.)
    const whole = ["user: look it up/model:set other-model", "agent: Let me look."];
    for (let i = 0; i < 200 && !shownView(b.updates.map((n) => n.update)).includes("agent: Let me look."); i++) await new Promise((resolve) => setTimeout(resolve, 5));
    const c = await connect(state);
    await c.agent.request(acp.methods.agent.session.load, { sessionId, cwd: "/", mcpServers: [] });
    expect(shownView(c.updates.map((n) => n.update))).toEqual(whole);
    expect(shownView(b.updates.map((n) => n.update))).toEqual(whole);
    for (const x of [a, b, c]) x.close();
  });
});

describe("a session loaded when a turn of it begins on another connection during the load", () => {
  it("shows what was there when the load began, then that turn from its start, once", async () => {
    const t = "2026-01-01T00:00:00.000Z";
    const { agent, state } = setup(async (input, listener) => {
      const conv = paths(input.agent).conversation(input.thread);
      const write = async (event: Event) => listener({ type: "event", n: await appendEvent(conv, event), event });
      listener({ type: "asked", after: readEventsFrom(conv, 1).length, through: conv });
      await write({ v: 1, kind: "message", role: "user", time: t, text: "meanwhile", header: "" });
      listener({ type: "text", delta: "Seen " });
      listener({ type: "text", delta: "it." });
      await write({ v: 1, kind: "message", role: "assistant", time: t, text: "Seen it.", model: "m", provider: "p", latency_ms: 1, stop: "end_turn" });
      return done();
    });
    const conv = paths(agent).conversation("long");
    ensureConversation(conv);
    // Long enough to be shown in several lots, the event loop let go between.
    for (let i = 0; i < 600; i++) {
      writeFileSync(conv.event(2 * i + 1), `${JSON.stringify({ v: 1, kind: "message", role: "user", time: t, text: `q${i}`, header: "" })}\n`);
      writeFileSync(conv.event(2 * i + 2), `${JSON.stringify({ v: 1, kind: "message", role: "assistant", time: t, text: `a${i}`, model: "m", provider: "p", latency_ms: 1, stop: "end_turn" })}\n`);
    }
    const a = await connect(state);
    await a.agent.request(acp.methods.agent.session.resume, { sessionId: "long", cwd: "/", mcpServers: [] });
    let prompting: Promise<unknown> | undefined;
    const seen: SessionUpdate[] = [];
    const b = acp
      .client()
      .onNotification(acp.methods.client.session.update, ({ params }) => {
        seen.push(params.update);
        // The load under way: another connection's prompt begins a turn.
        if (!prompting && params.update.sessionUpdate === "user_message_chunk") prompting = a.agent.request(acp.methods.agent.session.prompt, { sessionId: "long", prompt: [{ type: "text", text: "meanwhile" }] });
      })
      .connect(createAgentApp(state, new Outbox()));
    await b.agent.request(acp.methods.agent.initialize, { protocolVersion: 1, clientCapabilities: {} });
    await b.agent.request(acp.methods.agent.session.load, { sessionId: "long", cwd: "/", mcpServers: [] });
    await prompting;
    for (let i = 0; i < 200 && !shownView(seen).includes("agent: Seen it."); i++) await new Promise((resolve) => setTimeout(resolve, 5));
    const view = shownView(seen);
    expect(view).toHaveLength(1202);
    expect(view.slice(0, 2)).toEqual(["user: q0", "agent: a0"]);
    expect(view.slice(-4)).toEqual(["user: q599", "agent: a599", "user: meanwhile", "agent: Seen it."]);
    b.close();
    a.close();
  });
});

describe("a session whose load fails while its turn runs", () => {
  const t = "2026-01-01T00:00:00.000Z";
  const user = (text: string): Event => ({ v: 1, kind: "message", role: "user", time: t, text, header: "" });
  const said = (text: string): Event => ({ v: 1, kind: "message", role: "assistant", time: t, text, model: "m", provider: "p", latency_ms: 1, stop: "end_turn" });

  /** An app whose turn writes its message, streams "Let me ", stops until `go`, then streams "look." and writes its answer. */
  function streaming() {
    const gate = deferred();
    const paused = deferred();
    const app = setup(async (input, listener) => {
      const conv = paths(input.agent).conversation(input.thread);
      const write = async (event: Event) => listener({ type: "event", n: await appendEvent(conv, event), event });
      listener({ type: "asked", after: readEventsFrom(conv, 1).length, through: conv });
      await write(user("look it up"));
      listener({ type: "text", delta: "Let me " });
      paused.resolve();
      await gate.promise;
      listener({ type: "text", delta: "look." });
      await write(said("Let me look."));
      return done();
    });
    return { ...app, paused: paused.promise, go: () => gate.resolve() };
  }

  /** Makes event `n` a link, as another process reading the conversation finds it (this one's parsed events forgotten): a load refuses it. */
  function spoil(conv: ConversationPaths, n: number): void {
    rmSync(conv.event(n));
    symlinkSync(conv.event(n + 1), conv.event(n));
    forgetEvents();
  }

  const load = (c: Awaited<ReturnType<typeof connect>>, sessionId: string) => c.agent.request(acp.methods.agent.session.load, { sessionId, cwd: "/", mcpServers: [] });

  it("is shown nothing of that turn on a connection whose load failed, its prompter all of it", async () => {
    const { agent, state, paused, go } = streaming();
    const conv = paths(agent).conversation("s");
    await appendEvent(conv, user("hello"));
    await appendEvent(conv, said("Hi."));
    const a = await connect(state);
    await a.agent.request(acp.methods.agent.session.resume, { sessionId: "s", cwd: "/", mcpServers: [] });
    const prompting = a.agent.request(acp.methods.agent.session.prompt, { sessionId: "s", prompt: [{ type: "text", text: "look it up" }] });
    await paused;
    spoil(conv, 1);
    const b = await connect(state);
    await expect(load(b, "s")).rejects.toThrow();
    // The prompter's own load fails too: it is still shown its turn, once.
    await expect(load(a, "s")).rejects.toThrow();
    go();
    await prompting;
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(shownView(a.updates.map((n) => n.update))).toEqual(["agent: Let me look."]);
    expect(shownView(b.updates.map((n) => n.update))).toEqual([]);
    a.close();
    b.close();
  });
});

describe("_meta.link, parsed", () => {
  it("is the same for no link and a null one, parsed once; one given is parsed each time, and one for another agent refused", () => {
    const none = parseLink(PromptLink, undefined, "me");
    expect(none).toEqual({});
    expect(Object.isFrozen(none)).toBe(true);
    expect(parseLink(PromptLink, {}, "me")).toBe(none);
    expect(parseLink(PromptLink, { link: null }, "me")).toBe(none);
    expect(parseLink(NewSessionLink, undefined, "me")).not.toBe(none);
    expect(parseLink(PromptLink, { link: { channel: "telegram" } }, "me")).toEqual({ channel: "telegram" });
    expect(parseLink(PromptLink, { link: { agent: "me", channel: "a" } }, ["me", "id-1"])).toEqual({ agent: "me", channel: "a" });
    expect(() => parseLink(PromptLink, { link: { agent: "someone-else" } }, "me")).toThrow(ParamsError);
    expect(() => parseLink(PromptLink, { link: { channel: 7 } }, "me")).toThrow(ParamsError);
    // Not kept from a link that was given: the next prompt without one is still none.
    expect(parseLink(PromptLink, undefined, "me")).toBe(none);
  });
});
