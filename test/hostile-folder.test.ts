// The agent's folder as hostile ground, against the built daemon: a FIFO where a file should be, a
// conversation folder swapped for a link mid-turn, files of any size, a paused process whose lock was
// taken over, any umask, a derived file that can't be written, a store or facts error.
import { spawnSync } from "node:child_process";
import { chmodSync, existsSync, lstatSync, mkdirSync, readFileSync, readdirSync, renameSync, rmSync, statSync, symlinkSync, truncateSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import * as acp from "@agentclientprotocol/sdk";
import type { ContentBlock } from "@agentclientprotocol/sdk";
import { describe, expect, it } from "vitest";
import type { Event } from "../protocol/index.js";
import { paths, readEventsFrom } from "../store/index.js";
import { configure, daemonTestHooks, lockFreed, until, scriptedSettings, startDaemon, tempDir, type Client, type Daemon, failure, stdioClient, watched } from "./acp-client.js";
import type { ModelServer } from "./model-server.js";
import { BIN } from "./fixtures/built.js";
import { deferred } from "./fixtures/deferred.js";

let server: ModelServer;
const cleanup = daemonTestHooks([BIN, "dist/daemon/serve.js", "dist/acp/app.js"], (s) => (server = s));

function folder(): string {
  const dir = tempDir("lnk-hostile-");
  cleanup.push(() => dir.remove());
  return dir.path;
}

function agent(extra: Record<string, unknown> = {}): string {
  const dir = folder();
  configure(dir, scriptedSettings(server.url, extra));
  return dir;
}

function daemon(dir: string, env: NodeJS.ProcessEnv = {}, via: string[] = []): Daemon {
  const d = startDaemon(["--agent", dir], env, { via });
  return watched(d, cleanup);
}

async function client(d: Daemon): Promise<Client> {
  return stdioClient(d, cleanup);
}

const text = (s: string): ContentBlock[] => [{ type: "text", text: s }];

async function session(c: Client, thread?: string): Promise<string> {
  const res = await c.agent.request(acp.methods.agent.session.new, { cwd: "/", mcpServers: [], ...(thread ? { _meta: { link: { thread } } } : {}) });
  return res.sessionId;
}

function prompt(c: Client, sessionId: string, words: string) {
  return c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: text(words) });
}


function events(dir: string, thread: string): Event[] {
  return readEventsFrom(paths({ dir }).conversation(thread), 1).map((e) => e.event);
}

const shape = (e: Event) => ("role" in e ? `${e.kind}:${e.role}` : e.kind);

function mkfifo(path: string): void {
  const made = spawnSync("mkfifo", [path]);
  if (made.status !== 0) throw new Error(`mkfifo ${path}: ${String(made.stderr)}`);
}

const mode = (path: string) => statSync(path).mode & 0o777;

describe("a FIFO where the store expects a file", { timeout: 60_000 }, () => {
  it("notes.md or config.json: the turn fails with why, stored; the daemon still answers and stops on SIGTERM", async () => {
    for (const where of ["memory/notes.md", "config.json"]) {
      const dir = agent();
      mkdirSync(join(dir, "memory"), { recursive: true });
      const d = daemon(dir);
      const c = await client(d);
      const sessionId = await session(c);
      // Made after session/new, which reads the settings too.
      const fifo = join(dir, where);
      if (existsSync(fifo)) renameSync(fifo, `${fifo}.was`);
      mkfifo(fifo);
      const err = await failure(prompt(c, sessionId, "hello"));
      expect(err.message).toContain("is not a regular file");
      expect(events(dir, sessionId).map(shape)).toEqual(["message:user", "failure"]);
      // Still answering: a new client request, then a clean stop.
      expect((await c.agent.request(acp.methods.agent.session.list, {})).sessions).toHaveLength(1);
      expect(await d.stop("SIGTERM")).toEqual({ code: 0, signal: null });
      expect(server.requests).toHaveLength(0);
    }
  });

  it("window.json, derived: made again, and the turn is answered", async () => {
    const dir = agent();
    const d = daemon(dir);
    const c = await client(d);
    const sessionId = await session(c);
    mkdirSync(paths({ dir }).conversation(sessionId).dir, { recursive: true, mode: 0o700 });
    mkfifo(paths({ dir }).conversation(sessionId).window);
    expect(await prompt(c, sessionId, "hello")).toMatchObject({ stopReason: "end_turn" });
    expect(events(dir, sessionId).map(shape)).toEqual(["message:user", "message:assistant"]);
    // Made after the answer, under the turn's lock.
    await lockFreed(paths({ dir }).conversation(sessionId).lock);
    expect(statSync(paths({ dir }).conversation(sessionId).window).isFile()).toBe(true);
  });
});

