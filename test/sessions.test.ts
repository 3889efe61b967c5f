// Sessions both ways over the built daemon and the ACP SDK client: `_asp/export` gives each
// conversation in the portable session form, `_asp/import` writes each as a new conversation whose
// events give the same form again, which replays over session/load as the source does and sends the
// model the same history at its next turn; bad input is refused naming the field, with nothing written.
import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, readdirSync, realpathSync, renameSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import * as acp from "@agentclientprotocol/sdk";
import type { ContentBlock } from "@agentclientprotocol/sdk";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { AspState, SessionForm, sessionFormJsonSchema } from "../protocol/index.js";
import { writeSessions } from "../asp/sessions.js";
import { appendEvent, listThreads, paths, readEventsFrom } from "../store/index.js";
import { prefillEvent } from "./bench/agent.js";
import { configure, daemonTestHooks, failure, scriptedSettings, startDaemon, stdioClient, tempDir, until, type Client, type Daemon, watched } from "./acp-client.js";
import { promptRichTurn, replayed, scriptRichTurn } from "./fixtures/rich-turn.js";
import type { ModelServer, RecordedRequest } from "./model-server.js";
import { BIN, ROOT } from "./fixtures/built.js";

const EVERYTHING = `"${process.execPath}" "${ROOT}node_modules/@modelcontextprotocol/server-everything/dist/index.js" stdio`;

let server: ModelServer;
const cleanup = daemonTestHooks([BIN, "dist/acp/asp.js", "dist/asp/sessions.js", "dist/protocol/session-form.js"], (s) => (server = s));

function agent(): string {
  const dir = tempDir("lnk-sessions-");
  cleanup.push(() => dir.remove());
  configure(dir.path, scriptedSettings(server.url, { verbosity: "all" }));
  return dir.path;
}

function daemon(dir: string): Daemon {
  return watched(startDaemon(["--agent", dir], { LNK_TOOL_EVERYTHING: EVERYTHING }), cleanup);
}

const text = (s: string): ContentBlock[] => [{ type: "text", text: s }];
const Imported = z.object({
  imported: z.array(z.object({ kind: z.literal("sessions"), thread: z.string(), as: z.string(), events: z.number() }).strict()),
  leftBehind: z.array(z.object({ kind: z.string(), why: z.string() }).strict()),
});

async function exported(c: Client, kinds?: string[]): Promise<AspState> {
  return AspState.parse(await c.agent.request("_asp/export", kinds ? { kinds } : {}));
}

/** What session/load replays of a session, as a fresh client sees it. */
const replay = (dir: string, sessionId: string): Promise<unknown[]> => replayed(daemon(dir), cleanup, sessionId, ROOT);

/** The messages of the next turn's request but its system prompt and the new message (whose header says the time now). */
async function nextTurn(dir: string, sessionId: string): Promise<{ history: unknown[]; model: unknown; last: unknown }> {
  const d = daemon(dir);
  const c = await stdioClient(d, cleanup);
  await c.agent.request(acp.methods.agent.session.resume, { sessionId, cwd: ROOT });
  server.script({ text: "Next." });
  const before = server.requests.length;
  await c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: text("what did the tool say?") });
  const request = server.requests[before] as RecordedRequest;
  c.close();
  await d.stop();
  const messages = request.body.messages ?? [];
  expect(messages[0]).toMatchObject({ role: "system" });
  return { history: messages.slice(1, -1), model: request.body.model, last: messages.at(-1) };
}

