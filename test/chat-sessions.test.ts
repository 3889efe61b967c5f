// A session of one conversation of a chat, <thread>~<name>: session/resume and session/close over
// the built daemon find the conversation, also one another process began after this one first
// looked, and answer one the chat has not -32002; and what a process reads of a chat for them once
// it has read it: only the events written since, never the chat's log again.
import { renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";
import * as acp from "@agentclientprotocol/sdk";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { SessionNotFound, Sessions } from "../acp/sessions.js";
import type { Event } from "../protocol/index.js";
import { ensureConversation, forgetEvents, paths, readStats, writeMark, type ConversationPaths } from "../store/index.js";
import { configure, daemonTestHooks, scriptedSettings, startDaemon, stdioClient, tempDir, watched, type Client } from "./acp-client.js";
import { lastUserText, type ModelServer } from "./model-server.js";
import { BIN } from "./fixtures/built.js";

let server: ModelServer;
const cleanup = daemonTestHooks([BIN, "dist/acp/sessions.js", "dist/turn/history.js"], (s) => (server = s));

const quiet = { info: () => undefined, warn: () => undefined, error: () => undefined };
const time = "2026-01-01T00:00:00.000Z";
const THREAD = "20260101-000000-0000abcd";

const user = (text: string): Event => ({ v: 1, kind: "message", role: "user", text, header: "", time });
const answer = (text: string): Event => ({ v: 1, kind: "message", role: "assistant", text, time, model: "m", provider: "p", latency_ms: 1, stop: "end_turn" });
const command = (name: string, more: { conversation?: string; model?: string }): Event => ({ v: 1, kind: "command", name, time, ...more }) as Event;

/** A chat's event files written straight to its folder, from number `from` on (as another process's turns would, faster). */
function writeChat(conv: ConversationPaths, events: readonly Event[], from = 1): void {
  ensureConversation(conv);
  events.forEach((event, i) => writeFileSync(conv.event(from + i), `${JSON.stringify(event)}\n`, { mode: 0o600 }));
}

/** A chat of two conversations: `side` begun at its third event, with a model of its own, then `main` again. */
function twoConversations(turns = 1): Event[] {
  const events = [user("hello"), answer("hi"), command("/chat:create", { conversation: "side" }), command("/model:set", { model: "side-model" }), user("aside"), answer("sure")];
  events.push(command("/chat:resume", { conversation: "main" }));
  for (let i = 0; i < turns; i++) events.push(user(`question ${i}`), answer(`answer ${i}`));
  return events;
}

function agentDir(): string {
  const dir = tempDir("lnk-chat-sessions-");
  cleanup.push(() => dir.remove());
  configure(dir.path, scriptedSettings(server.url));
  return dir.path;
}

async function daemon(dir: string): Promise<Client> {
  return stdioClient(watched(startDaemon(["--agent", dir]), cleanup), cleanup);
}

/** A JSON-RPC answer as it is written: the SDK's client takes -32002 to session/close for a success. */
const Answer = z.object({ id: z.number(), result: z.unknown().optional(), error: z.object({ code: z.number(), message: z.string() }).loose().optional() }).loose();
type Answer = z.infer<typeof Answer>;

/** A daemon of the agent in `dir` asked by plain JSON-RPC lines on its stdio, initialized. */
async function plainDaemon(dir: string): Promise<(method: string, params: unknown) => Promise<Answer>> {
  const d = watched(startDaemon(["--agent", dir]), cleanup);
  const waiting = new Map<number, (answer: Answer) => void>();
  createInterface({ input: d.child.stdout! }).on("line", (line) => {
    const answer = Answer.safeParse(JSON.parse(line));
    if (answer.success) waiting.get(answer.data.id)?.(answer.data);
  });
  let next = 0;
  const call = (method: string, params: unknown) =>
    new Promise<Answer>((resolve) => {
      const id = ++next;
      waiting.set(id, resolve);
      d.child.stdin!.write(`${JSON.stringify({ jsonrpc: "2.0", id, method, params })}\n`);
    });
  expect((await call("initialize", { protocolVersion: acp.PROTOCOL_VERSION, clientCapabilities: {} })).result).toBeDefined();
  return call;
}

/** The model a session was opened with (its config option's value). */
const modelOf = (answered: unknown) => z.object({ configOptions: z.array(z.object({ currentValue: z.unknown() }).loose()) }).loose().parse(answered).configOptions[0]?.currentValue;
/** What a session id naming no conversation is answered, as any session this agent has not is. */
const notFound = (sessionId: string) => ({ error: { code: -32002, message: `Resource not found: no session ${JSON.stringify(sessionId)}`, data: { sessionId } } });

describe("a session of one conversation of a chat", { timeout: 60_000 }, () => {
  it("is resumed and closed while its conversation is there, also one another process began after this one looked; one not there is answered -32002", async () => {
    const dir = agentDir();
    const conv = paths({ dir }).conversation(THREAD);
    writeChat(conv, twoConversations());
    const side = `${THREAD}~side`;
    const later = `${THREAD}~later`;
    const a = await plainDaemon(dir);
    const resume = (sessionId: string) => a("session/resume", { sessionId, cwd: dir, mcpServers: [] });
    const close = (sessionId: string) => a("session/close", { sessionId });
    expect(modelOf((await resume(side)).result)).toBe("side-model");
    expect(modelOf((await resume(`${THREAD}~main`)).result)).toBe("scripted-model");
    expect(await resume(later)).toMatchObject(notFound(later));
    expect(await close(later)).toMatchObject(notFound(later));
    expect(await close(side)).toMatchObject({ result: {} });

    // Another process begins `later`, and chooses side's model again, after this one looked.
    const b = await daemon(dir);
    const prompted = await b.agent.request(acp.methods.agent.session.prompt, { sessionId: THREAD, prompt: [{ type: "text", text: "/chat:create later" }] });
    expect(prompted).toMatchObject({ stopReason: "end_turn" });
    const chosen = modelOf(await b.agent.request(acp.methods.agent.session.setConfigOption, { sessionId: side, configId: "model", value: "newer-model" }));
    expect(chosen).toMatch(/newer-model/);
    expect(modelOf((await resume(later)).result)).toBe("scripted-model");
    expect(await close(later)).toMatchObject({ result: {} });
    expect(modelOf((await resume(side)).result)).toBe(chosen);
    expect(await close(side)).toMatchObject({ result: {} });
    expect(await close(`${THREAD}~elsewhere`)).toMatchObject(notFound(`${THREAD}~elsewhere`));

    // The chat's folder made again, another chat by its name (moved in, say): its own conversations.
    const gone = join(dir, "gone");
    renameSync(conv.dir, gone);
    writeChat(conv, [user("anew"), answer("again"), command("/chat:create", { conversation: "other" })]);
    rmSync(gone, { recursive: true });
    expect(await resume(side)).toMatchObject(notFound(side));
    expect(await close(later)).toMatchObject(notFound(later));
    expect(modelOf((await resume(`${THREAD}~other`)).result)).toBe("scripted-model");
    expect(await close(`${THREAD}~other`)).toMatchObject({ result: {} });
  });
});

describe("a running turn of one conversation of a chat", { timeout: 60_000 }, () => {
  it("is stopped by session/cancel and by session/close of its session, once that session is open", async () => {
    const dir = agentDir();
    writeChat(paths({ dir }).conversation(THREAD), twoConversations());
    const side = `${THREAD}~side`;
    const c = await daemon(dir);
    await c.agent.request(acp.methods.agent.session.resume, { sessionId: side, cwd: dir, mcpServers: [] });
    // Once the model has the turn's request (the process asks the model of other things too).
    const ask = async (text: string) => {
      server.script({ text: "Too late.", delayMs: 30_000 });
      let seen = server.requests.length;
      const answer = c.agent.request(acp.methods.agent.session.prompt, { sessionId: side, prompt: [{ type: "text", text }] });
      while (!lastUserText(await server.waitForRequest(++seen)).endsWith(text));
      return { answer };
    };
    const cancelled = await ask("take your time");
    void c.agent.notify(acp.methods.agent.session.cancel, { sessionId: side });
    expect(await cancelled.answer).toMatchObject({ stopReason: "cancelled" });
    const closed = await ask("and again");
    await c.agent.request(acp.methods.agent.session.close, { sessionId: side });
    expect(await closed.answer).toMatchObject({ stopReason: "cancelled" });
  });
});

describe("what a process reads of a chat to find its conversations", () => {
  it("once it has read the chat, only the events written since: resume and close read none of its events again", () => {
    const dir = tempDir("lnk-chat-sessions-");
    cleanup.push(() => dir.remove());
    const agent = { dir: dir.path };
    const conv = paths(agent).conversation(THREAD);
    const events = twoConversations(1000);
    writeChat(conv, events);
    // What a turn of the chat leaves: its mark names the chat's current conversation.
    writeMark(conv, { v: 1, event: events.length - 1, time, tokens_before: 0, budget: 1000, conversation: "main" });
    const sessions = new Sessions(agent, quiet);
    // The connection that opens the sessions.
    const me = {};
    const side = `${THREAD}~side`;
    const later = `${THREAD}~later`;
    // The first look reads the chat through.
    expect(sessions.model(sessions.attach(me, side, "/work", []))).toBe("side-model");
    expect(sessions.model(sessions.attach(me, THREAD, "/work", []))).toBeUndefined();
    expect(() => sessions.close(me, later)).toThrow(SessionNotFound);

    // The process let go of the chat's events, as it does of a chat longer than it keeps.
    forgetEvents();
    readStats.files = 0;
    expect(sessions.model(sessions.attach(me, side, "/work", []))).toBe("side-model");
    expect(sessions.model(sessions.attach(me, THREAD, "/work", []))).toBeUndefined();
    sessions.close(me, side);
    expect(() => sessions.close(me, later)).toThrow(SessionNotFound);
    expect(() => sessions.close(me, `${THREAD}~elsewhere`)).toThrow(SessionNotFound);
    expect(readStats.files).toBe(0);

    // Another process begins `later` and chooses its model: those two events are all that is read.
    writeChat(conv, [command("/chat:create", { conversation: "later" }), command("/model:set", { model: "later-model" })], events.length + 1);
    expect(sessions.named(later)).toEqual({ thread: THREAD, conversation: "later" });
    expect(readStats.files).toBe(2);
    sessions.close(me, later);
    expect(sessions.model({ id: later, thread: THREAD, conversation: "later", mcpServers: [] })).toBe("later-model");
    expect(sessions.model({ id: side, thread: THREAD, conversation: "side", mcpServers: [] })).toBe("side-model");
    expect(readStats.files).toBe(2);
  });
});
