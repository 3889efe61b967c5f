// The built daemon on its Unix control socket: mode 0600, many connections at once sharing one
// process, a stale socket replaced and a live one never taken, clients that misbehave or go away.
import { spawn, spawnSync } from "node:child_process";
import { existsSync, readFileSync, statSync, symlinkSync, utimesSync, writeFileSync } from "node:fs";
import { connect as netConnect } from "node:net";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";
import * as acp from "@agentclientprotocol/sdk";
import type { ContentBlock } from "@agentclientprotocol/sdk";
import { describe, expect, it, onTestFailed } from "vitest";
import { z } from "zod";
import { paths, readEventsFrom } from "../store/index.js";
import { answerText, configure, daemonTestHooks, openClient, scriptedSettings, socketStream, startDaemon, tempDir, until, type Client, type Daemon } from "./acp-client.js";
import { BIN, ROOT } from "./fixtures/built.js";
import { lastUserText, type ModelServer } from "./model-server.js";

let server: ModelServer;
const cleanup = daemonTestHooks([BIN, "dist/daemon/serve.js", "dist/daemon/socket.js"], (s) => (server = s));

/** An agent folder with settings, and a socket path beside it. */
function place(): { dir: string; socket: string } {
  const tmp = tempDir("lnk-sock-");
  cleanup.push(() => tmp.remove());
  const dir = join(tmp.path, "agent");
  configure(dir, scriptedSettings(server.url));
  return { dir, socket: join(tmp.path, "control.sock") };
}

async function serving(dir: string, socket: string, env: NodeJS.ProcessEnv = {}): Promise<Daemon> {
  const d = startDaemon(["--agent", dir, "--socket", socket], env);
  cleanup.push(() => d.stop("SIGKILL"));
  onTestFailed(() => void process.stderr.write(`the daemon's log:\n${d.stderr()}\n`));
  await d.waitForLog(/"serving ACP"/);
  return d;
}

async function client(socket: string): Promise<Client & { hangUp(): void }> {
  const { stream, socket: conn } = await socketStream(socket);
  const c = await openClient(stream);
  cleanup.push(() => conn.destroy());
  return { ...c, hangUp: () => conn.destroy() };
}

const text = (s: string): ContentBlock[] => [{ type: "text", text: s }];

/** Leaves a stale socket at `path`: a process listens there, then dies without removing it. */
async function staleSocket(path: string): Promise<void> {
  const dead = spawn(process.execPath, ["-e", `require("node:net").createServer().listen(${JSON.stringify(path)}, () => console.log("up"))`]);
  await new Promise((resolve) => dead.stdout.once("data", resolve));
  dead.kill("SIGKILL");
  await new Promise((resolve) => dead.once("exit", resolve));
  expect(existsSync(path)).toBe(true);
}

/** The pid of a process that has ended. */
async function deadPid(): Promise<number> {
  const gone = spawn(process.execPath, ["-e", "0"]);
  const pid = gone.pid as number;
  await new Promise((resolve) => gone.once("exit", resolve));
  return pid;
}

/** "serving" once the daemon serves, else how it exited. */
const outcome = (d: Daemon): Promise<string> =>
  d.waitForLog(/"serving ACP"/).then(
    () => "serving",
    async () => `exit ${(await d.exited).code}`,
  );

