// session/load of a long conversation: shown again a slice at a time, the event loop let go between
// (a request on the same process is answered meanwhile), none of its events kept, the updates the
// same as the whole conversation's replay; and the choices a conversation's commands made, counted on
// from the process's last count.
import { writeFileSync } from "node:fs";
import type { SessionUpdate } from "@agentclientprotocol/sdk";
import * as acp from "@agentclientprotocol/sdk";
import { afterEach, describe, expect, it } from "vitest";
import { CallNames } from "../acp/call-names.js";
import { replay, UNANSWERED } from "../acp/replay.js";
import { Sessions } from "../acp/sessions.js";
import type { Event, Numbered } from "../protocol/index.js";
import { appendEvent, cachedEventBytes, ensureConversation, forgetEvents, lastEventNumber, paths, readEventsFrom, writeMark, type ConversationPaths } from "../store/index.js";
import { conversationChoices, readConversation } from "../turn/history.js";
import { configure, openClient, scriptedSettings, startDaemon, stdioStream, tempDir, type Daemon } from "./acp-client.js";
import { startModelServer } from "./model-server.js";
import { assertBuilt, BIN } from "./fixtures/built.js";

const quiet = { info: () => undefined, warn: () => undefined, error: () => undefined };
/** The connection the sessions are opened and listed for. */
const client = {};
const cleanup: (() => unknown)[] = [];
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f();
});

const time = "2026-01-01T00:00:00.000Z";
const THREAD = "20260101-000000-0000abcd";

/**
 * The events of a long conversation with tools: every tenth turn calls two tools (one of them with an
 * id used in every such turn, one whose answer is an error), every 97th leaves a call unanswered,
 * some messages carry an image, and commands choose the verbosity along the way.
 */
function longConversation(turns: number): Event[] {
  const events: Event[] = [];
  for (let i = 0; i < turns; i++) {
    events.push({
      v: 1,
      kind: "message",
      role: "user",
      text: `question ${i}`,
      header: "",
      time,
      ...(i % 50 === 3 ? { parts: [{ type: "image_url", image_url: { url: "data:image/png;base64,iVBORw0KGgo=" } }] } : {}),
    } as Event);
    if (i % 10 === 0) {
      const calls = [
        { id: "call_0", name: "everything__echo", arguments: `{"message":"${i}"}` },
        { id: `call_${i}`, name: "memory__search", arguments: "{}" },
      ];
      events.push({ v: 1, kind: "message", role: "assistant", text: "", time, model: "m", provider: "p", latency_ms: 1, stop: "tool_calls", tool_calls: calls });
      events.push({ v: 1, kind: "tool_result", time, call_id: "call_0", tool: "everything__echo", text: `Echo: ${i}`, error: false });
      if (i % 97 !== 0) events.push({ v: 1, kind: "tool_result", time, call_id: `call_${i}`, tool: "memory__search", text: "no such note", error: true });
    }
    events.push({ v: 1, kind: "message", role: "assistant", text: `answer ${i}`, time, model: "m", provider: "p", latency_ms: 1, stop: "end_turn" });
    if (i % 400 === 7) events.push({ v: 1, kind: "command", time, name: "/verbosity:set", verbosity: i % 800 === 7 ? "all" : "new", text: "/verbosity:set" } as Event);
  }
  return events;
}

/** The conversation's event files written straight to its folder (as a turn would, faster). */
function writeConversation(conv: ConversationPaths, events: readonly Event[]): void {
  ensureConversation(conv);
  events.forEach((event, i) => writeFileSync(conv.event(i + 1), `${JSON.stringify(event)}\n`, { mode: 0o600 }));
}

/** Every event of a session's conversation as a turn reads it (a fork's shared start included); one the chat has not, the chat's. */
function turnEvents(conv: ConversationPaths, conversation: string | undefined): Numbered[] {
  return readConversation(conv, conversation)?.events ?? readEventsFrom(conv, 1);
}

