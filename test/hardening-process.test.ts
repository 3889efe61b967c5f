// The daemon as a process, against what goes wrong around it: a module that fails to load once, two
// daemons starting on one stale socket, a read-only agent folder, a restart between a group's turns.
// Each runs the built daemon as a child process with the scripted model server.
import { spawn, spawnSync } from "node:child_process";
import { copyFileSync, cpSync, existsSync, lstatSync, mkdirSync, readFileSync, readdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { connect as netConnect, type Socket } from "node:net";
import { basename, join } from "node:path";
import * as acp from "@agentclientprotocol/sdk";
import type { ContentBlock } from "@agentclientprotocol/sdk";
import { describe, expect, it } from "vitest";
import { answerText, configure, daemonTestHooks, openClient, scriptedSettings, socketStream, startDaemon, tempDir, watchDaemon, type Client, type Daemon, failure, stdioClient, watched } from "./acp-client.js";
import { AGENT_BUNDLE, BIN, MAIN, ROOT } from "./fixtures/built.js";
import { linkFreeEnv } from "./fixtures/env.js";
import { lastUserText, type ModelServer, type RecordedRequest } from "./model-server.js";

const EVERYTHING = `"${process.execPath}" "${join(ROOT, "node_modules/@modelcontextprotocol/server-everything/dist/index.js")}" stdio`;

let server: ModelServer;
const cleanup = daemonTestHooks([BIN, "dist/daemon/serve.js", "dist/daemon/socket.js", "dist/daemon/lines.js", "dist/acp/app.js"], (s) => (server = s));

function agent(extra: Record<string, unknown> = {}): string {
  const dir = tempDir("lnk-hard-");
  cleanup.push(() => dir.remove());
  configure(dir.path, scriptedSettings(server.url, extra));
  return dir.path;
}

function watch(d: Daemon): Daemon {
  return watched(d, cleanup);
}

async function client(d: Daemon): Promise<Client> {
  return stdioClient(d, cleanup);
}

const text = (s: string): ContentBlock[] => [{ type: "text", text: s }];
const toolNames = (r: RecordedRequest | undefined) => ((r?.body as { tools?: { function: { name: string } }[] } | undefined)?.tools ?? []).map((t) => t.function.name);


/**
 * `dst` as `src` seen through symbolic links, but for the files named in `own` (paths relative to
 * `src`), which are copies of their own: a file there can be broken without touching `src`.
 */
function shadow(src: string, dst: string, own: readonly string[]): void {
  mkdirSync(dst, { recursive: true });
  for (const name of readdirSync(src)) {
    const mine = own.filter((p) => p === name || p.startsWith(`${name}/`));
    if (mine.length === 0) symlinkSync(join(src, name), join(dst, name));
    else if (lstatSync(join(src, name)).isDirectory()) shadow(join(src, name), join(dst, name), mine.map((p) => p.slice(name.length + 1)).filter(Boolean));
    else copyFileSync(join(src, name), join(dst, name));
  }
}

/**
 * A copy of the built program in a folder of its own, as installed: its dist/ and the files it reads
 * copied, its packages seen through links but for `own`. `modules`: without the agent's bundle, so
 * the agent runs from the ES modules beside it.
 */
function copyOfBuild(own: readonly string[], o: { modules?: boolean } = {}): { bin: string; path(rel: string): string } {
  const tmp = tempDir("lnk-hard-build-");
  cleanup.push(() => tmp.remove());
  const skipped = [join(ROOT, "dist", "test"), ...(o.modules ? [join(ROOT, AGENT_BUNDLE)] : [])];
  cpSync(join(ROOT, "dist"), join(tmp.path, "dist"), { recursive: true, filter: (p) => !skipped.some((s) => p.startsWith(s)) });
  for (const file of ["package.json", "protocol/model-facts.toml"]) cpSync(join(ROOT, file), join(tmp.path, file));
  shadow(join(ROOT, "node_modules"), join(tmp.path, "node_modules"), own);
  return { bin: join(tmp.path, BIN), path: (rel) => join(tmp.path, rel) };
}

/** Makes a module's file fail to load (a syntax error, kept by Node's loader as a read that failed is); gives a way to mend it. */
function breakModule(path: string): () => void {
  const good = readFileSync(path);
  writeFileSync(path, "export const broken = ;\n");
  return () => writeFileSync(path, good);
}

describe("a module that failed to load once (a build without the agent's bundle)", { timeout: 120_000 }, () => {
  it("is loaded again by the next prompt: the turn, openai, the tool host and the MCP SDK", async () => {
    const OPENAI = "openai/index.mjs";
    const SDK = "@modelcontextprotocol/sdk/dist/esm/client/index.js";
    const build = copyOfBuild([OPENAI, SDK], { modules: true });
    const dir = agent();
    const d = watch(startDaemon(["--agent", dir], linkFreeEnv({ LNK_TOOL_EVERYTHING: EVERYTHING }), { bin: build.bin }));
    const c = await client(d);
    const { sessionId } = await c.agent.request(acp.methods.agent.session.new, { cwd: dir, mcpServers: [] });
    const prompt = (s: string) => c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: text(s) });

    const mendTurn = breakModule(build.path("dist/turn/turn.js"));
    const mendOpenai = breakModule(build.path(`node_modules/${OPENAI}`));
    const mendHost = breakModule(build.path("dist/daemon/tools/host.js"));
    const mendSdk = breakModule(build.path(`node_modules/${SDK}`));

    expect((await failure(prompt("one"))).code).toBe(-32603);
    mendTurn();
    // The turn loads now, and fails where openai is loaded.
    expect((await failure(prompt("two"))).code).toBe(-32603);
    expect(server.requests).toHaveLength(0);
    mendOpenai();
    server.script({ text: "three answered" });
    expect(await prompt("three")).toMatchObject({ stopReason: "end_turn" });
    expect(answerText(c.updates)).toMatch(/three answered$/);
    // Without its tool host the turn ran without tools.
    expect(toolNames(server.requests.at(-1))).toEqual([]);
    mendHost();
    server.script({ text: "four answered" });
    expect(await prompt("four")).toMatchObject({ stopReason: "end_turn" });
    // The host loads now; without the MCP SDK no tool could be listed.
    expect(toolNames(server.requests.at(-1))).toEqual([]);
    mendSdk();
    server.script({ text: "five answered" });
    expect(await prompt("five")).toMatchObject({ stopReason: "end_turn" });
    expect(answerText(c.updates)).toMatch(/five answered$/);
    expect(toolNames(server.requests.at(-1))).toContain("everything__echo");
  });
});