describe("a transcript.md that can't be opened", { timeout: 60_000 }, () => {
  /** Runs one turn of the conversation in a daemon of its own (nothing of the last one kept), as `via` runs it. */
  async function freshTurn(dir: string, thread: string, words: string, env: NodeJS.ProcessEnv = {}, via: string[] = []) {
    const d = daemon(dir, env, via);
    const c = await client(d);
    await c.agent.request(acp.methods.agent.session.load, { sessionId: thread, cwd: "/", mcpServers: [] }).catch(() => session(c, thread));
    const answer = await prompt(c, thread, words);
    await lockFreed(paths({ dir }).conversation(thread).lock);
    await d.stop();
    return answer;
  }

  it("a socket there (ENXIO) reads as a copy cut short: made again, every turn answered", async () => {
    const dir = agent();
    const conv = paths({ dir }).conversation("t1");
    expect(await freshTurn(dir, "t1", "hello")).toMatchObject({ stopReason: "end_turn" });
    renameSync(conv.transcript, `${conv.transcript}.was`);
    // A socket bound and left there by a process that is gone.
    const bound = spawnSync(process.execPath, ["-e", "require('node:net').createServer().listen(process.argv[1], () => process.exit(0))", conv.transcript]);
    expect(bound.status).toBe(0);
    expect(lstatSync(conv.transcript).isSocket()).toBe(true);
    for (const words of ["again", "and again"]) expect(await freshTurn(dir, "t1", words)).toMatchObject({ stopReason: "end_turn" });
    expect(events(dir, "t1").map(shape)).toEqual(["message:user", "message:assistant", "message:user", "message:assistant", "message:user", "message:assistant"]);
    expect(lstatSync(conv.transcript).isFile()).toBe(true);
    expect(readFileSync(conv.transcript, "utf8")).toContain("and again");
  });

  it("a link there, planted after a turn: a fresh daemon's turn is answered, the link warned of and its target left alone", async () => {
    const dir = agent();
    const conv = paths({ dir }).conversation("t1");
    expect(await freshTurn(dir, "t1", "hello")).toMatchObject({ stopReason: "end_turn" });
    const outside = join(folder(), "target.md");
    writeFileSync(outside, "untouched\n");
    renameSync(conv.transcript, `${conv.transcript}.was`);
    symlinkSync(outside, conv.transcript);
    const d = daemon(dir);
    const c = await client(d);
    await c.agent.request(acp.methods.agent.session.load, { sessionId: "t1", cwd: "/", mcpServers: [] });
    expect(await prompt(c, "t1", "again")).toMatchObject({ stopReason: "end_turn" });
    expect(events(dir, "t1").map(shape)).toEqual(["message:user", "message:assistant", "message:user", "message:assistant"]);
    expect(await d.waitForLog(/"turn warning".*derived files/)).toContain("symbolic link");
    expect(readFileSync(outside, "utf8")).toBe("untouched\n");
  });

  it("one its mode keeps from the daemon's user (EACCES) is made again too", async () => {
    const dir = agent();
    const conv = paths({ dir }).conversation("t1");
    // Root reads a file of mode 000: the daemon runs as another user then, owning the agent's folder.
    const root = process.getuid?.() === 0;
    const home = folder();
    if (root) expect(spawnSync("chown", ["-R", "65534:65534", dir, home]).status).toBe(0);
    const via = root ? ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] : [];
    const env = { HOME: home, XDG_CONFIG_HOME: join(home, ".config") };
    expect(await freshTurn(dir, "t1", "hello", env, via)).toMatchObject({ stopReason: "end_turn" });
    chmodSync(conv.transcript, 0o000);
    for (const words of ["again", "and again"]) expect(await freshTurn(dir, "t1", words, env, via)).toMatchObject({ stopReason: "end_turn" });
    expect(events(dir, "t1").map(shape)).toEqual(["message:user", "message:assistant", "message:user", "message:assistant", "message:user", "message:assistant"]);
    expect(mode(conv.transcript)).toBe(0o600);
    expect(readFileSync(conv.transcript, "utf8")).toContain("and again");
  });
});

