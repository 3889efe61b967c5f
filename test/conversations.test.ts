// `lnk-link-harness conversation` and `conversations move` over the built command line: a
// conversation made by real turns through the daemon shown to a person and in the portable session
// form (the session `_asp/export` gives); conversations moved out and into a fresh agent folder, the
// same sessions again, replaying over session/load; a chat's conversation named `<thread>~<name>`;
// and bad input refused in one line with nothing written.
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdirSync, readdirSync, readFileSync, realpathSync, rmSync, statSync, symlinkSync, utimesSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import * as acp from "@agentclientprotocol/sdk";
import type { ContentBlock } from "@agentclientprotocol/sdk";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { AspState, SessionForm } from "../protocol/index.js";
import { thisHost } from "../asp/sessions.js";
import { configure, daemonTestHooks, failure, scriptedSettings, startDaemon, stdioClient, tempDir, until, type Client, type Daemon, watched } from "./acp-client.js";
import { deferred } from "./fixtures/deferred.js";
import { promptRichTurn, replayed, scriptRichTurn } from "./fixtures/rich-turn.js";
import type { ModelServer } from "./model-server.js";
import { BIN, MAIN, ROOT } from "./fixtures/built.js";
import { run, type Run } from "./fixtures/child.js";

const EVERYTHING = `"${process.execPath}" "${ROOT}node_modules/@modelcontextprotocol/server-everything/dist/index.js" stdio`;

let server: ModelServer;
const cleanup = daemonTestHooks([BIN, "dist/daemon/conversation.js", "dist/daemon/conversations-move.js", "dist/asp/sessions.js"], (s) => (server = s));

function folder(settings = true): string {
  const dir = tempDir("lnk-conversations-");
  cleanup.push(() => dir.remove());
  if (settings) configure(dir.path, scriptedSettings(server.url, { verbosity: "all" }));
  return dir.path;
}

function daemon(dir: string): Daemon {
  return watched(startDaemon(["--agent", dir], { LNK_TOOL_EVERYTHING: EVERYTHING }), cleanup);
}

const cli = (args: string[], input = ""): Promise<Run> => run(process.execPath, [MAIN, ...args], { input, env: { PATH: process.env.PATH ?? "/usr/bin:/bin" }, ms: 30_000 });
const text = (s: string): ContentBlock[] => [{ type: "text", text: s }];

const Imported = z
  .object({
    imported: z.array(z.object({ kind: z.literal("sessions"), thread: z.string(), as: z.string(), events: z.number() }).strict()),
    leftBehind: z.array(z.object({ kind: z.string(), why: z.string() }).strict()),
  })
  .strict();

async function exported(c: Client): Promise<SessionForm[]> {
  return AspState.parse(await c.agent.request("_asp/export", { kinds: ["sessions"] })).sessions ?? [];
}

/** What session/load replays of a session, as a fresh client sees it. */
const replay = (dir: string, sessionId: string): Promise<unknown[]> => replayed(daemon(dir), cleanup, sessionId, ROOT);

const kindOf = (u: unknown) => z.object({ sessionUpdate: z.string() }).loose().parse(u).sessionUpdate;
const userTexts = (updates: unknown[]) =>
  updates.flatMap((u) => {
    const chunk = z.object({ sessionUpdate: z.literal("user_message_chunk"), content: z.object({ type: z.literal("text"), text: z.string() }).loose() }).loose().safeParse(u);
    return chunk.success ? [chunk.data.content.text] : [];
  });

/** Every file under the agent's chats/, so a test can see nothing was written. */
function listing(dir: string): string[] {
  try {
    return readdirSync(join(dir, "chats"), { recursive: true }).map(String).sort();
  } catch {
    return [];
  }
}

/**
 * An agent with two chats made by real turns: one with an image, thinking, two tool calls (one
 * failing), a model chosen and a turn that failed; one forked into a second conversation.
 */
async function madeByTurns(): Promise<{ dir: string; plain: string; chat: string; fork: string; sessions: SessionForm[] }> {
  const dir = folder();
  const d = daemon(dir);
  const c = await stdioClient(d, cleanup);
  const { sessionId: plain } = await c.agent.request(acp.methods.agent.session.new, { cwd: ROOT, mcpServers: [] });
  scriptRichTurn(server, { error: { status: 400, message: "the prompt is too long" } });
  await promptRichTurn(c, plain);
  await c.agent.request(acp.methods.agent.session.setConfigOption, { sessionId: plain, configId: "model", value: "bigger-model" });
  await c.agent.request(acp.methods.agent.session.prompt, { sessionId: plain, prompt: text("and again") }).catch(() => undefined);

  const { sessionId: chat } = await c.agent.request(acp.methods.agent.session.new, { cwd: ROOT, mcpServers: [] });
  server.script({ text: "One." }, { text: "In the fork." });
  await c.agent.request(acp.methods.agent.session.prompt, { sessionId: chat, prompt: text("one") });
  await c.agent.request(acp.methods.agent.session.prompt, { sessionId: chat, prompt: text("/chat:fork") });
  await c.agent.request(acp.methods.agent.session.prompt, { sessionId: chat, prompt: text("in the fork") });
  const sessions = await exported(c);
  c.close();
  await d.stop();
  return { dir, plain, chat, fork: `${chat}~fork-3`, sessions };
}