describe("sessions both ways", { timeout: 180_000 }, () => {
  it("export, import into a fresh agent, export again: the same sessions, which replay and go on alike", async () => {
    // A conversation made by real turns: an image, thinking, two tool calls (one failing), a model chosen.
    const source = agent();
    mkdirSync(join(source, "memory"));
    writeFileSync(join(source, "memory", "notes.md"), "Gate 4417.\n");
    const d1 = daemon(source);
    const c1 = await stdioClient(d1, cleanup);
    const { sessionId } = await c1.agent.request(acp.methods.agent.session.new, { cwd: ROOT, mcpServers: [] });
    scriptRichTurn(server);
    await promptRichTurn(c1, sessionId);
    await c1.agent.request(acp.methods.agent.session.setConfigOption, { sessionId, configId: "model", value: "bigger-model" });
    const other = await c1.agent.request(acp.methods.agent.session.new, { cwd: ROOT, mcpServers: [] });
    server.script({ text: "Hello." });
    await c1.agent.request(acp.methods.agent.session.prompt, { sessionId: other.sessionId, prompt: text("hi") });

    const first = await exported(c1);
    c1.close();
    await d1.stop();
    const sessions = first.sessions ?? [];
    expect(sessions.map((s) => s.thread)).toEqual([sessionId, other.sessionId].sort());
    // Each is its conversation's events as kept, in order: every kind the form carries is here.
    const mine = sessions.find((s) => s.thread === sessionId);
    expect(mine?.events).toEqual(readEventsFrom(paths({ dir: source }).conversation(sessionId), 1).map((e) => e.event));
    expect(mine?.events.map((e) => ("role" in e ? `${e.kind}:${e.role}` : e.kind))).toEqual([
      "message:user",
      "message:assistant",
      "tool_result",
      "tool_result",
      "message:assistant",
      "command",
    ]);
    expect(mine?.events[0]).toMatchObject({ parts: [{ type: "image_url", image_url: { url: "data:image/png;base64,iVBORw0KGgo=" } }] });
    expect(mine?.events[1]).toMatchObject({ model: "scripted-model", thinking: { reasoning_content: "The user wants an echo." }, tool_calls: [{ id: "c1" }, { id: "c2" }] });
    // The calls run at once: their answers are kept in the order they came.
    expect(mine?.events.slice(2, 4).map((e) => (e.kind === "tool_result" ? [e.call_id, e.error] : [])).sort()).toEqual([
      ["c1", false],
      ["c2", true],
    ]);
    expect(mine?.events[5]).toMatchObject({ name: "/model:set", model: "bigger-model" });

    // Into a fresh agent: each session a new conversation, the kinds it doesn't take named.
    const target = agent();
    const d2 = daemon(target);
    const c2 = await stdioClient(d2, cleanup);
    const answer = Imported.parse(await c2.agent.request("_asp/import", { ...first, instructions: "## Standing instructions\nBe brief.\n", skills: [] }));
    expect(answer.imported).toEqual(sessions.map((s) => ({ kind: "sessions", thread: s.thread, as: s.thread, events: s.events.length })));
    // What it doesn't take is named; a kind that holds nothing leaves nothing behind.
    expect(answer.leftBehind).toEqual([
      { kind: "instructions", why: "_asp/import takes sessions only" },
      { kind: "memory", why: "_asp/import takes sessions only" },
    ]);
    expect((await exported(c2, ["sessions"])).sessions).toEqual(sessions);

    // Again: never over the conversation there, a fresh thread instead.
    const again = Imported.parse(await c2.agent.request("_asp/import", { sessions: [mine] }));
    expect(again).toEqual({ imported: [{ kind: "sessions", thread: sessionId, as: `${sessionId}-2`, events: 6 }], leftBehind: [] });
    const twice = (await exported(c2, ["sessions"])).sessions ?? [];
    expect(twice.find((s) => s.thread === sessionId)).toEqual(mine);
    expect(twice.find((s) => s.thread === `${sessionId}-2`)?.events).toEqual(mine?.events);
    c2.close();
    await d2.stop();

    // It replays as the source does, every message and tool call, and its next turn sends the same history.
    const replayed = await replay(target, sessionId);
    expect(replayed).toEqual(await replay(source, sessionId));
    expect(replayed.map((u) => z.object({ sessionUpdate: z.string() }).loose().parse(u).sessionUpdate)).toEqual([
      "user_message_chunk",
      "user_message_chunk",
      "tool_call",
      "tool_call_update",
      "tool_call",
      "tool_call_update",
      "agent_message_chunk",
      "available_commands_update",
    ]);
    expect(replayed[1]).toMatchObject({ content: { type: "image", mimeType: "image/png", data: "iVBORw0KGgo=" } });
    const there = await nextTurn(source, sessionId);
    const here = await nextTurn(target, `${sessionId}-2`);
    expect(here.history).toEqual(there.history);
    expect(here.model).toBe("bigger-model");
    expect(there.model).toBe("bigger-model");
    expect(JSON.stringify(here.history)).toContain("Echo: ping");
    expect(JSON.stringify(here.history)).toContain("data:image/png;base64,iVBORw0KGgo=");
  });

  it("refuses bad sessions naming the field, and writes nothing of any of them", async () => {
    const dir = agent();
    const d = daemon(dir);
    const c = await stdioClient(d, cleanup);
    const good = { thread: "kept", events: [{ v: 1, time: "2026-01-02T03:04:05.000Z", kind: "message", role: "user", text: "hi", header: "[Fri 2026-01-02 03:04]" }] };
    const chats = join(dir, "chats");
    const listing = () => {
      try {
        return readdirSync(chats, { recursive: true }).map(String).sort();
      } catch {
        return [];
      }
    };
    const before = listing();
    for (const [params, field] of [
      [{ sessions: [good, { ...good, thread: "../x" }] }, "sessions.1.thread"],
      [{ sessions: [good, { ...good, thread: "a/b" }] }, "sessions.1.thread"],
      [{ sessions: [good, { thread: "t", events: [{ ...good.events[0], time: "yesterday" }] }] }, "sessions.1.events.0.time"],
      [{ sessions: [good, { thread: "t" }] }, "sessions.1.events"],
      // An event of no kind's schema is named by the field its kind's schema finds wrong.
      [{ sessions: [good, { thread: "t", events: [{ ...good.events[0], role: "assistant" }] }] }, "sessions.1.events.0.model"],
      [{ sessions: [good, { thread: "t", events: [{ ...good.events[0], kind: "note" }] }] }, "sessions.1.events.0.kind"],
      [{ sessions: [good, { thread: "t", events: [good.events[0], 5] }] }, "sessions.1.events.1: an event is a JSON object"],
      [{ sessions: [good, { ...good, extra: 1 }] }, "sessions.1"],
      [{ sessions: "all" }, "sessions"],
      [{ sessions: null }, "sessions: Invalid input: expected array, received null"],
      [{ sessions: [good], bogus: 1 }, "bogus"],
      [{ sessions: [good], _meta: { link: { agent: "another" } } }, "_meta.link.agent"],
      // A part's own fields are loose: JSON.parse makes "__proto__" an own key there, which no export carries.
      [{ sessions: [good, { thread: "t", events: [{ ...good.events[0], parts: [JSON.parse('{"type":"text","text":"x","__proto__":{"polluted":1}}')] }] }] }, 'sessions.1.events.0.parts.0: the key "__proto__" is not allowed'],
    ] as const) {
      const e = await failure(c.agent.request("_asp/import", params));
      expect(e.code, JSON.stringify(params)).toBe(-32602);
      expect(e.message).toContain(field);
      expect(listing()).toEqual(before);
    }
    // The good one alone is taken.
    expect(Imported.parse(await c.agent.request("_asp/import", { sessions: [good] })).imported).toEqual([{ kind: "sessions", thread: "kept", as: "kept", events: 1 }]);
    expect((await exported(c, ["sessions"])).sessions).toEqual([good]);
  });

  it("leaves out of the export what it can't read, never through a link", async () => {
    const dir = agent();
    const d = daemon(dir);
    const c = await stdioClient(d, cleanup);
    await c.agent.request("_asp/import", { sessions: [{ thread: "fine", events: [] }] });
    mkdirSync(join(dir, "chats", "bad"));
    writeFileSync(join(dir, "chats", "bad", "000000000001.json"), "{not json");
    mkdirSync(join(dir, "outside"));
    writeFileSync(join(dir, "outside", "000000000001.json"), readFileSync(join(dir, "config.json")));
    symlinkSync(join(dir, "outside"), join(dir, "chats", "linked"));
    // A conversation with a number missing gives its events up to it, and names the rest.
    const event = { v: 1, time: "2026-01-02T03:04:05.000Z", kind: "message", role: "user", text: "hi", header: "[Fri 2026-01-02 03:04]" };
    mkdirSync(join(dir, "chats", "gap"));
    writeFileSync(join(dir, "chats", "gap", "000000000001.json"), JSON.stringify(event));
    writeFileSync(join(dir, "chats", "gap", "000000000003.json"), JSON.stringify({ ...event, text: "after" }));
    expect((await exported(c, ["sessions"])).sessions).toEqual([
      { thread: "fine", events: [] },
      { thread: "gap", events: [event] },
    ]);
    await d.waitForLog(/left out of the export.*chats\/bad/);
    await d.waitForLog(/left out of the export.*chats\/gap.*after number 2/);
    // The link is named, never followed: nothing of what it leads to is read.
    await d.waitForLog(/left out of the export.*chats\/linked.*a symbolic link, not followed/);
    expect(d.stderr()).not.toContain("outside");
  });
});