describe("a number missing among a conversation's events, with events after it", { timeout: 60_000 }, () => {
  const numbered = (dir: string, thread: string) => readdirSync(paths({ dir }).conversation(thread).dir).filter((n) => /^\d{12}\.json$/.test(n)).sort();

  it("refuses the turn, naming the missing file, and writes nothing past the gap: in a fresh daemon that loads the session, and one that never did", async () => {
    const dir = agent();
    const conv = paths({ dir }).conversation("t1");
    const first = daemon(dir);
    const c1 = await client(first);
    await session(c1, "t1");
    expect(await prompt(c1, "t1", "first question")).toMatchObject({ stopReason: "end_turn" });
    await lockFreed(conv.lock);
    await first.stop();
    // 3 missing, 4 there: readers stop at 3.
    writeFileSync(conv.event(4), readFileSync(conv.event(2)));
    // A turn, in a fresh daemon that loads the session and one that never did; and a command, written
    // past the gap no more than a turn is: a choice with no lock, and one that begins a conversation under it.
    const cases = [
      { load: true, text: "second question" },
      { load: false, text: "second question" },
      { load: true, text: "/model:set other-model" },
      { load: true, text: "/chat:create side" },
    ];
    for (const { load, text } of cases) {
      const d = daemon(dir);
      const c = await client(d);
      // Loading lists the folder (its last number, 4); a new session on the thread reads only as far as 2.
      if (load) await c.agent.request(acp.methods.agent.session.load, { sessionId: "t1", cwd: "/", mcpServers: [] });
      else await session(c, "t1");
      const err = await failure(prompt(c, "t1", text));
      expect(err.message, text).toContain(`event 3 (${conv.event(3)}) is missing, and events after it are there`);
      await lockFreed(conv.lock);
      await d.stop();
      expect(numbered(dir, "t1")).toEqual(["000000000001.json", "000000000002.json", "000000000004.json"]);
      expect(readdirSync(conv.dir).filter((n) => n.startsWith("owed-"))).toEqual([]);
    }
    expect(server.requests).toHaveLength(1);

    // The first number missing: the same, for a conversation no process has read.
    const other = paths({ dir }).conversation("t2");
    mkdirSync(other.dir, { mode: 0o700 });
    writeFileSync(other.event(2), readFileSync(conv.event(2)));
    const d = daemon(dir);
    const c = await client(d);
    await session(c, "t2");
    expect((await failure(prompt(c, "t2", "hello"))).message).toContain(`event 1 (${other.event(1)}) is missing`);
    expect((await failure(prompt(c, "t2", "/chat:create side"))).message).toContain(`event 1 (${other.event(1)}) is missing`);
    expect(numbered(dir, "t2")).toEqual(["000000000002.json"]);
    expect(server.requests).toHaveLength(1);
  });
});