/** The updates a load shows, and how many bytes of events the process held more after it than before. */
async function shownKeeping(sessions: Sessions, sessionId: string, onSend?: (sent: number) => void): Promise<{ updates: SessionUpdate[]; kept: number }> {
  const session = sessions.attach(client, sessionId, "/work", [], { onDisk: true });
  const before = cachedEventBytes().held;
  const updates: SessionUpdate[] = [];
  await sessions.showAgain(
    session,
    (chosen) => chosen.verbosity ?? "new",
    (update) => {
      updates.push(update);
      onSend?.(updates.length);
    },
    async () => undefined,
  );
  return { updates, kept: cachedEventBytes().held - before };
}

async function shown(sessions: Sessions, sessionId: string, onSend?: (sent: number) => void): Promise<SessionUpdate[]> {
  return (await shownKeeping(sessions, sessionId, onSend)).updates;
}

describe("session/load of a long conversation", () => {
  for (const turns of [300, 1500]) {
    it(`shows ${turns} turns as the whole conversation's replay does, its verbosity the last one chosen, keeping none of its events`, async () => {
      const dir = tempDir("lnk-load-");
      cleanup.push(() => dir.remove());
      const agent = { dir: dir.path };
      const conv = paths(agent).conversation(THREAD);
      const events = longConversation(turns);
      writeConversation(conv, events);
      forgetEvents();
      const sessions = new Sessions(agent, quiet);
      const { updates, kept } = await shownKeeping(sessions, THREAD);
      // Read apart, none of them kept by the process for the load.
      expect(kept).toBe(0);
      const all: Numbered[] = readEventsFrom(conv, 1);
      expect(all).toHaveLength(events.length);
      const last = [...events].reverse().find((e) => e.kind === "command");
      const verbosity = last?.kind === "command" && last.verbosity !== undefined ? last.verbosity : "new";
      expect(updates).toEqual(replay(all, verbosity));
      // The reused id is made unique, and a call never answered shows as failed.
      expect(updates.filter((u) => u.sessionUpdate === "tool_call" && u.toolCallId === "call_0#2")).toHaveLength(1);
      expect(updates.filter((u) => u.sessionUpdate === "tool_call_update" && u.status === "failed" && JSON.stringify(u).includes(UNANSWERED)).length).toBe(turns > 970 ? 2 : 1);
    });
  }

  it("shows the events there when it began: one written while it is shown is left for the next load", async () => {
    const dir = tempDir("lnk-load-");
    cleanup.push(() => dir.remove());
    const agent = { dir: dir.path };
    const conv = paths(agent).conversation(THREAD);
    // Past what the first pass keeps, so the second reads the folder again.
    const events = longConversation(1500);
    writeConversation(conv, events);
    const sessions = new Sessions(agent, quiet);
    let wrote: Promise<unknown> | undefined;
    const updates = await shown(sessions, THREAD, () => {
      wrote ??= appendEvent(conv, { v: 1, kind: "message", role: "user", text: "written meanwhile", header: "", time });
    });
    expect(wrote).toBeDefined();
    // Written whole before the next load looks, however long the write took on a busy machine.
    await wrote;
    expect(updates.some((u) => u.sessionUpdate === "user_message_chunk" && u.content.type === "text" && u.content.text === "written meanwhile")).toBe(false);
    expect(updates).toEqual(replay(readEventsFrom(conv, 1).slice(0, events.length), "new"));
    // The next load shows it.
    const again = await shown(new Sessions(agent, quiet), THREAD);
    expect(again.at(-1)).toMatchObject({ sessionUpdate: "user_message_chunk", content: { text: "written meanwhile" } });
  });

  it("lets the event loop go while it reads: the loop comes round before the first update is handed over", async () => {
    const dir = tempDir("lnk-load-");
    cleanup.push(() => dir.remove());
    const agent = { dir: dir.path };
    writeConversation(paths(agent).conversation(THREAD), longConversation(1500));
    let sent = 0;
    let sentWhenRound: number | undefined;
    setImmediate(() => (sentWhenRound = sent));
    const updates = await shown(new Sessions(agent, quiet), THREAD, (n) => (sent = n));
    expect(updates.length).toBeGreaterThan(1500 * 2);
    expect(sentWhenRound).toBe(0);
  });

  it("lets the daemon's event loop go: a request sent after the load is answered before it", async () => {
    assertBuilt([BIN, "dist/acp/sessions.js", "dist/acp/replay.js", "dist/turn/history.js"], ["acp", "daemon", "turn", "store", "protocol"]);
    const dir = tempDir("lnk-load-");
    cleanup.push(() => dir.remove());
    configure(dir.path, { model: { provider: "scripted", base_url: "http://127.0.0.1:9/v1", name: "m" } });
    const conv = paths({ dir: dir.path }).conversation(THREAD);
    writeConversation(conv, longConversation(3000));
    const d: Daemon = startDaemon(["--agent", dir.path]);
    cleanup.push(() => d.stop());
    let shownUpdates = 0;
    const client = await openClient(stdioStream(d.child), () => shownUpdates++);
    const order: string[] = [];
    const load = client.agent.request(acp.methods.agent.session.load, { sessionId: THREAD, cwd: dir.path, mcpServers: [] }).then(() => order.push("load"));
    // Once the load is under way (its first updates came), another request.
    while (shownUpdates === 0) await new Promise((resolve) => setTimeout(resolve, 1));
    await client.agent.request(acp.methods.agent.session.new, { cwd: dir.path, mcpServers: [] }).then(() => order.push("new"));
    await load;
    expect(order).toEqual(["new", "load"]);
    // Every message shown: 3,000 questions and answers, 300 turns' two calls each.
    expect(shownUpdates).toBeGreaterThanOrEqual(3000 * 2 + 300 * 4);
  }, 60_000);
});