/** Whether strace(1) runs here, to see which folders a process flushes. */
const strace = spawnSync("strace", ["-V"]).status === 0;

describe("an import on disk", () => {
  it.skipIf(!strace)("flushes the folders it made for its conversations (chats/ and the agent's), as a turn's first event does", () => {
    const dir = tempDir("lnk-sessions-flush-");
    cleanup.push(() => dir.remove());
    const agentDir = join(dir.path, "agent");
    mkdirSync(agentDir);
    const script = join(dir.path, "import.mjs");
    writeFileSync(
      script,
      [
        `import { writeSessions } from ${JSON.stringify(join(ROOT, "dist/asp/sessions.js"))};`,
        `import { prefillEvent } from ${JSON.stringify(join(ROOT, "dist/test/bench/agent.js"))};`,
        "const start = Date.now();",
        `await writeSessions({ dir: ${JSON.stringify(agentDir)} }, [{ thread: "imported", events: [prefillEvent(1, start), prefillEvent(2, start)] }]);`,
      ].join("\n"),
    );
    const trace = join(dir.path, "trace");
    // -y: each descriptor is printed with the path it is open on.
    const r = spawnSync("strace", ["-f", "-y", "-e", "trace=fsync", "-o", trace, process.execPath, script], { encoding: "utf8" });
    expect(r.status, r.stderr).toBe(0);
    const flushed = new Set([...readFileSync(trace, "utf8").matchAll(/fsync\(\d+<([^>]+)>/g)].map((m) => m[1]));
    expect(readdirSync(join(agentDir, "chats"))).toEqual(["imported"]);
    // strace names each folder by its real path.
    const real = realpathSync(agentDir);
    expect([...flushed]).toEqual(expect.arrayContaining([real, join(real, "chats")]));
  });
});

describe("an import another writer meets", () => {
  it("puts its conversation in place whole under a name of its own, and the other writer's conversation is left its own", async () => {
    const dir = tempDir("lnk-sessions-shared-");
    cleanup.push(() => dir.remove());
    const start = Date.now();
    const events = [1, 2, 3, 4].map((n) => prefillEvent(n, start));
    // Its failure taken at once: it may come while the other writer's append is awaited.
    const importing = writeSessions({ dir: dir.path }, [{ thread: "meet", events }]).then(
      (w) => w.imported,
      (e: unknown) => e,
    );
    // Another writer makes the thread's conversation while the import writes.
    const conv = paths({ dir: dir.path }).conversation("meet");
    await appendEvent(conv, prefillEvent(99, start));
    expect(await importing).toEqual([{ kind: "sessions", thread: "meet", as: "meet-2", events: 4 }]);
    expect(readEventsFrom(conv, 1).map((e) => e.event)).toEqual([prefillEvent(99, start)]);
    expect(readEventsFrom(paths({ dir: dir.path }).conversation("meet-2"), 1).map((e) => e.event)).toEqual(events);
    expect(readdirSync(join(dir.path, "chats")).sort()).toEqual(["meet", "meet-2"]);
  });
});

describe("an import killed midway", () => {
  it("leaves no conversation seen, and the next import writes it whole under its own name, removing what the killed one left", async () => {
    const dir = tempDir("lnk-sessions-killed-");
    cleanup.push(() => dir.remove());
    const agentDir = join(dir.path, "agent");
    mkdirSync(agentDir);
    const chats = join(agentDir, "chats");
    const start = Date.now();
    // Each event is flushed as it is written: 1,000 of them take the import some seconds.
    const events = Array.from({ length: 1000 }, (_, i) => prefillEvent(i + 1, start));
    const script = join(dir.path, "import.mjs");
    writeFileSync(
      script,
      [
        `import { writeSessions } from ${JSON.stringify(join(ROOT, "dist/asp/sessions.js"))};`,
        `import { prefillEvent } from ${JSON.stringify(join(ROOT, "dist/test/bench/agent.js"))};`,
        `const events = Array.from({ length: 1000 }, (_, i) => prefillEvent(i + 1, ${start}));`,
        `await writeSessions({ dir: ${JSON.stringify(agentDir)} }, [{ thread: "first", events: events.slice(0, 3) }, { thread: "killed", events }]);`,
        `console.log("done");`,
      ].join("\n"),
    );
    const child = spawn(process.execPath, [script], { stdio: ["ignore", "pipe", "pipe"] });
    const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
    // Killed once the second session is part written.
    const staging = () => (existsSync(chats) ? readdirSync(chats).filter((n) => n.startsWith(".import-")) : []);
    const written = (name: string) => readdirSync(join(chats, name)).filter((n) => /^\d{12}\.json$/.test(n)).length;
    await until(() => staging().some((n) => written(n) >= 100), "the import part written");
    child.kill("SIGKILL");
    expect(await exited).toBeNull();
    // Nothing of it is a conversation: not the first session, written whole, nor the second.
    expect(listThreads(chats)).toEqual([]);
    expect(staging()).toHaveLength(2);

    const again = await writeSessions({ dir: agentDir }, [{ thread: "killed", events }]);
    expect(again.imported).toEqual([{ kind: "sessions", thread: "killed", as: "killed", events: 1000 }]);
    expect(readEventsFrom(paths({ dir: agentDir }).conversation("killed"), 1).map((e) => e.event)).toEqual(events);
    // What the killed process left is gone.
    expect(readdirSync(chats)).toEqual(["killed"]);
  });

  it("fails, keeping nothing of it, when the folder it writes in is removed meanwhile (taken for one a killed import left)", async () => {
    const dir = tempDir("lnk-sessions-swept-");
    cleanup.push(() => dir.remove());
    const chats = join(dir.path, "chats");
    const start = Date.now();
    const events = Array.from({ length: 400 }, (_, i) => prefillEvent(i + 1, start));
    const importing = writeSessions({ dir: dir.path }, [{ thread: "swept", events }]).then(
      () => undefined,
      (e: unknown) => e,
    );
    const staging = () => (existsSync(chats) ? readdirSync(chats).filter((n) => n.startsWith(".import-")) : []);
    await until(() => staging().some((n) => readdirSync(join(chats, n)).length >= 20), "the import part written");
    // Taken away from where the import writes, at once (a removal file by file races the import's
    // next file), and removed once the import has failed.
    const away = join(dir.path, "away");
    mkdirSync(away);
    for (const n of staging()) renameSync(join(chats, n), join(away, n));
    const failed = await importing;
    rmSync(away, { recursive: true, force: true });
    expect(failed).toBeInstanceOf(Error);
    // Refused by the write under way, or found short before it is put in place.
    expect((failed as Error).message).toMatch(/^(the folder session swept was being written in was removed meanwhile: nothing of it is kept|refused: )/);
    // Nothing: chats/, made for the import, is gone with it.
    expect(existsSync(chats) ? readdirSync(chats) : []).toEqual([]);
  });

  it("writes a session of no events as an empty conversation, never taking a folder that is there, empty or not", async () => {
    const dir = tempDir("lnk-sessions-empty-");
    cleanup.push(() => dir.remove());
    const chats = join(dir.path, "chats");
    mkdirSync(join(chats, "quiet"), { recursive: true });
    writeFileSync(join(chats, "quiet", "mine"), "kept");
    mkdirSync(join(chats, "quiet-2"));
    const w = await writeSessions({ dir: dir.path }, [{ thread: "quiet", events: [] }]);
    expect(w.imported).toEqual([{ kind: "sessions", thread: "quiet", as: "quiet-3", events: 0 }]);
    expect(readdirSync(join(chats, "quiet"))).toEqual(["mine"]);
    expect(readdirSync(chats).sort()).toEqual(["quiet", "quiet-2", "quiet-3"]);
  });
});

describe("the session form's JSON Schema", () => {
  it("is the one man lnk-link-harness-session(5) prints", () => {
    const page = readFileSync(join(ROOT, "man", "lnk-link-harness-session.5"), "utf8");
    const block = /\.\\" schema begins\n\.nf\n([\s\S]*?)\n\.fi\n\.\\" schema ends/.exec(page)?.[1];
    expect(block).toBeDefined();
    const json = (block ?? "").replaceAll("\\e", "\\").replaceAll("\\&", "");
    expect(JSON.parse(json)).toEqual(sessionFormJsonSchema());
    // And it describes what the zod schema takes.
    expect(SessionForm.safeParse({ thread: "t", events: [] }).success).toBe(true);
  });
});