describe("the control socket", () => {
  it("is mode 0600 and serves many clients at once, their turns side by side; SIGTERM removes it", async () => {
    const { dir, socket } = place();
    const d = await serving(dir, socket);
    expect(statSync(socket).isSocket()).toBe(true);
    expect(statSync(socket).mode & 0o777).toBe(0o600);

    const [a, b] = await Promise.all([client(socket), client(socket)]);
    const sa = await a.agent.request(acp.methods.agent.session.new, { cwd: dir, mcpServers: [] });
    const sb = await b.agent.request(acp.methods.agent.session.new, { cwd: dir, mcpServers: [] });
    // Each answer waits until both turns have asked the model: they run at the same time.
    server.fallback = async (request) => {
      await server.waitForRequest(2);
      return { text: `answer to ${lastUserText(request)}` };
    };
    const pa = a.agent.request(acp.methods.agent.session.prompt, { sessionId: sa.sessionId, prompt: text("from A") });
    const pb = b.agent.request(acp.methods.agent.session.prompt, { sessionId: sb.sessionId, prompt: text("from B") });
    const [ra, rb] = [await pa, await pb];
    expect([ra.stopReason, rb.stopReason]).toEqual(["end_turn", "end_turn"]);
    expect(answerText(a.updates)).toMatch(/answer to .*from A$/s);
    expect(answerText(b.updates)).toMatch(/answer to .*from B$/s);

    // Sessions are the process's: B sees A's conversation.
    const listed = await b.agent.request(acp.methods.agent.session.list, {});
    expect(listed.sessions.map((s) => s.sessionId).sort()).toEqual([sa.sessionId, sb.sessionId].sort());

    // A malformed line is answered and the connection, and the daemon, go on.
    const { socket: raw } = await socketStream(socket);
    const lines = createInterface({ input: raw });
    const first = new Promise<string>((resolve) => lines.once("line", resolve));
    raw.write("{ not json\n");
    expect(JSON.parse(await first)).toMatchObject({ id: null, error: { code: -32700 } });
    raw.destroy();
    server.fallback = () => ({ text: "still serving" });
    await a.agent.request(acp.methods.agent.session.prompt, { sessionId: sa.sessionId, prompt: text("again") });
    expect(answerText(a.updates)).toMatch(/still serving$/);

    expect(await d.stop("SIGTERM")).toEqual({ code: 0, signal: null });
    expect(existsSync(socket)).toBe(false);
  });

  it("closes the connection of a client that reads none of its output, having read no further from it, and serves its other clients", async () => {
    const { dir, socket } = place();
    const d = await serving(dir, socket, { LNK_ACP_UNREAD_MS: "1000" });
    const other = await client(socket);
    const { sessionId } = await other.agent.request(acp.methods.agent.session.new, { cwd: dir, mcpServers: [] });

    // A client that sends 100,000 requests and reads none of their answers.
    const raw = netConnect(socket);
    raw.on("error", () => undefined);
    await new Promise((resolve) => raw.once("connect", resolve));
    raw.pause();
    const asks = Array.from({ length: 100_000 }, (_, i) => `{"jsonrpc":"2.0","id":${i + 2},"method":"session/list","params":{}}\n`).join("");
    raw.write(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}\n`);
    raw.write(asks);
    let left = 0;
    const watch = setInterval(() => {
      // Until the connection fails: a socket destroyed holds nothing.
      if (!raw.destroyed) left = raw.writableLength;
    }, 20);
    const late = setTimeout(() => raw.destroy(new Error("still open after 30 s")), 30_000);
    // Its connection is closed: what it still sends fails, and the socket closes.
    await new Promise((resolve) => raw.once("close", resolve));
    clearInterval(watch);
    clearTimeout(late);
    expect(await d.waitForLog(/"the client read none of its output: its connection is closed"/)).toBeTruthy();
    expect(asks.length - left).toBeLessThan(asks.length / 10);

    // The other client was served meanwhile, and still is.
    server.fallback = () => ({ text: "served all along" });
    await other.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: text("hello") });
    expect(answerText(other.updates)).toBe("served all along");
    expect(d.child.exitCode).toBeNull();
  });

  it("replaces a stale socket from a dead process, never takes a live one, and refuses a file that isn't a socket", async () => {
    const { dir, socket } = place();
    await staleSocket(socket);

    const live = await serving(dir, socket);
    const c = await client(socket);
    await c.agent.request(acp.methods.agent.session.new, { cwd: dir, mcpServers: [] });

    const second = startDaemon(["--agent", dir, "--socket", socket]);
    cleanup.push(() => second.stop("SIGKILL"));
    expect(await second.exited).toEqual({ code: 2, signal: null });
    expect(second.stderr().trim().split("\n")).toEqual([expect.stringMatching(/^lnk-link-harness: .*control\.sock is in use/)]);
    expect(live.child.exitCode).toBeNull();
    await c.agent.request(acp.methods.agent.session.list, {});

    const plain = join(dir, "plain-file");
    writeFileSync(plain, "mine");
    const third = startDaemon(["--agent", dir, "--socket", plain]);
    cleanup.push(() => third.stop("SIGKILL"));
    expect((await third.exited).code).toBe(2);
    expect(third.stderr()).toMatch(/not a socket/);
    expect(existsSync(plain)).toBe(true);
  });

  it("two daemons starting at once on one stale socket: one serves on it, the other exits 2 saying it is in use, round after round", async () => {
    const { dir, socket } = place();
    for (let round = 0; round < 10; round++) {
      await staleSocket(socket);
      const pair = [startDaemon(["--agent", dir, "--socket", socket]), startDaemon(["--agent", dir, "--socket", socket])];
      for (const d of pair) cleanup.push(() => d.stop("SIGKILL"));
      const outcomes = await Promise.all(pair.map(outcome));
      expect([...outcomes].sort(), `round ${round}: ${pair.map((d) => d.stderr()).join("")}`).toEqual(["exit 2", "serving"]);
      const [served, refused] = outcomes[0] === "serving" ? pair : [pair[1], pair[0]];
      expect(refused?.stderr().trim().split("\n")).toEqual([expect.stringMatching(/^lnk-link-harness: .*control\.sock is in use by a running process: not taken$/)]);
      // The socket file is the serving daemon's: it answers, and goes with it.
      const c = await client(socket);
      expect(await c.agent.request(acp.methods.agent.session.list, {})).toEqual({ sessions: [] });
      expect(existsSync(`${socket}.lock`)).toBe(false);
      expect(await served?.stop("SIGTERM")).toEqual({ code: 0, signal: null });
      expect(existsSync(socket)).toBe(false);
    }
  });

  it("a lock left beside the socket by a process that is gone, or held too long, is taken over", async () => {
    const { dir, socket } = place();
    const lock = `${socket}.lock`;
    await staleSocket(socket);
    writeFileSync(lock, `${await deadPid()}\n`);
    const first = await serving(dir, socket);
    expect(existsSync(lock)).toBe(false);
    expect(await first.stop("SIGTERM")).toEqual({ code: 0, signal: null });

    // A live pid (this test's), but a lock far older than a start takes: its pid was used again.
    writeFileSync(lock, `${process.pid}\n`);
    const old = new Date(Date.now() - 10 * 60_000);
    utimesSync(lock, old, old);
    const second = await serving(dir, socket);
    expect(existsSync(lock)).toBe(false);
    const c = await client(socket);
    expect(await c.agent.request(acp.methods.agent.session.list, {})).toEqual({ sessions: [] });
    expect(second.child.exitCode).toBeNull();
  });

  it("a lock no process could have made (a FIFO, a link to a file outside) is removed at once, never waited on or followed", async () => {
    const { dir, socket } = place();
    const lock = `${socket}.lock`;
    const outside = join(dirname(socket), "outside.txt");
    writeFileSync(outside, `${process.pid}\n`);
    for (const plant of [() => expect(spawnSync("mkfifo", [lock]).status).toBe(0), () => symlinkSync(outside, lock)]) {
      plant();
      const d = await serving(dir, socket);
      expect(existsSync(lock)).toBe(false);
      const c = await client(socket);
      expect(await c.agent.request(acp.methods.agent.session.list, {})).toEqual({ sessions: [] });
      c.hangUp();
      expect(await d.stop("SIGTERM")).toEqual({ code: 0, signal: null });
    }
    expect(readFileSync(outside, "utf8")).toBe(`${process.pid}\n`);
  });

  it("a client that hangs up mid-turn: the turn still finishes and is kept, and another client sees it", async () => {
    const { dir, socket } = place();
    const d = await serving(dir, socket);
    const a = await client(socket);
    const { sessionId } = await a.agent.request(acp.methods.agent.session.new, { cwd: dir, mcpServers: [] });
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    server.script(async () => {
      await gate;
      return { text: "Done while you were away." };
    });
    void a.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: text("work on it") }).catch(() => undefined);
    await server.waitForRequest(1);
    a.hangUp();
    await a.closed;
    release();
    await d.waitForLog(/"turn ended"/);
    const kept = readEventsFrom(paths({ dir }).conversation(sessionId), 1).map((e) => e.event);
    expect(kept.at(-1)).toMatchObject({ role: "assistant", text: "Done while you were away." });

    const b = await client(socket);
    await b.agent.request(acp.methods.agent.session.load, { sessionId, cwd: dir, mcpServers: [] });
    expect(answerText(b.updates)).toBe("Done while you were away.");
    expect(d.child.exitCode).toBeNull();
  });

  it("a client that ends its side right after asking is still sent every answer, its prompt's too, and then the connection's end; none is owed after", async () => {
    const { dir, socket } = place();
    await serving(dir, socket);
    for (const delayMs of [0, 300]) {
      server.script({ text: `answered after ${delayMs} ms`, delayMs });
      const conn = netConnect(socket);
      cleanup.push(() => conn.destroy());
      let got = "";
      conn.setEncoding("utf8").on("data", (d: string) => (got += d));
      const ended = new Promise<void>((resolve) => conn.once("end", resolve));
      const send = (o: unknown) => conn.write(`${JSON.stringify(o)}\n`);
      send({ jsonrpc: "2.0", id: 0, method: "initialize", params: { protocolVersion: 1 } });
      send({ jsonrpc: "2.0", id: 1, method: "session/new", params: { cwd: dir, mcpServers: [], _meta: { link: { thread: `half-${delayMs}` } } } });
      await until(() => got.includes('"id":1'), "the session made");
      send({ jsonrpc: "2.0", id: 2, method: "session/list", params: {} });
      send({ jsonrpc: "2.0", id: 3, method: "session/prompt", params: { sessionId: `half-${delayMs}`, prompt: text("hi") } });
      conn.end();
      await ended;
      const answered = got
        .split("\n")
        .filter(Boolean)
        .map((l) => z.object({ id: z.number().optional(), result: z.object({ stopReason: z.string().optional() }).loose().optional() }).loose().parse(JSON.parse(l)))
        .filter((m) => m.id !== undefined);
      expect(answered.map((m) => m.id)).toEqual([0, 1, 2, 3]);
      expect(answered.at(-1)?.result?.stopReason).toBe("end_turn");
    }
    // Each answer reached its client: none is owed, to be handed over again.
    const next = await client(socket);
    expect(await next.agent.request("_link/recover", {})).toEqual({ answers: [] });
  });

  it("a client that loads the session while another's turn runs a tool follows it: the call in progress, then its result and the answer, once", async () => {
    const { dir, socket } = place();
    const everything = `"${process.execPath}" "${join(ROOT, "node_modules/@modelcontextprotocol/server-everything/dist/index.js")}" stdio`;
    await serving(dir, socket, { LNK_TOOL_EVERYTHING: everything });
    const a = await client(socket);
    const { sessionId } = await a.agent.request(acp.methods.agent.session.new, { cwd: dir, mcpServers: [] });
    server.script({ tool_calls: [{ name: "everything__trigger-long-running-operation", arguments: { duration: 1.5, steps: 3 } }] }, { text: "All done." });
    const prompting = a.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: text("run the long operation") });
    const call = await a.waitForUpdate((n) => n.update.sessionUpdate === "tool_call");
    const id = call.update.sessionUpdate === "tool_call" ? call.update.toolCallId : "";
    const b = await client(socket);
    await b.agent.request(acp.methods.agent.session.load, { sessionId, cwd: dir, mcpServers: [] });
    const statuses = (c: Client) => c.updates.flatMap((n) => (n.update.sessionUpdate === "tool_call" || n.update.sessionUpdate === "tool_call_update" ? [`${n.update.sessionUpdate} ${n.update.status ?? ""}`] : []));
    // Shown by the load as the turn runs it.
    expect(statuses(b)).toEqual(["tool_call in_progress"]);
    await prompting;
    await until(() => answerText(b.updates) === "All done.", "the follower's answer");
    expect(statuses(b)).toEqual(["tool_call in_progress", "tool_call_update completed"]);
    expect(b.updates.every((n) => !("toolCallId" in n.update) || n.update.toolCallId === id)).toBe(true);
    expect(b.updates.flatMap((n) => (n.update.sessionUpdate === "user_message_chunk" && n.update.content.type === "text" ? [n.update.content.text] : []))).toEqual(["run the long operation"]);
    // As a load after the turn shows it.
    const c = await client(socket);
    await c.agent.request(acp.methods.agent.session.load, { sessionId, cwd: dir, mcpServers: [] });
    expect(statuses(c)).toEqual(["tool_call completed", "tool_call_update completed"]);
    expect(answerText(c.updates)).toBe("All done.");
  });

  it.each([
    ["the session", ""],
    ["the session naming its conversation (<thread>~main)", "~main"],
  ])("a client that loads %s while another's turn streams follows that turn live: the question, the text streamed so far and the rest, once", async (_, named) => {
    const { dir, socket } = place();
    await serving(dir, socket);
    const a = await client(socket);
    const { sessionId } = await a.agent.request(acp.methods.agent.session.new, { cwd: dir, mcpServers: [] });
    server.script({ text: "Earlier." });
    await a.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: text("first") });
    const answer = "one two three four five six seven eight";
    server.script({ text: answer, chunks: 8, chunkDelayMs: 80 });
    const prompting = a.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: text("count for me") });
    // Some of the answer has reached the prompting client; the rest is still to come.
    await a.waitForUpdate((n) => n.update.sessionUpdate === "agent_message_chunk" && n.update.content.type === "text" && n.update.content.text.includes("two"));
    const b = await client(socket);
    await b.agent.request(acp.methods.agent.session.load, { sessionId: `${sessionId}${named}`, cwd: dir, mcpServers: [] });
    const loaded = b.updates.length;
    expect(answerText(b.updates)).not.toContain("eight");
    await prompting;
    await until(() => answerText(b.updates).endsWith("eight"), "the follower's answer");
    // The load's own updates, then the turn's: nothing after the load's answer came from a load.
    expect(b.updates.slice(loaded).every((n) => n.update.sessionUpdate !== "user_message_chunk")).toBe(true);
    const asked = b.updates.flatMap((n) => (n.update.sessionUpdate === "user_message_chunk" && n.update.content.type === "text" ? [n.update.content.text] : []));
    expect(asked.join("|")).toBe("first|count for me");
    expect(answerText(b.updates)).toBe(`Earlier.${answer}`);
    // As the prompting client saw it, and as a load after the turn shows it.
    expect(answerText(a.updates).endsWith(answer)).toBe(true);
    const c = await client(socket);
    await c.agent.request(acp.methods.agent.session.load, { sessionId, cwd: dir, mcpServers: [] });
    expect(answerText(c.updates)).toBe(`Earlier.${answer}`);
  });
});