describe("session/load of a session whose turn runs, on the connection that prompted it", () => {
  it("holds back what the turn sends the connection while the session is shown again: the load's updates and the turn's never mingle, and the prompt is answered after both", async () => {
    assertBuilt([BIN, "dist/acp/outbox.js", "dist/acp/app.js"], ["acp", "daemon", "turn", "store", "protocol"]);
    const server = await startModelServer({});
    cleanup.push(() => server.close());
    const dir = tempDir("lnk-load-");
    cleanup.push(() => dir.remove());
    configure(dir.path, scriptedSettings(server.url));
    writeConversation(paths({ dir: dir.path }).conversation(THREAD), longConversation(3000));
    const d: Daemon = startDaemon(["--agent", dir.path]);
    cleanup.push(() => d.stop());
    const order: string[] = [];
    const live = (u: SessionUpdate) => u.sessionUpdate === "agent_message_chunk" && u.content.type === "text" && u.content.text.includes("LIVE");
    const client = await openClient(stdioStream(d.child), (n) => order.push(live(n.update) ? "live" : n.update.sessionUpdate));
    await client.agent.request(acp.methods.agent.session.resume, { sessionId: THREAD, cwd: dir.path, mcpServers: [] });
    server.script({ text: "LIVE ".repeat(12), chunks: 12, chunkDelayMs: 10 });
    const prompting = client.agent.request(acp.methods.agent.session.prompt, { sessionId: THREAD, prompt: [{ type: "text", text: "now" }] }).then((r) => {
      order.push("answer");
      return r;
    });
    // The turn streams; then the session is loaded on the same connection.
    while (!order.includes("live")) await new Promise((resolve) => setTimeout(resolve, 1));
    const from = order.length;
    await client.agent.request(acp.methods.agent.session.load, { sessionId: THREAD, cwd: dir.path, mcpServers: [] });
    order.push("loaded");
    expect(await prompting).toMatchObject({ stopReason: "end_turn" });
    const seen = order.slice(from);
    const first = seen.indexOf("user_message_chunk");
    const shown = seen.indexOf("available_commands_update");
    // The conversation shown whole, in one run (3,000 questions at least), the turn's text after it.
    expect(seen.slice(first, shown).filter((u) => u === "user_message_chunk").length).toBeGreaterThanOrEqual(3000);
    expect(seen.slice(first, shown)).not.toContain("live");
    expect(seen.slice(shown)).toContain("live");
    // The prompt's answer comes after every update of its turn.
    expect(seen.lastIndexOf("live")).toBeLessThan(seen.indexOf("answer"));
  }, 60_000);
});