describe("a moment of EMFILE at the first turn", { timeout: 120_000 }, () => {
  // From the ES modules, with no file left, the turn's own module fails to load; with one, whatever
  // did not get that one file fails: the turn's own module when the prompt's owed file took it first,
  // one it imports when several are read at once, or the conversation's first file when they were
  // read one after another. From the bundle, every module is loaded with the agent, and the turn
  // fails at the first file of the conversation it can't open.
  it.skipIf(!existsSync("/proc/self/fd")).each([
    [0, "modules", "the turn's module", /EMFILE.*turn\/turn\.js/],
    [1, "modules", "what did not get the one file", /EMFILE/],
    [0, "bundle", "the conversation's files", /EMFILE/],
  ] as const)("fails that turn only: the next loads what the first could not (%i files left, from the %s: %s)", async (free, from, _what, why) => {
    const main = from === "modules" ? copyOfBuild([], { modules: true }).bin : MAIN;
    const dir = agent();
    const socket = join(dir, "control.sock");
    const LIMIT = 128;
    const d = watch(
      watchDaemon(
        spawn("sh", ["-c", `ulimit -n ${LIMIT} && exec "$0" "$@"`, process.execPath, main, "--agent", dir, "--socket", socket], {
          env: linkFreeEnv({ LNK_DEBUG: "1" }),
          stdio: ["pipe", "pipe", "pipe"],
        }),
      ),
    );
    await d.waitForLog(/"serving ACP"/);
    const a = await socketStream(socket);
    cleanup.push(() => a.socket.destroy());
    const c = await openClient(a.stream);
    const { sessionId } = await c.agent.request(acp.methods.agent.session.new, { cwd: dir, mcpServers: [] });
    // What the session's opening asks ahead (the model's facts, its client) is done before the files run out.
    await d.waitForLog(/"made ready for a first turn"/);

    // Connections until the daemon can take no more: each one it takes holds a file of it open, and
    // answers initialize; the first it can't take is closed unanswered.
    const held: Socket[] = [];
    for (let n = 0; n < LIMIT; n++) {
      const conn = netConnect(socket);
      conn.on("error", () => undefined);
      held.push(conn);
      conn.write(`${JSON.stringify({ jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: 1 } })}\n`);
      const taken = await new Promise<boolean>((resolve) => {
        conn.once("data", () => resolve(true));
        conn.once("close", () => resolve(false));
      });
      if (!taken) break;
    }
    const letGo = (conn: Socket) =>
      new Promise<void>((resolve) => {
        if (conn.destroyed) return resolve();
        conn.once("close", () => resolve());
        conn.end();
      });
    await Promise.all(held.splice(0, free).map(letGo));
    const first = await failure(c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: text("one") }));
    expect(first).toMatchObject({ code: -32603, message: expect.stringMatching(why) });

    // Each connection let go, and closed by the daemon: its file is free again.
    await Promise.all(held.map(letGo));
    server.script({ text: "two answered" });
    expect(await c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: text("two") })).toMatchObject({ stopReason: "end_turn" });
    expect(answerText(c.updates)).toBe("two answered");
  });
});