describe("a conversation's folder removed or replaced while the daemon runs", { timeout: 60_000 }, () => {
  /** What the model was sent in the last request, but the system prompt: each message's last line. */
  const sent = () => (server.requests.at(-1)?.body.messages ?? []).filter((m) => m.role !== "system").map((m) => `${m.role}: ${String(m.content).split("\n").at(-1)}`);
  const texts = (dir: string, thread: string) => events(dir, thread).map((e) => ("text" in e ? e.text : e.kind));

  it("is what the next turn reads: nothing of the folder that was there is sent or numbered after", async () => {
    const dir = agent();
    const conv = paths({ dir }).conversation("t1");
    const d = daemon(dir);
    const c = await client(d);
    await session(c, "t1");
    expect(await prompt(c, "t1", "my bank PIN is 4711")).toMatchObject({ stopReason: "end_turn" });
    await lockFreed(conv.lock);
    // Removed by hand, and made again empty at once (on ext4, as likely as not with the same inode):
    // the next turn begins a new conversation at event 1.
    rmSync(conv.dir, { recursive: true, force: true });
    mkdirSync(conv.dir, { mode: 0o700 });
    expect(await prompt(c, "t1", "hello again")).toMatchObject({ stopReason: "end_turn" });
    expect(sent()).toEqual(["user: hello again"]);
    expect(texts(dir, "t1")).toEqual(["hello again", "echo: hello again"]);

    // Another conversation's folder moved in its place: the next turn goes on from its events.
    await lockFreed(conv.lock);
    const other = paths({ dir }).conversation("t2");
    await session(c, "t2");
    expect(await prompt(c, "t2", "about the garden")).toMatchObject({ stopReason: "end_turn" });
    await lockFreed(other.lock);
    rmSync(conv.dir, { recursive: true, force: true });
    renameSync(other.dir, conv.dir);
    expect(await prompt(c, "t1", "and the roses?")).toMatchObject({ stopReason: "end_turn" });
    expect(sent()).toEqual(["user: about the garden", "assistant: echo: about the garden", "user: and the roses?"]);
    expect(texts(dir, "t1")).toEqual(["about the garden", "echo: about the garden", "and the roses?", "echo: and the roses?"]);
  });
});

describe("a conversation folder swapped for a link mid-turn", { timeout: 60_000 }, () => {
  it("gets nothing written outside: not through the link, not into the folder moved away", async () => {
    const dir = agent();
    const outside = folder();
    const d = daemon(dir);
    const c = await client(d);
    const sessionId = await session(c);
    const conv = paths({ dir }).conversation(sessionId);
    const asked = deferred();
    const answer = deferred();
    server.script(async () => {
      asked.resolve();
      await answer.promise;
      return { text: "an answer that must land nowhere" };
    });
    const turn = failure(prompt(c, sessionId, "hello"));
    await asked.promise;
    // The question is flushed while the model is asked: swapped once it is written.
    await until(() => existsSync(conv.event(1)), "the question written");
    const moved = join(outside, "moved");
    renameSync(conv.dir, moved);
    symlinkSync(outside, conv.dir);
    answer.resolve();
    const err = await turn;
    expect(err.message).toMatch(/replaced while it was written|symbolic link/);
    // The question was written before the swap, into the folder since moved; nothing after it.
    expect(readdirSync(moved).filter((n) => n.endsWith(".json"))).toEqual(["000000000001.json"]);
    expect(readdirSync(outside).sort()).toEqual(["moved"]);
  });
});

describe("files of any size", { timeout: 60_000 }, () => {
  it("a 1.5 GB sparse notes.md is read only as far as its section holds; a 1.5 GB event is refused, saying so", async () => {
    const dir = agent();
    mkdirSync(join(dir, "memory"));
    const notes = join(dir, "memory", "notes.md");
    writeFileSync(notes, "remember: the gate code is 4711\n");
    truncateSync(notes, 1.5 * 1024 ** 3);
    const d = daemon(dir);
    const c = await client(d);
    const sessionId = await session(c);
    expect(await prompt(c, sessionId, "hello")).toMatchObject({ stopReason: "end_turn" });
    const system = String(server.requests[0]?.body.messages?.[0]?.content);
    expect(system).toContain("the gate code is 4711");
    // The section's most (16,000 characters) with the note that it was cut: never the file whole.
    expect(system.length).toBeLessThan(20_000);
    expect(system).toContain("[cut:");

    const conv = paths({ dir }).conversation(sessionId);
    const big = conv.event(3);
    writeFileSync(big, "{");
    truncateSync(big, 1.5 * 1024 ** 3);
    const err = await failure(prompt(c, sessionId, "again"));
    expect(err.message).toContain("000000000003.json is 1536 MiB, over the limit of 64 MiB");
  });
});