describe("session/load of a chat of several conversations", () => {
  it("shows each conversation as the turn reads it (a fork with its source's start), keeping none of the events of a long one", async () => {
    const dir = tempDir("lnk-load-");
    cleanup.push(() => dir.remove());
    const agent = { dir: dir.path };
    const conv = paths(agent).conversation(THREAD);
    const command = (name: string, more: object): Event => ({ v: 1, kind: "command", time, name, text: name, ...more }) as Event;
    const main = longConversation(300);
    const events: Event[] = [
      ...main,
      command("/chat:create", { conversation: "side" }),
      // Past what a load keeps from its passes before, so it reads the folder again to show it.
      ...longConversation(2200).map((e) => (e.kind === "message" && e.role === "user" ? { ...e, text: `side ${e.text}` } : e)),
      command("/chat:fork", { conversation: "fork", thread: "main", event: 200 }),
      ...longConversation(40).map((e) => (e.kind === "message" && e.role === "user" ? { ...e, text: `fork ${e.text}` } : e)),
      command("/chat:resume", { conversation: "main" }),
      command("/verbosity:set", { verbosity: "all" }),
      ...longConversation(20),
    ];
    writeConversation(conv, events);
    forgetEvents();
    const sessions = new Sessions(agent, quiet);
    const views = new Map<string, SessionUpdate[]>();
    for (const id of [THREAD, `${THREAD}~main`, `${THREAD}~side`, `${THREAD}~fork`]) {
      const { updates, kept } = await shownKeeping(sessions, id);
      expect(kept, id).toBe(0);
      // As the whole conversation, read as a turn reads it, replays.
      const session = sessions.attach(client, id, "/work", [], { onDisk: true });
      const chosen = sessions.choices(session);
      expect(updates, id).toEqual(replay(turnEvents(paths(agent).conversation(THREAD), session.conversation), chosen.verbosity ?? "new"));
      views.set(id, updates);
    }
    // The owner's messages each shows (its commands aside).
    const texts = (id: string) => (views.get(id) ?? []).flatMap((u) => (u.sessionUpdate === "user_message_chunk" && u.content.type === "text" && u.content.text.includes("question") ? [u.content.text] : []));
    // The chat's session is its current conversation's, main, shown as the verbosity main chose.
    expect(views.get(THREAD)).toEqual(views.get(`${THREAD}~main`));
    expect(texts(THREAD).some((t) => t.startsWith("side") || t.startsWith("fork"))).toBe(false);
    expect(texts(`${THREAD}~side`).every((t) => t.startsWith("side"))).toBe(true);
    // The fork: main's events up to the fork point (event 200), then its own.
    const fork = texts(`${THREAD}~fork`);
    expect(fork[0]).toBe("question 0");
    expect(fork.filter((t) => t.startsWith("fork"))).toHaveLength(40);
    expect(fork.some((t) => t.startsWith("side"))).toBe(false);
  });
});