describe("the agent's kept compiled code", { timeout: 120_000 }, () => {
  it.each([
    ["as built", () => undefined, "kept"],
    ["damaged after its digest", (cache: string) => writeFileSync(cache, Buffer.concat([readFileSync(cache).subarray(0, 32), Buffer.alloc(4096, 0x5a)])), "rejected"],
    ["damaged whole", (cache: string) => writeFileSync(cache, Buffer.alloc(4096, 0x5a)), "another bundle's"],
    ["missing", (cache: string) => rmSync(cache), "none kept"],
    ["cut short", (cache: string) => writeFileSync(cache, readFileSync(cache).subarray(0, 64)), "rejected"],
    // V8 itself checks only the source's length: a bundle changed within the same length, its code
    // kept from before, would run the old functions. Here a log line's words change, same length.
    [
      "kept for another bundle of the same length",
      (cache: string) => {
        const bundle = cache.replace(/\.cache$/, "");
        const text = readFileSync(bundle, "latin1");
        expect(text).toContain("made ready for a first turn");
        writeFileSync(bundle, text.replace("made ready for a first turn", "MADE READY FOR A FIRST TURN"), "latin1");
      },
      "another bundle's",
    ],
  ] as const)("%s: is taken, or the bundle is compiled from its source, and the agent answers", async (what, spoil, code) => {
    const build = copyOfBuild([]);
    spoil(build.path(`${AGENT_BUNDLE}.cache`));
    const dir = agent();
    const d = watch(startDaemon(["--agent", dir], linkFreeEnv({ LNK_DEBUG: "1" }), { bin: build.bin }));
    const c = await client(d);
    const { sessionId } = await c.agent.request(acp.methods.agent.session.new, { cwd: dir, mcpServers: [] });
    server.script({ text: "answered" });
    expect(await c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: text("one") })).toMatchObject({ stopReason: "end_turn" });
    expect(answerText(c.updates)).toBe("answered");
    expect(d.stderr()).toContain(`"msg":"agent loaded","ms":`);
    expect(d.stderr()).toMatch(new RegExp(`"msg":"agent loaded","ms":\\d+,"code":"${code}"`));
    // The code that ran is the bundle's as it stands (said once the session's asks of the model are
    // answered, which its first prompt no longer waits for).
    await d.waitForLog(what.startsWith("kept for another") ? /"msg":"MADE READY FOR A FIRST TURN"/ : /"msg":"made ready for a first turn"/);
  });
});