describe("permissions", { timeout: 60_000 }, () => {
  it("conversations are private: folders 0700 and files 0600 under umask 000 and 022", async () => {
    for (const umask of ["000", "022"]) {
      const dir = agent();
      const d = daemon(dir, {}, ["sh", "-c", `umask ${umask}; exec "$@"`, "sh"]);
      const c = await client(d);
      const sessionId = await session(c);
      expect(await prompt(c, sessionId, "hello")).toMatchObject({ stopReason: "end_turn" });
      const conv = paths({ dir }).conversation(sessionId);
      // The copy and the mark are made after the answer, under the turn's lock.
      await lockFreed(conv.lock);
      expect([mode(paths({ dir }).chats), mode(conv.dir)]).toEqual([0o700, 0o700]);
      for (const name of readdirSync(conv.dir)) expect([name, mode(join(conv.dir, name))]).toEqual([name, 0o600]);
      // The prompt's owed file (lnk-link-harness-acp(7), RECOVERY) is removed just after its answer is written: it may still be there.
      const names = readdirSync(conv.dir).filter((n) => !n.startsWith("owed-"));
      // The file its locks are second names of (lnk-link-harness-folder(5), LOCK), kept while it runs.
      expect(names.filter((n) => n.startsWith(".holder-"))).toEqual([expect.stringMatching(new RegExp(`^\\.holder-${d.child.pid}-[0-9a-f]{12}-[0-9a-f]{8}$`))]);
      // The next turn's files, made once the lock is let go (lnk-link-harness-folder(5), SPARE FILES), and private too.
      const spares = () => readdirSync(conv.dir).filter((n) => n.startsWith(`.tmp-${d.child.pid}-`));
      await until(() => spares().length === 2, "the next turn's files made");
      expect(names.filter((n) => !n.startsWith(".holder-") && !n.startsWith(".tmp-")).sort()).toEqual(["000000000001.json", "000000000002.json", "transcript.md", "window.json", "window.jsonl"]);
      for (const name of spares()) expect([name, mode(join(conv.dir, name)), statSync(join(conv.dir, name)).size]).toEqual([name, 0o600, 0]);
      const made = spares().map((n) => statSync(join(conv.dir, n)).ino);
      // They are the next turn's question and answer.
      expect(await prompt(c, sessionId, "again")).toMatchObject({ stopReason: "end_turn" });
      expect([conv.event(3), conv.event(4)].map((f) => statSync(f).ino).sort()).toEqual(made.sort());
      await until(() => spares().length === 2, "the turn after's files made");
      await d.stop();
      expect(readdirSync(conv.dir).filter((n) => n.startsWith(".holder-")), "removed as the daemon stops").toEqual([]);
      expect(spares(), "removed as the daemon stops").toEqual([]);
    }
  });
});