/** Whether strace(1) runs here, to stop an import at the moment it names a thread's folder. */
const strace = spawnSync("strace", ["-V"]).status === 0;

describe("conversation and conversations move", { timeout: 240_000 }, () => {
  it("shows a conversation made by real turns to a person, and --json is the session _asp/export gives", async () => {
    const { dir, plain, chat, fork, sessions } = await madeByTurns();
    expect(sessions.map((s) => s.thread)).toEqual([plain, chat].sort());

    const shown = await cli(["conversation", "--agent", dir, plain]);
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stderr).toBe("");
    const out = shown.stdout;
    const events = sessions.find((s) => s.thread === plain)?.events ?? [];
    expect(out.split("\n")[0]).toMatch(new RegExp(`^Conversation ${plain}: ${events.length} events, \\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d:\\d\\d UTC to `));
    // Who said what, with times; the image named; thinking marked, never shown; the calls and their answers.
    expect(out).toMatch(/\n#1 · \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC · Owner\ncall the echo tool\n\[image, image\/png, 8 bytes\]\n/);
    expect(out).toMatch(/\n#2 · [^\n]* · Agent · scripted-model \([^)\n]+\) · [^\n]*\n\(thinking: 23 characters, kept, not shown\)\n→ calls everything__echo \{"message":"ping"\} \[c1\]\n→ calls everything__get-sum \{"a":"not a number"\} \[c2\]\n/);
    expect(out).not.toContain("The user wants an echo.");
    expect(out).toMatch(/ · everything__echo answered \[c1\]\nEcho: ping\n/);
    expect(out).toMatch(/ · everything__get-sum failed \[c2\]\n/);
    expect(out).toMatch(/ · Agent · [^\n]*\nThe tool said ping\.\n/);
    expect(out).toMatch(/ · Owner · command\n\/model:set bigger-model\n/);
    expect(out).toMatch(/ · Owner\nand again\n/);
    expect(out).toMatch(/ · Turn failed: \w+ \(status 400\)\n[^\n]*too long/);
    expect(out.match(/^#\d+ · /gm)?.length).toBe(events.length);

    // --json: the very session _asp/export gives, written as JSON.stringify writes it.
    for (const thread of [plain, chat]) {
      const json = await cli(["conversation", "--agent", dir, thread, "--json"]);
      expect(json.code, json.stderr).toBe(0);
      const session = sessions.find((s) => s.thread === thread);
      expect(SessionForm.parse(JSON.parse(json.stdout))).toEqual(session);
      expect(json.stdout).toBe(`${JSON.stringify(session, null, 2)}\n`);
    }

    // A chat of several conversations says so; one of them is named as its session is.
    const whole = await cli(["conversation", "--agent", dir, chat]);
    expect(whole.stdout.split("\n")[0]).toContain(`(a chat of 2 conversations: main, fork-3; name one as ${chat}~NAME)`);
    const forked = await cli(["conversation", "--agent", dir, fork]);
    expect(forked.code, forked.stderr).toBe(0);
    expect(forked.stdout).toMatch(/\none\n[^]*\nOne\.\n[^]*· Owner · command\n\/chat:fork \(as \/chat:fork fork-3, from main at event 2\)\n[^]*\nin the fork\n[^]*\nIn the fork\.\n$/);
    const forkJson = await cli(["conversation", "--agent", dir, fork, "--json"]);
    expect(forkJson.code, forkJson.stderr).toBe(0);
    const forkSession = SessionForm.parse(JSON.parse(forkJson.stdout));
    // Its events as the chat reads them back, without the command that began it.
    const chatEvents = sessions.find((s) => s.thread === chat)?.events ?? [];
    expect(forkSession).toEqual({ thread: fork, events: chatEvents.filter((e) => e.kind !== "command") });
    const main = await cli(["conversation", "--agent", dir, `${chat}~main`, "--json"]);
    expect(SessionForm.parse(JSON.parse(main.stdout)).events).toEqual(chatEvents.slice(0, 2));
  });

  it("moves every conversation out and into a fresh agent: the same sessions again, which replay as the source's", async () => {
    const { dir, plain, chat, fork, sessions } = await madeByTurns();
    const out = await cli(["conversations", "move", "out", "--agent", dir]);
    expect(out.code, out.stderr).toBe(0);
    expect(out.stderr).toBe("");
    expect(AspState.parse(JSON.parse(out.stdout))).toEqual({ sessions });
    expect(out.stdout).toBe(`${JSON.stringify({ sessions }, null, 2)}\n`);

    const target = folder();
    const into = await cli(["conversations", "move", "in", "--agent", target], out.stdout);
    expect(into.code, into.stderr).toBe(0);
    expect(Imported.parse(JSON.parse(into.stdout))).toEqual({ imported: sessions.map((s) => ({ kind: "sessions", thread: s.thread, as: s.thread, events: s.events.length })), leftBehind: [] });
    const again = await cli(["conversations", "move", "out", "--agent", target]);
    expect(again.stdout).toBe(out.stdout);
    // Out keeps what it gave.
    expect((await cli(["conversations", "move", "out", "--agent", dir])).stdout).toBe(out.stdout);

    // The moved conversation replays over session/load as the source does, every message and tool call.
    const replayed = await replay(target, plain);
    expect(replayed).toEqual(await replay(dir, plain));
    expect(replayed.map(kindOf)).toEqual(expect.arrayContaining(["user_message_chunk", "tool_call", "tool_call_update", "agent_message_chunk"]));
    expect(JSON.stringify(replayed)).toContain("Echo: ping");

    // Named ones only, a chat's conversation among them, from a FILE; into an agent that has them: fresh threads.
    const some = await cli(["conversations", "move", "out", "--agent", dir, fork, plain]);
    expect(some.code, some.stderr).toBe(0);
    const picked = AspState.parse(JSON.parse(some.stdout)).sessions ?? [];
    expect(picked.map((s) => s.thread)).toEqual([fork, plain]);
    const file = join(target, "picked.json");
    writeFileSync(file, some.stdout);
    const twice = await cli(["conversations", "move", "in", "--agent", target, file]);
    expect(Imported.parse(JSON.parse(twice.stdout)).imported.map((i) => [i.thread, i.as])).toEqual([
      [fork, fork],
      [plain, `${plain}-2`],
    ]);
    // The fork, a conversation of its own now, replays its shared start and its own messages.
    expect(userTexts(await replay(target, fork))).toEqual(["one", "in the fork"]);

    // One session, as conversation --json prints it, is taken too; other kinds of a State are left behind.
    const one = await cli(["conversation", "--agent", dir, chat, "--json"]);
    const single = await cli(["conversations", "move", "in", "--agent", target], one.stdout);
    expect(Imported.parse(JSON.parse(single.stdout)).imported).toEqual([{ kind: "sessions", thread: chat, as: `${chat}-2`, events: sessions.find((s) => s.thread === chat)?.events.length }]);
    const state = await cli(["conversations", "move", "in", "--agent", folder()], JSON.stringify({ instructions: "Be brief.", skills: [], sessions: [] }));
    expect(JSON.parse(state.stdout)).toEqual({ imported: [], leftBehind: [{ kind: "instructions", why: "conversations move in takes sessions only (state import takes the rest)" }] });
    // An agent's folder not there yet is made, as state import makes it.
    const fresh = join(folder(false), "fresh");
    const made = await cli(["conversations", "move", "in", "--agent", fresh], one.stdout);
    expect(made.code, made.stderr).toBe(0);
    expect((await cli(["conversation", "--agent", fresh, chat, "--json"])).stdout).toBe(one.stdout);
  });

  it("a prompt to one conversation of a chat while another's turn runs is a turn of its own, in its own conversation", async () => {
    const dir = folder();
    const d = daemon(dir);
    const c = await stdioClient(d, cleanup);
    const { sessionId: chat } = await c.agent.request(acp.methods.agent.session.new, { cwd: ROOT, mcpServers: [] });
    server.script({ text: "One." });
    await c.agent.request(acp.methods.agent.session.prompt, { sessionId: chat, prompt: text("one") });
    // The chat goes on in its fork; its first conversation stays `<chat>~main`.
    await c.agent.request(acp.methods.agent.session.prompt, { sessionId: chat, prompt: text("/chat:fork") });
    const main = `${chat}~main`;
    await c.agent.request(acp.methods.agent.session.load, { sessionId: main, cwd: ROOT, mcpServers: [] });
    const release = deferred();
    server.script(
      async () => {
        await release.promise;
        return { text: "In the fork." };
      },
      { text: "In main." },
    );
    const forkTurn = c.agent.request(acp.methods.agent.session.prompt, { sessionId: chat, prompt: text("to the fork") });
    await server.waitForRequest(2);
    const seen = c.updates.length;
    const mainTurn = c.agent.request(acp.methods.agent.session.prompt, { sessionId: main, prompt: text("to main") });
    // Read by the daemon while the fork's turn still waits for its model.
    await new Promise((r) => setTimeout(r, 300));
    release.resolve();
    expect(await forkTurn).toMatchObject({ stopReason: "end_turn" });
    expect(await mainTurn).toMatchObject({ stopReason: "end_turn" });
    // Each session was sent its own turn's updates only.
    const after = c.updates.slice(seen);
    const said = (sessionId: string) => after.filter((u) => u.sessionId === sessionId && u.update.sessionUpdate === "agent_message_chunk").map((u) => (u.update as { content: { text: string } }).content.text).join("");
    expect(said(main)).toBe("In main.");
    expect(said(chat)).toBe("In the fork.");
    c.close();
    await d.stop();
    // Each message is in its own conversation.
    const shown = async (name: string) => {
      const r = await cli(["conversation", "--agent", dir, `${chat}~${name}`, "--json"]);
      expect(r.code, r.stderr).toBe(0);
      return SessionForm.parse(JSON.parse(r.stdout)).events.flatMap((e) => (e.kind === "message" ? [e.text] : []));
    };
    expect(await shown("main")).toEqual(["one", "One.", "to main", "In main."]);
    expect(await shown("fork-3")).toEqual(["one", "One.", "to the fork", "In the fork."]);
  });

  it("bad input: one line, a non-zero status, nothing written", async () => {
    const dir = folder();
    const good = { thread: "kept", events: [{ v: 1, time: "2026-01-02T03:04:05.000Z", kind: "message", role: "user", text: "hi", header: "[Fri 2026-01-02 03:04]" }] };
    mkdirSync(join(dir, "chats", "real"), { recursive: true });
    writeFileSync(join(dir, "chats", "real", "000000000001.json"), `${JSON.stringify(good.events[0])}\n`);
    const before = listing(dir);
    for (const [args, input, message] of [
      [["conversation", "--agent", dir, "nobody"], "", /no conversation "nobody"/],
      [["conversation", "--agent", dir, "../etc"], "", /invalid thread name "..\/etc"/],
      [["conversation", "--agent", dir, "/etc/passwd"], "", /invalid thread name "\/etc\/passwd"/],
      [["conversation", "--agent", dir, "a\u001b[31mb"], "", /invalid thread name "a\\u001b\[31mb": must not hold control characters/],
      [["conversation", "--agent", dir, "real~nope"], "", /chat real has no conversation "nope" \(it has: main\)/],
      [["conversation", "--agent", dir, "real~../x"], "", /invalid conversation name "..\/x"/],
      [["conversation", "--agent", dir], "", /conversation takes a THREAD/],
      [["conversation", "--agent", dir, "real", "real"], "", /conversation takes one THREAD/],
      [["conversation", "--agent", join(dir, "none"), "real"], "", /no agent folder/],
      [["conversation", "--agent", dir, "real", "--since", "2026-01-01"], "", /conversation takes no --since/],
      [["conversations", "--agent", dir], "", /conversations takes "move out" or "move in"/],
      [["conversations", "move", "--agent", dir], "", /conversations move takes "out" or "in"/],
      [["conversations", "move", "out", "--agent", dir, "real", "../x"], "", /invalid thread name/],
      [["conversations", "move", "out", "--agent", dir, "--json"], "", /conversations takes no --json/],
      [["conversations", "move", "in", "--agent", dir, "a", "b"], "", /at most one FILE/],
      [["conversations", "move", "in", "--agent", dir, join(dir, "missing.json")], "", /cannot read .*missing\.json: ENOENT/],
      [["conversations", "move", "in", "--agent", dir], "{not json", /the sessions are not JSON: .* at line 1, column 2/],
      [["conversations", "move", "in", "--agent", dir], "", /the sessions are not JSON: it ends too soon/],
      [["conversations", "move", "in", "--agent", dir], "[1]", /not an ASP State of sessions: \(top\)/],
      [["conversations", "move", "in", "--agent", dir], JSON.stringify({ sessions: null }), /^lnk-link-harness: sessions: .*expected array, received null/],
      [["conversations", "move", "in", "--agent", dir], JSON.stringify({ sessions: [good, { ...good, thread: "../x" }] }), /sessions\.1\.thread/],
      [["conversations", "move", "in", "--agent", dir], JSON.stringify({ sessions: [good, { thread: "t", events: [{ ...good.events[0], time: "yesterday" }] }] }), /sessions\.1\.events\.0\.time/],
      [["conversations", "move", "in", "--agent", dir], JSON.stringify({ sessions: [good, { thread: "t", events: [{ ...good.events[0], role: "assistant" }] }] }), /sessions\.1\.events\.0\.model/],
      [["conversations", "move", "in", "--agent", dir], JSON.stringify({ sessions: [good], bogus: 1 }), /bogus/],
      [["conversations", "move", "in", "--agent", dir], JSON.stringify({ ...good, events: [{ ...good.events[0], kind: "note" }] }), /^lnk-link-harness: the session: events\.0\.kind: /],
      [["conversations", "move", "in", "--agent", dir], JSON.stringify({ ...good, extra: 1 }), /the session: \(top\): Unrecognized key/],
      // A part's own fields are loose, and JSON.parse makes "__proto__" an own key there: no export would carry it.
      [["conversations", "move", "in", "--agent", dir], `{"sessions":[${JSON.stringify(good)},{"thread":"t","events":[{"v":1,"time":"2026-01-02T03:04:05.000Z","kind":"message","role":"user","text":"hi","header":"h","parts":[{"type":"text","text":"x","__proto__":{"polluted":1}}]}]}]}`, /sessions\.1\.events\.0\.parts\.0: the key "__proto__" is not allowed/],
      [["conversations", "move", "in", "--agent", dir], `{"thread":"t","events":[{"v":1,"time":"2026-01-02T03:04:05.000Z","kind":"message","role":"assistant","text":"yo","model":"m","provider":"p","latency_ms":0,"stop":"end_turn","thinking":{"reasoning_details":[{"__proto__":{}}]}}]}`, /the session: events\.0\.thinking\.reasoning_details\.0: the key "__proto__" is not allowed/],
    ] as const) {
      const r = await cli([...args], input);
      expect(r.code, `${args.join(" ")} ${input}`).toBe(2);
      expect(r.stdout).toBe("");
      expect(r.stderr).toMatch(/^lnk-link-harness: [^\n]+\n$/);
      expect(r.stderr).toMatch(message);
      expect(listing(dir)).toEqual(before);
    }
  });

  it("conversations of hundreds of MiB are shown and moved out an event at a time; past what move in takes, left out and named", async () => {
    const dir = folder(false);
    // Events of 8 MiB each (a photo as a data: URL): 144 MiB in chat a, 120 in chat b.
    const photo = `data:image/png;base64,${"A".repeat(8 * 1024 * 1024)}`;
    const said = (i: number) => `${JSON.stringify({ v: 1, time: new Date(Date.UTC(2026, 0, 2, 3, 4, i)).toISOString(), kind: "message", role: "user", text: `photo ${i}`, header: "[h]", parts: [{ type: "image_url", image_url: { url: photo } }] })}\n`;
    for (const [chat, count] of [["a", 18], ["b", 15]] as const) {
      mkdirSync(join(dir, "chats", chat), { recursive: true });
      for (let i = 1; i <= count; i++) writeFileSync(join(dir, "chats", chat, `${String(i).padStart(12, "0")}.json`), said(i));
    }
    // A heap smaller than either chat: held whole, each would run it out. What is printed goes to a file.
    const printed = join(dir, "printed.json");
    const small = (args: string[]) => run("/bin/sh", ["-c", `exec "$0" --max-old-space-size=96 "$@" > "${printed}"`, process.execPath, MAIN, ...args], { ms: 120_000 });
    const shown = await small(["conversation", "--agent", dir, "a"]);
    expect(shown.code, shown.stderr).toBe(0);
    expect(readFileSync(printed, "utf8").split("\n")[0]).toBe("Conversation a: 18 events, 2026-01-02 03:04:01 UTC to 2026-01-02 03:04:18 UTC");
    // Every one: a is printed, b would take the State past the 256 MiB move in reads, and is named.
    const all = await small(["conversations", "move", "out", "--agent", dir]);
    expect(all.code, all.stderr).toBe(0);
    expect(all.stderr).toMatch(/^lnk-link-harness: left out: chats\/b: past the \d+ bytes conversations move in takes: move it out by its name\n$/);
    const state = readFileSync(printed);
    expect(state.length).toBeGreaterThan(144 * 1024 * 1024);
    expect(state.length).toBeLessThan(256 * 1024 * 1024);
    expect(state.subarray(0, 60).toString()).toContain('"thread": "a"');
    expect(state.indexOf('"thread": "b"')).toBe(-1);
    expect(state.subarray(-12).toString()).toBe("    }\n  ]\n}\n");
    // Named, both at once, are refused whole: nothing printed.
    const named = await small(["conversations", "move", "out", "--agent", dir, "a", "b"]);
    expect(named.code).toBe(2);
    expect(statSync(printed).size).toBe(0);
    expect(named.stderr).toMatch(/^lnk-link-harness: the conversations named print \d+ bytes, over the \d+ conversations move in takes: move them out a few at a time\n$/);
  }, 240_000);

  it("thousands of sessions of one thread each take the next free name at once, never one that is there", async () => {
    const dir = folder(false);
    const said = { v: 1, time: "2026-01-02T03:04:05.000Z", kind: "message", role: "user", text: "mine", header: "[h]" };
    for (const name of ["a", "a-3"]) {
      mkdirSync(join(dir, "chats", name), { recursive: true });
      writeFileSync(join(dir, "chats", name, "000000000001.json"), `${JSON.stringify(said)}\n`);
    }
    const before = listing(dir);
    // Each looked at every name before its own: 4,000 took over a minute, 8,000 four.
    const count = 4000;
    const sessions = Array.from({ length: count }, (_, i) => ({ thread: "a", events: i === 0 ? [{ ...said, text: "theirs" }] : [] }));
    const started = Date.now();
    const r = await cli(["conversations", "move", "in", "--agent", dir], JSON.stringify({ sessions }));
    expect(r.code, r.stderr).toBe(0);
    expect(Date.now() - started).toBeLessThan(20_000);
    const as = Imported.parse(JSON.parse(r.stdout)).imported.map((i) => i.as);
    expect(as.slice(0, 3)).toEqual(["a-2", "a-4", "a-5"]);
    expect(new Set(as).size).toBe(count);
    expect(as.filter((name) => ["a", "a-3"].includes(name))).toEqual([]);
    expect(readdirSync(join(dir, "chats")).length).toBe(count + 2);
    // What was there is as it was.
    expect(listing(dir).filter((f) => before.includes(f))).toEqual(before);
    for (const name of ["a", "a-3"]) expect(readFileSync(join(dir, "chats", name, "000000000001.json"), "utf8")).toBe(`${JSON.stringify(said)}\n`);
    expect(readFileSync(join(dir, "chats", "a-2", "000000000001.json"), "utf8")).toContain('"theirs"');
  });

  it("two imports at once of thousands of sessions of one thread, some of no events: each session under a name of its own, none taken from the other", async () => {
    // A name looked at, then a rename onto it, took the empty folder the other import made in
    // between for a session of no events: both named it, and that session was gone. Each round ran
    // both imports' placing at once, and hundreds of names were said twice in every one.
    const count = 3000;
    for (let round = 0; round < 3; round++) {
      const dir = folder(false);
      const input = (who: string) =>
        JSON.stringify({
          sessions: Array.from({ length: count }, (_, i) => ({
            thread: "t",
            events: i % 10 === 0 ? [{ v: 1, time: "2026-01-02T03:04:05.000Z", kind: "message", role: "user", text: `${who} ${i}`, header: "[h]" }] : [],
          })),
        });
      const runs = await Promise.all(["a", "b"].map((who) => cli(["conversations", "move", "in", "--agent", dir], input(who))));
      const placed = new Map<string, string>();
      runs.forEach((r, n) => {
        expect(r.code, r.stderr).toBe(0);
        const imported = Imported.parse(JSON.parse(r.stdout)).imported;
        expect(imported).toHaveLength(count);
        imported.forEach((s, i) => {
          expect(placed.get(s.as), `chats/${s.as}/ said by both imports`).toBeUndefined();
          placed.set(s.as, s.events === 0 ? "" : `${["a", "b"][n]} ${i}`);
        });
      });
      // On disk: a conversation for each name said, holding what that session held, and nothing else
      // (no claim of a name, nor a staging folder, is left).
      const chats = readdirSync(join(dir, "chats")).sort();
      expect(chats).toEqual([...placed.keys()].sort());
      for (const [as, said] of placed) {
        const events = readdirSync(join(dir, "chats", as));
        if (said === "") expect(events, `chats/${as}/`).toEqual([]);
        else {
          expect(events, `chats/${as}/`).toEqual(["000000000001.json"]);
          expect(z.object({ text: z.string() }).loose().parse(JSON.parse(readFileSync(join(dir, "chats", as, "000000000001.json"), "utf8"))).text).toBe(said);
        }
      }
    }
  });

  it.skipIf(!strace)("a name an import is putting a session under is no conversation to any reader or writer until the session is whole there", async () => {
    // The import is stopped (by strace) just after the first system call that names the thread's
    // folder, between taking the name and putting the session there. A name taken by making its
    // folder was, until then, an empty conversation that session/list listed, session/load loaded,
    // move out gave, and a prompt could write in.
    const dir = realpathSync(folder());
    const chats = join(dir, "chats");
    mkdirSync(chats);
    const traced = tempDir("lnk-conversations-trace-");
    cleanup.push(() => traced.remove());
    const trace = join(traced.path, "trace");
    const readIfThere = (path: string) => {
      try {
        return readFileSync(path, "utf8");
      } catch {
        return "";
      }
    };
    const read = () => readIfThere(trace);
    const said = (s: string) => ({ v: 1, time: "2026-01-02T03:04:05.000Z", kind: "message", role: "user", text: s, header: "[h]" });
    let first: Run | undefined;
    const importing = run(
      "strace",
      ["-f", "-o", trace, "-P", join(chats, "n"), "-e", "inject=all:signal=SIGSTOP:when=1", process.execPath, MAIN, "conversations", "move", "in", "--agent", dir],
      { input: JSON.stringify({ sessions: [{ thread: "n", events: [said("first"), said("first, again")] }] }), env: { PATH: process.env.PATH ?? "/usr/bin:/bin" }, ms: 120_000 },
    ).then((r) => (first = r));
    let pid = 0;
    await until(() => (pid = Number(/^(\d+) +--- SIGSTOP /m.exec(read())?.[1] ?? 0)) > 0 || first !== undefined, "the import stopped", 60_000);
    expect(pid, `${first?.stderr ?? ""}\n${read()}`).toBeGreaterThan(0);
    // A stopped process outlives its tracer: it is killed whatever this test comes to.
    cleanup.push(() => {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        // gone
      }
    });
    const d = daemon(dir);
    const c = await stdioClient(d, cleanup);
    expect((await c.agent.request(acp.methods.agent.session.list, {})).sessions).toEqual([]);
    expect(await failure(c.agent.request(acp.methods.agent.session.load, { sessionId: "n", cwd: ROOT, mcpServers: [] }))).toMatchObject({ code: -32002 });
    const out = await cli(["conversations", "move", "out", "--agent", dir]);
    expect(out.code, out.stderr).toBe(0);
    expect(AspState.parse(JSON.parse(out.stdout)).sessions).toEqual([]);
    // In chats/, nothing but what the store's own names (a leading dot) hold.
    expect(readdirSync(chats).filter((name) => !name.startsWith("."))).toEqual([]);
    // Another import meanwhile passes the name over, as taken.
    const second = await cli(["conversations", "move", "in", "--agent", dir], JSON.stringify({ sessions: [{ thread: "n", events: [said("second")] }] }));
    expect(second.code, second.stderr).toBe(0);
    expect(Imported.parse(JSON.parse(second.stdout)).imported.map((i) => i.as)).toEqual(["n-2"]);
    // A turn under the name makes its own conversation there.
    const { sessionId } = await c.agent.request(acp.methods.agent.session.new, { cwd: ROOT, mcpServers: [], _meta: { link: { thread: "n" } } });
    expect(sessionId).toBe("n");
    server.script({ text: "Yours." });
    await c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: text("whose is this?") });
    // Let go: it puts its session under the next free name, and leaves nothing else.
    await until(
      () => {
        if (/^State:\s+[tT]/m.test(readIfThere(`/proc/${pid}/status`))) process.kill(pid, "SIGCONT");
        return first !== undefined;
      },
      "the import done",
      60_000,
    );
    await importing;
    expect(first?.code, first?.stderr).toBe(0);
    expect(Imported.parse(JSON.parse(first?.stdout ?? "")).imported.map((i) => i.as)).toEqual(["n-3"]);
    expect(readdirSync(chats).sort()).toEqual(["n", "n-2", "n-3"]);
    const texts = async (thread: string) =>
      (AspState.parse(JSON.parse((await cli(["conversations", "move", "out", "--agent", dir, thread])).stdout)).sessions ?? []).flatMap((s) => s.events.flatMap((e) => ("text" in e ? [e.text] : [])));
    expect(await texts("n")).toEqual(["whose is this?", "Yours."]);
    expect(await texts("n-2")).toEqual(["second"]);
    expect(await texts("n-3")).toEqual(["first", "first, again"]);
  });

  it("a claim of a name a killed import left is removed by the next import; one of a process still there keeps the name from every import", async () => {
    const dir = folder(false);
    const chats = join(dir, "chats");
    mkdirSync(chats);
    const claim = (name: string) => `.claim-${createHash("sha256").update(name).digest("hex").slice(0, 32)}`;
    const gone = spawnSync(process.execPath, ["-e", "0"]).pid as number;
    writeFileSync(join(chats, claim("gone")), `${thisHost()}-${gone}`);
    writeFileSync(join(chats, claim("held")), `${thisHost()}-${process.pid}`);
    // Made, and whose it is never written: known by its age alone.
    writeFileSync(join(chats, claim("young")), "");
    writeFileSync(join(chats, claim("old")), "");
    const hoursAgo = new Date(Date.now() - 2 * 3600_000);
    utimesSync(join(chats, claim("old")), hoursAgo, hoursAgo);
    const threads = ["gone", "held", "young", "old"];
    const said = { v: 1, time: "2026-01-02T03:04:05.000Z", kind: "message", role: "user", text: "hi", header: "[h]" };
    const r = await cli(["conversations", "move", "in", "--agent", dir], JSON.stringify({ sessions: threads.map((thread) => ({ thread, events: [said] })) }));
    expect(r.code, r.stderr).toBe(0);
    expect(Imported.parse(JSON.parse(r.stdout)).imported.map((i) => i.as)).toEqual(["gone", "held-2", "young-2", "old"]);
    expect(readdirSync(chats).sort()).toEqual([claim("held"), claim("young"), "gone", "held-2", "old", "young-2"].sort());
  });

  it("an event holding a key __proto__ is given without it, and said so: what is given, any import takes", async () => {
    const dir = folder(false);
    const chat = join(dir, "chats", "proto");
    mkdirSync(chat, { recursive: true });
    // A part's own fields are loose: JSON.parse makes "__proto__" an own key there.
    writeFileSync(join(chat, "000000000001.json"), '{"v":1,"time":"2026-01-02T03:04:05.000Z","kind":"message","role":"user","text":"hi","header":"[h]","parts":[{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA","__proto__":{"x":1}}}]}\n');
    const out = await cli(["conversations", "move", "out", "--agent", dir]);
    expect(out.code, out.stderr).toBe(0);
    expect(out.stderr).toBe('lnk-link-harness: left out of proto: the key "__proto__" of 1 event of the chat, which no State may hold\n');
    expect(out.stdout).not.toContain("__proto__");
    const target = folder(false);
    const taken = await cli(["state", "import", "--agent", target], out.stdout);
    expect(taken.code, taken.stderr).toBe(0);
    expect(readFileSync(join(target, "chats", "proto", "000000000001.json"), "utf8")).toContain("data:image/png;base64,AAAA");
  });

  it("a conversation folder with hostile content: the bad event or the link named, never a crash", async () => {
    const dir = folder(false);
    const event = { v: 1, time: "2026-01-02T03:04:05.000Z", kind: "message", role: "user", text: "hi\u001b]0;owned\u0007 \u202Egpj.exe", header: "[Fri]" };
    const chat = join(dir, "chats", "odd");
    mkdirSync(chat, { recursive: true });
    writeFileSync(join(chat, "000000000001.json"), `${JSON.stringify(event)}\n`);
    // Escapes that would act on a terminal, or make text read other than it is, are shown as escapes.
    const shown = await cli(["conversation", "--agent", dir, "odd"]);
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stdout).toContain("hi\\u{1b}]0;owned\\u{7} \\u{202e}gpj.exe");
    for (const c of ["\u001b", "\u0007", "\u202e"]) expect(shown.stdout).not.toContain(c);

    writeFileSync(join(chat, "000000000002.json"), `${JSON.stringify({ ...event, kind: "note" })}\n`);
    for (const args of [["conversation", "--agent", dir, "odd"], ["conversation", "--agent", dir, "odd", "--json"], ["conversations", "move", "out", "--agent", dir, "odd"]]) {
      const r = await cli(args);
      expect(r.code, args.join(" ")).toBe(1);
      expect(r.stdout).toBe("");
      expect(r.stderr).toMatch(/^lnk-link-harness: cannot read conversation odd: event \S+000000000002\.json fails its schema: [^\n]+\n$/);
    }
    writeFileSync(join(chat, "000000000002.json"), "{");
    expect((await cli(["conversation", "--agent", dir, "odd"])).stderr).toMatch(/000000000002\.json is not JSON/);
    rmSync(join(chat, "000000000002.json"));
    // Events that skip a number: given up to it, what was left out said.
    writeFileSync(join(chat, "000000000003.json"), `${JSON.stringify(event)}\n`);
    const gap = await cli(["conversation", "--agent", dir, "odd", "--json"]);
    expect(gap.code, gap.stderr).toBe(0);
    expect(gap.stderr).toBe("lnk-link-harness: left out: its events after number 2, which is missing\n");
    expect(SessionForm.parse(JSON.parse(gap.stdout)).events).toHaveLength(1);
    rmSync(join(chat, "000000000003.json"));

    // A conversation's folder that is a link is refused, never followed.
    const elsewhere = join(dir, "elsewhere");
    mkdirSync(elsewhere);
    writeFileSync(join(elsewhere, "000000000001.json"), `${JSON.stringify(event)}\n`);
    symlinkSync(elsewhere, join(dir, "chats", "linked"));
    const linked = await cli(["conversation", "--agent", dir, "linked"]);
    expect(linked.code).toBe(1);
    expect(linked.stderr).toMatch(/^lnk-link-harness: cannot read conversation linked: refused: [^\n]*symbolic link[^\n]*\n$/);
    // Moving every conversation out gives those that are folders, as _asp/export does: a link is none.
    const all = await cli(["conversations", "move", "out", "--agent", dir]);
    expect(all.code, all.stderr).toBe(0);
    expect((AspState.parse(JSON.parse(all.stdout)).sessions ?? []).map((s) => s.thread)).toEqual(["odd"]);
    // Moved in, the odd text is kept as it was.
    const target = folder(false);
    const into = await cli(["conversations", "move", "in", "--agent", target], all.stdout);
    expect(into.code, into.stderr).toBe(0);
    expect(readFileSync(join(target, "chats", "odd", "000000000001.json"), "utf8")).toContain("\\u001b]0;owned");
  });

  it("a folder of chats/ whose name is not UTF-8 text is left out and named by every reader of all conversations; the rest still go", async () => {
    const dir = folder();
    const event = { v: 1, time: "2026-01-02T03:04:05.000Z", kind: "message", role: "user", text: "hello", header: "[Fri]" };
    for (const name of [Buffer.from("alpha"), Buffer.from([0x62, 0x61, 0x64, 0xff, 0xfe]), Buffer.from("zulu")]) {
      // Named by its bytes: read as a string, "bad\xff\xfe" is "bad\ufffd\ufffd", a valid thread name of no folder.
      const at = Buffer.concat([Buffer.from(`${join(dir, "chats")}/`), name]);
      mkdirSync(at, { recursive: true, mode: 0o700 });
      writeFileSync(Buffer.concat([at, Buffer.from("/000000000001.json")]), `${JSON.stringify(event)}\n`);
    }
    const said = "left out: chats/bad\\xff\\xfe: its name is not UTF-8 text";
    const out = await cli(["conversations", "move", "out", "--agent", dir]);
    expect(out.code, out.stderr).toBe(0);
    expect(out.stderr).toBe(`lnk-link-harness: ${said}: not read\n`);
    expect((AspState.parse(JSON.parse(out.stdout)).sessions ?? []).map((s) => s.thread)).toEqual(["alpha", "zulu"]);
    const usage = await cli(["usage", "--agent", dir, "--json"]);
    expect(usage.code, usage.stderr).toBe(0);
    expect(usage.stderr).toBe(`lnk-link-harness: ${said}\n`);
    expect(z.object({ conversations: z.array(z.object({ thread: z.string() }).loose()) }).loose().parse(JSON.parse(usage.stdout)).conversations.map((c) => c.thread)).toEqual(["alpha", "zulu"]);
    // _asp/export: the same sessions, and the same name said in the log.
    const d = daemon(dir);
    const c = await stdioClient(d, cleanup);
    expect((await exported(c)).map((x) => x.thread)).toEqual(["alpha", "zulu"]);
    expect(await d.waitForLog(/left out of the export/)).toContain('"path":"chats/bad\\\\xff\\\\xfe","why":"its name is not UTF-8 text: not read"');
  });
});