describe("the agent, when it failed to load", { timeout: 120_000 }, () => {
  it("is loaded again for the next connection to the socket", async () => {
    const build = copyOfBuild([]);
    const dir = agent();
    const socket = join(dir, "control.sock");
    const mend = breakModule(build.path(AGENT_BUNDLE));
    const d = watch(startDaemon(["--agent", dir, "--socket", socket], linkFreeEnv(), { bin: build.bin }));
    await d.waitForLog(/"serving ACP"/);
    // initialize is answered by the connection's front; what comes after needs the agent.
    const first = await socketStream(socket);
    cleanup.push(() => first.socket.destroy());
    const c1 = await openClient(first.stream);
    void c1.agent.request(acp.methods.agent.session.list, {}).catch(() => undefined);
    await c1.closed;
    expect(d.stderr()).toMatch(/"connection ended".*the agent could not be loaded/);
    mend();
    const second = await socketStream(socket);
    cleanup.push(() => second.socket.destroy());
    const c2 = await openClient(second.stream);
    expect(await c2.agent.request(acp.methods.agent.session.list, {})).toEqual({ sessions: [] });
  });

  it("on stdio, ends the daemon with status 1 and says why", async () => {
    const build = copyOfBuild([]);
    breakModule(build.path(AGENT_BUNDLE));
    const d = watch(startDaemon(["--agent", agent()], linkFreeEnv(), { bin: build.bin }));
    const c = await client(d);
    void c.agent.request(acp.methods.agent.session.list, {}).catch(() => undefined);
    expect(await d.exited).toEqual({ code: 1, signal: null });
    expect(d.stderr()).toMatch(/"level":"error","msg":"connection ended","error":"the agent could not be loaded: /);
  });
});

describe("what session/new and session/prompt refuse, and why", { timeout: 60_000 }, () => {
  it("a time no event can hold is refused -32602 and writes nothing; one at the edge of what it can hold is taken", async () => {
    const dir = agent();
    const d = watch(startDaemon(["--agent", dir], linkFreeEnv()));
    const c = await client(d);
    const { sessionId } = await c.agent.request(acp.methods.agent.session.new, { cwd: dir, mcpServers: [] });
    const prompt = (time: string) => c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: text("when?"), _meta: { link: { time } } });
    // Past Date's range, or in range but a year past 9999 or before 0000 once in UTC.
    for (const time of ["+999999-01-01T00:00:00Z", "275760-09-13T00:00:00.001Z", "9999-12-31T23:59:59-23:59", "0000-01-01T00:00:00+23:59"]) {
      expect(await failure(prompt(time)), time).toMatchObject({ code: -32602, message: expect.stringMatching(/time/) });
    }
    // Nothing was written: the session's folder is not even made (that waits for its first event).
    expect(existsSync(join(dir, "chats", sessionId))).toBe(false);
    server.script({ text: "at the edge" });
    expect(await prompt("9999-12-31T23:59:59+00:00")).toMatchObject({ stopReason: "end_turn" });
    expect(lastUserText(server.requests.at(-1) as RecordedRequest)).toMatch(/^\[9999-12-31 23:59 UTC · direct · your owner\]/);
  });

  it("a thread name with a bidirectional control character is refused -32602, and no folder is made", async () => {
    const dir = agent();
    const d = watch(startDaemon(["--agent", dir], linkFreeEnv()));
    const c = await client(d);
    for (const thread of ["evil\u202Egpj.exe", "a\u202Ab", "\u2066x\u2069", "a\u2067b", "left\u200Eright", "a\u200Fb", "a\u061Cb"]) {
      const refused = await failure(c.agent.request(acp.methods.agent.session.new, { cwd: dir, mcpServers: [], _meta: { link: { thread } } }));
      expect(refused, JSON.stringify(thread)).toMatchObject({ code: -32602, message: expect.stringMatching(/bidirectional/) });
    }
    // A group's thread is made of its channel and id: the same rule holds.
    const group = await failure(c.agent.request(acp.methods.agent.session.new, { cwd: dir, mcpServers: [], _meta: { link: { channel: "telegram", group: "g\u202E1" } } }));
    expect(group.code).toBe(-32602);
    expect(existsSync(join(dir, "chats")) ? readdirSync(join(dir, "chats")) : []).toEqual([]);
  });

  const roBind = (() => {
    if (process.getuid?.() !== 0) return false;
    const probe = tempDir("lnk-hard-ro-");
    try {
      const r = spawnSync("unshare", ["-m", "sh", "-c", 'mount --bind -o ro "$0" "$0" && touch "$0/x"', probe.path], { encoding: "utf8" });
      return /Read-only file system/.test(r.stderr);
    } finally {
      probe.remove();
    }
  })();

  it.skipIf(!roBind)("a conversation's folder that can't be made on a read-only agent folder says EROFS, the real cause, not ENOENT", async () => {
    const dir = agent();
    // The daemon in a mount namespace of its own, where the agent's folder is bound read-only onto itself.
    const d = watch(
      watchDaemon(
        spawn("unshare", ["-m", "sh", "-c", 'mount --bind -o ro "$0" "$0" && exec "$1" "$2" --agent "$0"', dir, process.execPath, MAIN], {
          env: linkFreeEnv(),
          stdio: ["pipe", "pipe", "pipe"],
        }),
      ),
    );
    const c = await client(d);
    // A thread it names is made at session/new; one it makes, at the first event: each says why it can't be.
    const named = await failure(c.agent.request(acp.methods.agent.session.new, { cwd: dir, mcpServers: [], _meta: { link: { thread: "t1" } } }));
    const { sessionId } = await c.agent.request(acp.methods.agent.session.new, { cwd: dir, mcpServers: [] });
    const first = await failure(c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: text("hello") }));
    for (const refused of [named, first]) {
      expect(refused.code).toBe(-32603);
      expect(refused.message).toMatch(/EROFS/);
      expect(refused.message).not.toMatch(/ENOENT/);
    }
  });
});