describe("the names of a conversation's calls before a turn", () => {
  it("are those a replay of its conversation gives, counted on from the last turn's and read again once a conversation began", async () => {
    const dir = tempDir("lnk-load-");
    cleanup.push(() => dir.remove());
    const agent = { dir: dir.path };
    const conv = paths(agent).conversation(THREAD);
    const command = (name: string, more: object): Event => ({ v: 1, kind: "command", time, name, text: name, ...more }) as Event;
    writeConversation(conv, [
      ...longConversation(60),
      command("/chat:create", { conversation: "side" }),
      ...longConversation(30),
      command("/chat:fork", { conversation: "fork", thread: "main", event: 40 }),
      ...longConversation(12),
    ]);
    const sessions = new Sessions(agent, quiet);
    const call = (id: string): Event => ({ v: 1, kind: "message", role: "assistant", text: "", time, model: "m", provider: "p", latency_ms: 1, stop: "tool_calls", tool_calls: [{ id, name: "x__y", arguments: "{}" }] });
    /** The name the next call_0 gets: from callNames, and from the session's conversation read whole as a turn reads it. */
    const next = async (id: string) => {
      const session = sessions.attach(client, id, "/work", [], { onDisk: true });
      const got = (await sessions.callNames(session, lastEventNumber(conv))).after().name("call_0");
      const replayed = new CallNames();
      for (const e of turnEvents(conv, session.conversation)) replayed.see(e.event);
      return [got, replayed.name("call_0")];
    };
    const same = async (id: string) => {
      const [got, want] = await next(id);
      expect(got, id).toBe(want);
      return got;
    };
    // Each call_0 of the chat's first turns is two (call_0, and call_${i} at 0). The fork has main's
    // calls up to its fork point; side none of main's; the chat's session is the fork's, its current.
    expect(await same(`${THREAD}~main`)).toBe("call_0#8");
    expect(await same(`${THREAD}~side`)).toBe("call_0#5");
    expect(await same(`${THREAD}~fork`)).toBe("call_0#7");
    expect(await same(THREAD)).toBe("call_0#7");
    // A turn of the fork: counted on.
    await appendEvent(conv, call("call_0"));
    expect(await same(`${THREAD}~fork`)).toBe("call_0#8");
    expect(await same(THREAD)).toBe("call_0#8");
    // Main resumed and called: read again, for main and for the chat's session.
    await appendEvent(conv, command("/chat:resume", { conversation: "main" }));
    await appendEvent(conv, call("call_0"));
    expect(await same(`${THREAD}~main`)).toBe("call_0#9");
    expect(await same(THREAD)).toBe("call_0#9");
    expect(await same(`${THREAD}~fork`)).toBe("call_0#8");
    // Main's names read while another conversation is the chat's current one: the calls after are not main's.
    await appendEvent(conv, command("/chat:create", { conversation: "y" }));
    expect(await same(`${THREAD}~main`)).toBe("call_0#9");
    await appendEvent(conv, call("call_0"));
    expect(await same(`${THREAD}~main`)).toBe("call_0#9");
    expect(await same(`${THREAD}~y`)).toBe("call_0#2");
  });
});

describe("a conversation's choices", () => {
  it("are counted on from the process's last count: a command written since, by anyone, is seen", async () => {
    const dir = tempDir("lnk-load-");
    cleanup.push(() => dir.remove());
    const conv = paths({ dir: dir.path }).conversation(THREAD);
    writeConversation(conv, longConversation(20));
    expect(conversationChoices(conv)).toEqual({ verbosity: "all" });
    // Written by another process: straight to the folder, past the count.
    writeFileSync(conv.event(readEventsFrom(conv, 1).length + 1), `${JSON.stringify({ v: 1, kind: "command", time, name: "/model:set", model: "m2" })}\n`, { mode: 0o600 });
    expect(conversationChoices(conv)).toEqual({ verbosity: "all", model: "m2" });
    await appendEvent(conv, { v: 1, kind: "command", time, name: "/model:set" } as Event);
    expect(conversationChoices(conv)).toEqual({ verbosity: "all" });
    // A command that begins another conversation of the chat: the chat's current one's, read whole.
    await appendEvent(conv, { v: 1, kind: "command", time, name: "/chat:create", conversation: "side" } as Event);
    expect(conversationChoices(conv)).toEqual({});
  });
});