describe("a process paused past its lock's stale period", { timeout: 60_000 }, () => {
  it("writes nothing once another process took the conversation over, not even its answer", async () => {
    const dir = agent();
    const env = { LNK_LOCK_STALE_MS: "2000" };
    const a = daemon(dir, env);
    const ca = await client(a);
    const sessionId = await session(ca, "paused");
    const asked = deferred();
    const release = deferred();
    server.script(async () => {
      asked.resolve();
      await release.promise;
      return { text: "the paused process's answer" };
    });
    const first = failure(prompt(ca, sessionId, "from the process that will be paused"));
    await asked.promise;
    // The question is flushed while the model is asked: paused once it is written.
    await until(() => existsSync(paths({ dir }).conversation(sessionId).event(1)), "the question written");
    a.child.kill("SIGSTOP");
    try {
      // Another process takes the conversation once the paused one's lock is stale, and answers.
      const b = daemon(dir, env);
      const cb = await client(b);
      server.script({ text: "the other process's answer" });
      expect(await prompt(cb, sessionId, "from the other process")).toMatchObject({ stopReason: "end_turn" });
    } finally {
      a.child.kill("SIGCONT");
    }
    release.resolve();
    const err = await first;
    expect(err.message).toContain("its lock was lost");
    expect(events(dir, sessionId).map((e) => ("text" in e ? e.text : e.kind))).toEqual([
      "from the process that will be paused",
      "from the other process",
      "the other process's answer",
    ]);
  });
});

describe("a derived file that can't be written after the answer is stored", { timeout: 60_000 }, () => {
  it("is a warning in the log, never a failed turn; the link's target is left alone", async () => {
    const dir = agent();
    const outside = join(folder(), "target.md");
    writeFileSync(outside, "untouched\n");
    const d = daemon(dir);
    const c = await client(d);
    const sessionId = await session(c);
    mkdirSync(paths({ dir }).conversation(sessionId).dir, { recursive: true, mode: 0o700 });
    symlinkSync(outside, paths({ dir }).conversation(sessionId).transcript);
    expect(await prompt(c, sessionId, "hello")).toMatchObject({ stopReason: "end_turn" });
    expect(events(dir, sessionId).map(shape)).toEqual(["message:user", "message:assistant"]);
    expect(await d.waitForLog(/"turn warning".*derived files/)).toContain("symbolic link");
    expect(spawnSync("cat", [outside]).stdout.toString()).toBe("untouched\n");
  });
});

describe("a store or facts error", { timeout: 60_000 }, () => {
  it("keeps the question and a failure event saying why: a bad facts file, a skills/ that is a link", async () => {
    const config = folder();
    mkdirSync(join(config, "lnk"));
    writeFileSync(join(config, "lnk", "model-facts.toml"), "[models\nbroken =");
    const dir = agent();
    const d = daemon(dir, { XDG_CONFIG_HOME: config });
    const c = await client(d);
    const sessionId = await session(c);
    const err = await failure(prompt(c, sessionId, "hello"));
    expect(err.message).toContain("model-facts.toml");
    const stored = events(dir, sessionId);
    expect(stored.map(shape)).toEqual(["message:user", "failure"]);
    expect(stored[1]).toMatchObject({ reason: "internal", message: expect.stringContaining("model-facts.toml") });

    // Your facts file a FIFO: refused at once, never waited on.
    const fifoConfig = folder();
    mkdirSync(join(fifoConfig, "lnk"));
    mkfifo(join(fifoConfig, "lnk", "model-facts.toml"));
    const fifoAgent = agent();
    const d1 = daemon(fifoAgent, { XDG_CONFIG_HOME: fifoConfig });
    const c1 = await client(d1);
    const s1 = await session(c1);
    expect((await failure(prompt(c1, s1, "hello"))).message).toContain("is not a regular file");
    expect(events(fifoAgent, s1).map(shape)).toEqual(["message:user", "failure"]);
    expect(await d1.stop("SIGTERM")).toEqual({ code: 0, signal: null });

    const other = agent();
    const elsewhere = folder();
    mkdirSync(join(elsewhere, "planted"));
    writeFileSync(join(elsewhere, "planted", "SKILL.md"), "---\nname: planted\ndescription: read from outside\n---\n");
    symlinkSync(elsewhere, join(other, "skills"));
    const d2 = daemon(other);
    const c2 = await client(d2);
    const s2 = await session(c2);
    expect((await failure(prompt(c2, s2, "hello"))).message).toContain("skills is a symbolic link");
    expect(events(other, s2).map(shape)).toEqual(["message:user", "failure"]);
    expect(server.requests).toHaveLength(0);
  });
});