describe("_meta.link.agent", { timeout: 60_000 }, () => {
  it("naming the agent this process serves (its folder's name) is taken; naming another is refused -32602, and its cancel stops nothing", async () => {
    const dir = agent();
    const name = basename(dir);
    const d = watch(startDaemon(["--agent", dir], linkFreeEnv()));
    const c = await client(d);
    const other = { link: { agent: "someone-else" } };
    const own = { link: { agent: name } };
    const { sessionId } = await c.agent.request(acp.methods.agent.session.new, { cwd: dir, mcpServers: [], _meta: own });
    const refusals = [
      c.agent.request(acp.methods.agent.session.new, { cwd: dir, mcpServers: [], _meta: other }),
      c.agent.request(acp.methods.agent.session.list, { _meta: other }),
      c.agent.request(acp.methods.agent.session.load, { sessionId, cwd: dir, mcpServers: [], _meta: other }),
      c.agent.request(acp.methods.agent.session.resume, { sessionId, cwd: dir, mcpServers: [], _meta: other }),
      c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: text("for whom?"), _meta: other }),
      c.agent.request(acp.methods.agent.session.close, { sessionId, _meta: other }),
    ];
    for (const refused of refusals) {
      expect(await failure(refused)).toMatchObject({ code: -32602, message: expect.stringContaining(`serves the agent ${JSON.stringify(name)} alone, not "someone-else"`) });
    }
    // Nothing was written for another agent: no conversation's folder, not even the session's own (made at its first event).
    expect(existsSync(join(dir, "chats")) ? readdirSync(join(dir, "chats")) : []).toEqual([]);
    expect(server.requests).toHaveLength(0);

    // A turn runs; a cancel for another agent leaves it, one for this agent stops it.
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    server.script(async () => {
      await gate;
      return { text: "finished" };
    });
    const running = c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: text("work"), _meta: own });
    await server.waitForRequest(1);
    await c.agent.notify(acp.methods.agent.session.cancel, { sessionId, _meta: other });
    // Notifications and requests are handled in the order they are read: once this is answered, the cancel was seen.
    await c.agent.request(acp.methods.agent.session.list, {});
    release();
    expect(await running).toMatchObject({ stopReason: "end_turn" });
    expect(answerText(c.updates)).toBe("finished");
  });
});

describe("a group's conversation after a restart", { timeout: 60_000 }, () => {
  it("is headed with the group's channel, not direct, when a prompt names none: prompted at once, or resumed first", async () => {
    const dir = agent();
    const header = () => lastUserText(server.requests.at(-1) as RecordedRequest).split("\n")[0] ?? "";
    const restart = async () => {
      const d = watch(startDaemon(["--agent", dir], linkFreeEnv()));
      return { d, c: await client(d) };
    };

    const first = await restart();
    const made = await first.c.agent.request(acp.methods.agent.session.new, { cwd: dir, mcpServers: [], _meta: { link: { channel: "telegram", group: "g42" } } });
    expect(made.sessionId).toBe("telegram-g42");
    const prompt = (c: Client, s: string) => c.agent.request(acp.methods.agent.session.prompt, { sessionId: made.sessionId, prompt: text(s) });
    await prompt(first.c, "before the restart");
    expect(header()).toMatch(/ · telegram · /);
    first.c.close();
    first.d.child.stdin?.end();
    expect(await first.d.exited).toEqual({ code: 0, signal: null });

    const second = await restart();
    await prompt(second.c, "after the restart");
    expect(header()).toMatch(/ · telegram · /);
    second.c.close();
    await second.d.stop();

    const third = await restart();
    await third.c.agent.request(acp.methods.agent.session.resume, { sessionId: made.sessionId, cwd: dir, mcpServers: [] });
    await prompt(third.c, "after a resume");
    expect(header()).toMatch(/ · telegram · /);
    // A prompt that names its channel still wins.
    await third.c.agent.request(acp.methods.agent.session.prompt, { sessionId: made.sessionId, prompt: text("elsewhere"), _meta: { link: { channel: "signal" } } });
    expect(header()).toMatch(/ · signal · /);
  });
});