describe("session/list over many conversations", () => {
  it("finds a conversation again only once it has grown: a page of a list reads no event the list before it read", async () => {
    const dir = tempDir("lnk-load-");
    cleanup.push(() => dir.remove());
    const agent = { dir: dir.path };
    const threads = Array.from({ length: 300 }, (_, i) => `20260101-000000-${i.toString(16).padStart(8, "0")}`);
    threads.forEach((thread, i) => {
      const at = new Date(Date.parse(time) + i * 60_000).toISOString();
      writeConversation(paths(agent).conversation(thread), [
        { v: 1, kind: "message", role: "user", text: `about ${i}`, header: "", time: at, cwd: `/work/${i % 3}` },
        { v: 1, kind: "message", role: "assistant", text: "sure", time: at, model: "m", provider: "p", latency_ms: 1, stop: "end_turn" },
      ]);
    });
    const sessions = new Sessions(agent, quiet);
    const first = await sessions.list(client, undefined);
    expect(first.sessions).toHaveLength(100);
    expect(first.sessions[0]).toMatchObject({ sessionId: threads[299], title: "about 299", cwd: "/work/2" });
    // The events forgotten, the next pages read none again.
    forgetEvents();
    const second = await sessions.list(client, first.nextCursor);
    const third = await sessions.list(client, second.nextCursor);
    expect(cachedEventBytes().held).toBe(0);
    expect([...first.sessions, ...second.sessions, ...third.sessions].map((s) => s.sessionId)).toEqual([...threads].reverse());
    expect(third.nextCursor).toBeUndefined();
    expect((await sessions.list(client, undefined, "/work/1")).sessions.every((s) => s.cwd === "/work/1")).toBe(true);
    // One grown since (by another process: straight to its folder) is read again, and comes first.
    const grown = paths(agent).conversation(threads[5] as string);
    writeFileSync(grown.event(3), `${JSON.stringify({ v: 1, kind: "message", role: "user", text: "later", header: "", time: "2026-02-01T00:00:00.000Z", cwd: "/elsewhere" })}\n`, { mode: 0o600 });
    const again = await sessions.list(client, undefined);
    expect(again.sessions[0]).toMatchObject({ sessionId: threads[5], title: "about 5", cwd: "/elsewhere", updatedAt: "2026-02-01T00:00:00.000Z" });
  });

  it("finds a chat's conversations again once its window says it has several, though no event came since", async () => {
    const dir = tempDir("lnk-load-");
    cleanup.push(() => dir.remove());
    const agent = { dir: dir.path };
    const conv = paths(agent).conversation(THREAD);
    writeConversation(conv, [
      { v: 1, kind: "command", name: "/chat:create", conversation: "side", time },
      { v: 1, kind: "message", role: "user", text: "hello", header: "", time, cwd: "/work" },
      { v: 1, kind: "message", role: "assistant", text: "hi", time, model: "m", provider: "p", latency_ms: 1, stop: "end_turn" },
    ]);
    const sessions = new Sessions(agent, quiet);
    expect((await sessions.list(client, undefined)).sessions.map((s) => s.sessionId)).toEqual([THREAD]);
    writeMark(conv, { v: 1, event: 2, time, tokens_before: 0, budget: 1000, conversation: "side" });
    const listed = (await sessions.list(client, undefined)).sessions;
    // Each conversation titled by its first owner's message.
    const again = listed.map((s) => s.sessionId);
    expect(again).toHaveLength(3);
    expect(again[0]).toBe(THREAD);
    expect(listed.find((s) => s.sessionId === `${THREAD}~side`)?.title).toBe("side: hello");
    expect(listed.find((s) => s.sessionId === `${THREAD}~main`)?.title).toBe("main: (no message yet)");
  });
});
