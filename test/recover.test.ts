// Recovery: an answer is delivered once its session/prompt answer was written to the client. One a
// turn finished but that never reached its client (the daemon was killed first, or the client left)
// is handed over by _link/recover, once, from what is on disk; a delivered one never is.
import { existsSync, readdirSync, unlinkSync } from "node:fs";
import { connect } from "node:net";
import { join } from "node:path";
import { createInterface } from "node:readline";
import * as acp from "@agentclientprotocol/sdk";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { forgetEvents, paths, readEventsFrom } from "../store/index.js";
import { configure, daemonTestHooks, openClient, scriptedSettings, socketStream, startDaemon, stdioClient, stdioSession, tempDir, until, watched, type Client } from "./acp-client.js";
import { deferred } from "./fixtures/deferred.js";
import { BIN } from "./fixtures/built.js";
import type { ModelServer } from "./model-server.js";

let server: ModelServer;
const cleanup = daemonTestHooks([BIN, "dist/acp/delivery.js", "dist/store/owed.js"], (s) => (server = s));

interface Recovered {
  answers: { sessionId: string; event: number; text: string; time: string }[];
}
const recover = async (c: Client) => (await c.agent.request("_link/recover", {})) as unknown as Recovered;

function place(): { dir: string; socket: string } {
  const tmp = tempDir("lnk-recover-");
  cleanup.push(() => tmp.remove());
  const dir = join(tmp.path, "agent");
  configure(dir, scriptedSettings(server.url));
  return { dir, socket: join(tmp.path, "s.sock") };
}

/** A client on the socket, by hand: it reads what it is sent until told to stop reading. */
async function rawClient(socket: string) {
  const conn = connect(socket);
  await new Promise<void>((resolve, reject) => {
    conn.once("connect", resolve);
    conn.once("error", reject);
  });
  cleanup.push(() => conn.destroy());
  const got: { id?: unknown; result?: unknown; method?: string }[] = [];
  const waiters: { id: number; resolve: (m: unknown) => void }[] = [];
  createInterface({ input: conn }).on("line", (line) => {
    let msg: { id?: unknown; result?: unknown; method?: string };
    try {
      msg = z.object({ id: z.unknown(), result: z.unknown(), method: z.string().optional() }).loose().parse(JSON.parse(line));
    } catch {
      // The last line of a killed daemon, cut short.
      return;
    }
    got.push(msg);
    for (const w of waiters.filter((w) => w.id === msg.id)) w.resolve(msg);
  });
  const send = (msg: object) => conn.write(`${JSON.stringify({ jsonrpc: "2.0", ...msg })}\n`);
  const ask = (id: number, method: string, params: object) =>
    new Promise<unknown>((resolve) => {
      waiters.push({ id, resolve });
      send({ id, method, params });
    });
  return { conn, got, send, ask };
}

/** A daemon on its socket, a client by hand on it, initialized, with a session of its own. */
async function onSocket() {
  const { dir, socket } = place();
  const d = watched(startDaemon(["--agent", dir, "--socket", socket]), cleanup);
  await d.waitForLog(/"serving ACP"/);
  const c = await rawClient(socket);
  await c.ask(1, "initialize", { protocolVersion: 1, clientCapabilities: {} });
  const { sessionId } = ((await c.ask(2, "session/new", { cwd: dir, mcpServers: [] })) as { result: { sessionId: string } }).result;
  return { dir, d, c, sessionId };
}

/**
 * A daemon on its socket whose client leaves mid-turn: its prompt's model answer (`answer`) is held
 * until `meanwhile` has run with another client of the socket, then the client's connection ends,
 * and the turn finishes with no one to hand its answer to. The other client is given back.
 */
async function leftMidTurn(answer: string, meanwhile: (other: Client, sessionId: string, dir: string) => Promise<unknown> = async () => undefined) {
  const { dir, socket } = place();
  const d = watched(startDaemon(["--agent", dir, "--socket", socket]), cleanup);
  await d.waitForLog(/"serving ACP"/);
  const { stream, socket: conn } = await socketStream(socket);
  const leaving = await openClient(stream);
  const { sessionId } = await leaving.agent.request(acp.methods.agent.session.new, { cwd: dir, mcpServers: [] });
  const release = deferred();
  server.script(async () => {
    await release.promise;
    return { text: answer };
  });
  void leaving.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "wait for it" }] }).catch(() => undefined);
  await server.waitForRequest(1);
  const { stream: s2 } = await socketStream(socket);
  const other = await openClient(s2);
  cleanup.push(() => other.close());
  await meanwhile(other, sessionId, dir);
  conn.destroy();
  release.resolve();
  await d.waitForLog(/"turn ended"/);
  return { dir, sessionId, other };
}

describe("_link/recover", () => {
  it("hands over, exactly once after a restart, an answer written before the daemon was killed and before its answer reached the client", async () => {
    const { dir, d, c, sessionId } = await onSocket();
    // A first answer reaches its client: it is delivered, and never recovered.
    server.script({ text: "delivered answer" });
    expect(await c.ask(3, "session/prompt", { sessionId, prompt: [{ type: "text", text: "first" }] })).toMatchObject({ result: { stopReason: "end_turn" } });

    // The second is far larger than the socket holds: with the client reading nothing more, its
    // streamed chunks fill the socket, and its own answer waits behind them.
    const big = `${"lost in the pipe ".repeat(200_000)}end`;
    server.script({ text: big });
    const lost = ((await c.ask(4, "session/new", { cwd: dir, mcpServers: [] })) as { result: { sessionId: string } }).result.sessionId;
    c.conn.pause();
    c.send({ id: 5, method: "session/prompt", params: { sessionId: lost, prompt: [{ type: "text", text: "second" }] } });
    // The turn ends once its answer is written to the conversation; then the daemon is killed.
    await d.waitForLog(new RegExp(`"turn ended","thread":"${lost}","stop":"end_turn"`));
    const conv = paths({ dir }).conversation(lost);
    const answer = readEventsFrom(conv, 1).find((e) => e.event.kind === "message" && e.event.role === "assistant" && e.event.text === big);
    expect(answer).toBeDefined();
    await d.stop("SIGKILL");
    // What the client can still read holds no answer to the second prompt.
    c.conn.resume();
    await new Promise((resolve) => c.conn.once("close", resolve));
    expect(c.got.find((m) => m.id === 5)).toBeUndefined();

    // After a restart, the answer is handed over once, by number, from the disk.
    const again = watched(startDaemon(["--agent", dir]), cleanup);
    const client = await stdioClient(again, cleanup);
    const first = await recover(client);
    expect(first.answers).toEqual([{ sessionId: lost, event: answer?.n, text: big, time: expect.any(String) }]);
    expect(await recover(client)).toEqual({ answers: [] });
    await again.stop();
    // Nor by any process after it: once handed over, it is owed no more.
    const third = watched(startDaemon(["--agent", dir]), cleanup);
    expect(await recover(await stdioClient(third, cleanup))).toEqual({ answers: [] });
    expect(readdirSync(conv.dir).filter((n) => n.startsWith("owed-"))).toEqual([]);
  });

  it("names the answer of a chat's named conversation by its session, <thread>~<conversation>, whichever the chat's current one is now", async () => {
    const { dir, d, c, sessionId } = await onSocket();
    expect(await c.ask(3, "session/prompt", { sessionId, prompt: [{ type: "text", text: "/chat:create side" }] })).toMatchObject({ result: { stopReason: "end_turn" } });
    const big = `${"lost in the pipe ".repeat(200_000)}end`;
    server.script({ text: big });
    c.conn.pause();
    c.send({ id: 4, method: "session/prompt", params: { sessionId: `${sessionId}~side`, prompt: [{ type: "text", text: "in the side conversation" }] } });
    await d.waitForLog(new RegExp(`"turn ended","thread":"${sessionId}","stop":"end_turn"`));
    const answer = readEventsFrom(paths({ dir }).conversation(sessionId), 1).find((e) => e.event.kind === "message" && e.event.text === big);
    expect(answer).toBeDefined();
    await d.stop("SIGKILL");
    c.conn.resume();
    await new Promise((resolve) => c.conn.once("close", resolve));
    // The chat goes back to its first conversation: its thread alone names that one now.
    const again = watched(startDaemon(["--agent", dir]), cleanup);
    const client = await stdioClient(again, cleanup);
    await client.agent.request(acp.methods.agent.session.resume, { sessionId, cwd: dir, mcpServers: [] });
    server.script({ text: "back" });
    expect(await client.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "/chat:resume main" }] })).toMatchObject({ stopReason: "end_turn" });
    expect(await recover(client)).toEqual({ answers: [{ sessionId: `${sessionId}~side`, event: answer?.n, text: big, time: expect.any(String) }] });
  });

  it("a client that uses one request id for two prompts gets both answers, and neither is handed over after a restart", async () => {
    const { dir, d, c, sessionId } = await onSocket();
    const release = deferred();
    server.script(async () => {
      await release.promise;
      return { text: "one answer for both" };
    });
    // The second prompt, under the first one's id, comes while the first's turn runs: it steers it.
    c.send({ id: 7, method: "session/prompt", params: { sessionId, prompt: [{ type: "text", text: "first" }] } });
    await server.waitForRequest(1);
    c.send({ id: 7, method: "session/prompt", params: { sessionId, prompt: [{ type: "text", text: "and this too" }] } });
    // Read by the daemon before the model answers, so that one turn answers both.
    await new Promise((r) => setTimeout(r, 300));
    release.resolve();
    await d.waitForLog(/"turn ended"/);
    const answered = async () => {
      for (let i = 0; i < 200 && c.got.filter((m) => m.id === 7 && m.result !== undefined).length < 2; i++) await new Promise((r) => setTimeout(r, 25));
      return c.got.filter((m) => m.id === 7 && m.result !== undefined);
    };
    expect(await answered()).toHaveLength(2);
    // Both answers were written to the client: nothing is owed, in this process or after it.
    await d.stop("SIGKILL");
    const conv = paths({ dir }).conversation(sessionId);
    const again = watched(startDaemon(["--agent", dir]), cleanup);
    expect(await recover(await stdioClient(again, cleanup))).toEqual({ answers: [] });
    expect(readdirSync(conv.dir).filter((n) => n.startsWith("owed-"))).toEqual([]);
  });

  it("hands over the answer of a client that left before its turn ended, on another connection of the same process; a failed turn owes none", async () => {
    const { dir, sessionId, other } = await leftMidTurn("answered after you left");
    const got = await recover(other);
    expect(got.answers.map((a) => [a.sessionId, a.text])).toEqual([[sessionId, "answered after you left"]]);
    expect(await recover(other)).toEqual({ answers: [] });

    // A turn that fails has no answer to owe, delivered or not.
    server.script({ error: { status: 400, message: "no" } });
    await expect(other.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "fail" }] })).rejects.toBeDefined();
    expect(await recover(other)).toEqual({ answers: [] });
    expect(existsSync(paths({ dir }).conversation(sessionId).dir)).toBe(true);
  });
});

describe("_link/recover hands over the answer of the turn that took the prompt", () => {
  const answerOf = (dir: string, thread: string, text: string) =>
    readEventsFrom(paths({ dir }).conversation(thread), 1).find((e) => e.event.kind === "message" && e.event.role === "assistant" && e.event.text === text)?.n;

  it("a prompt that steered a turn, and the one the turn began with, owe the turn's last answer, once", async () => {
    const { dir, d, c, sessionId } = await onSocket();
    const release = deferred();
    server.script(
      async () => {
        await release.promise;
        return { text: "the first answer, to the first prompt alone" };
      },
      { text: "the last answer, to both" },
    );
    c.send({ id: 3, method: "session/prompt", params: { sessionId, prompt: [{ type: "text", text: "one" }] } });
    await server.waitForRequest(1);
    // Read by the daemon while the model answers the first: it steers the turn.
    c.send({ id: 4, method: "session/prompt", params: { sessionId, prompt: [{ type: "text", text: "two, steering" }] } });
    await new Promise((r) => setTimeout(r, 300));
    // The client leaves before the turn ends: neither prompt's answer reaches it.
    c.conn.destroy();
    release.resolve();
    await d.waitForLog(/"turn ended"/);
    const last = answerOf(dir, sessionId, "the last answer, to both");
    expect(last).toBeDefined();
    await d.stop("SIGKILL");
    const again = watched(startDaemon(["--agent", dir]), cleanup);
    const client = await stdioClient(again, cleanup);
    expect((await recover(client)).answers.map((a) => [a.event, a.text])).toEqual([[last, "the last answer, to both"]]);
    expect(await recover(client)).toEqual({ answers: [] });
  });

  it("a prompt waiting behind another conversation's turn of its chat owes nothing of that turn's delivered answer, and nothing of its own unfinished one", async () => {
    const { dir, d, c, sessionId: chat } = await onSocket();
    server.script({ text: "hello" });
    await c.ask(3, "session/prompt", { sessionId: chat, prompt: [{ type: "text", text: "first" }] });
    await c.ask(4, "session/prompt", { sessionId: chat, prompt: [{ type: "text", text: "/chat:create b" }] });
    const main = `${chat}~main`;
    const b = `${chat}~b`;
    await c.ask(5, "session/resume", { sessionId: main, cwd: dir, mcpServers: [] });
    await c.ask(6, "session/resume", { sessionId: b, cwd: dir, mcpServers: [] });
    const release = deferred();
    const never = deferred();
    server.script(
      async () => {
        await release.promise;
        return { text: "main's answer, delivered" };
      },
      async () => {
        await never.promise;
        return { text: "b's answer, never" };
      },
    );
    cleanup.push(() => never.resolve());
    const toMain = c.ask(7, "session/prompt", { sessionId: main, prompt: [{ type: "text", text: "to main" }] });
    await server.waitForRequest(2);
    // b's prompt waits for main's turn, which holds the chat's lock.
    c.send({ id: 8, method: "session/prompt", params: { sessionId: b, prompt: [{ type: "text", text: "to b" }] } });
    await new Promise((r) => setTimeout(r, 300));
    release.resolve();
    expect(await toMain).toMatchObject({ result: { stopReason: "end_turn" } });
    // b's turn asks the model, and the daemon is killed while it does.
    await server.waitForRequest(3);
    await d.stop("SIGKILL");
    const again = watched(startDaemon(["--agent", dir]), cleanup);
    expect(await recover(await stdioClient(again, cleanup))).toEqual({ answers: [] });
  });

  // Killed while the model answers, its message on disk and its prompt owed; or, as a kill a moment
  // sooner leaves it, owed after event 0 with its message not yet under its number, which the next
  // process's turn then writes its own message at.
  it.each([
    { when: "before its turn answered", onDisk: true, events: ["killed", "the next", "the next turn's answer"] },
    { when: "before its message was on disk", onDisk: false, events: ["the next", "the next turn's answer"] },
  ])("a prompt whose process was killed $when owes nothing of the next process's turn, whose answer reached its own client", async ({ onDisk, events }) => {
    const { dir } = place();
    const { d, c, sessionId } = await stdioSession(dir, cleanup);
    const never = deferred();
    cleanup.push(() => never.resolve());
    server.script(
      async () => {
        await never.promise;
        return { text: "never written" };
      },
      { text: "the next turn's answer" },
    );
    void c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "killed" }] }).catch(() => undefined);
    await server.waitForRequest(1);
    const conv = paths({ dir }).conversation(sessionId);
    await until(() => readdirSync(conv.dir).some((n) => n.startsWith("owed-")) && readEventsFrom(conv, 1).length === 1, "the prompt written and owed");
    await d.stop("SIGKILL");
    if (!onDisk) {
      unlinkSync(conv.event(1));
      // What this process read of it is forgotten: a number is never written twice but by such a hand.
      forgetEvents();
    }
    // Another process takes the next turn; its answer is delivered to its prompt.
    const next = await stdioSession(dir, cleanup);
    await next.c.agent.request(acp.methods.agent.session.resume, { sessionId, cwd: dir, mcpServers: [] });
    expect(await next.c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "the next" }] })).toMatchObject({ stopReason: "end_turn" });
    expect(answerOf(dir, sessionId, "the next turn's answer")).toBeDefined();
    expect(readEventsFrom(conv, 1).map((e) => (e.event.kind === "message" ? e.event.text : e.event.kind))).toEqual(events);
    expect(await recover(next.c)).toEqual({ answers: [] });
    // Its file is removed once that answer was written.
    await until(() => !readdirSync(conv.dir).some((n) => n.startsWith("owed-")), "the owed file removed");
  });

  it("of two processes that recover one gone process's answer at once, one hands it over", async () => {
    const { dir, d, c, sessionId } = await onSocket();
    const release = deferred();
    // Far more than a socket holds: a client that reads nothing leaves the answer to its recover unwritten.
    const big = `${"the one answer ".repeat(200_000)}end`;
    server.script(async () => {
      await release.promise;
      return { text: big };
    });
    c.send({ id: 3, method: "session/prompt", params: { sessionId, prompt: [{ type: "text", text: "hi" }] } });
    await server.waitForRequest(1);
    c.conn.destroy();
    release.resolve();
    await d.waitForLog(/"turn ended"/);
    await d.stop("SIGKILL");
    const sockets = [join(dir, "..", "one.sock"), join(dir, "..", "two.sock")];
    const clients = [];
    for (const socket of sockets) {
      const p = watched(startDaemon(["--agent", dir, "--socket", socket]), cleanup);
      await p.waitForLog(/"serving ACP"/);
      const k = await rawClient(socket);
      await k.ask(1, "initialize", { protocolVersion: 1, clientCapabilities: {} });
      clients.push(k);
    }
    const [first, second] = clients as [Awaited<ReturnType<typeof rawClient>>, Awaited<ReturnType<typeof rawClient>>];
    // The first reads nothing while it is answered; the second asks meanwhile.
    first.conn.pause();
    const fromFirst = first.ask(2, "_link/recover", {});
    await new Promise((r) => setTimeout(r, 500));
    const fromSecond = (await second.ask(2, "_link/recover", {})) as { result: Recovered };
    expect(fromSecond.result.answers).toEqual([]);
    first.conn.resume();
    const got = (await fromFirst) as { result: Recovered };
    expect(got.result.answers.map((a) => a.text.length)).toEqual([big.length]);
  });

  it("a model chosen by another session while the turn ran is no end of it: its answer is still owed", async () => {
    const { other } = await leftMidTurn("answered after the model was chosen", async (other, sessionId, dir) => {
      await other.agent.request(acp.methods.agent.session.resume, { sessionId, cwd: dir, mcpServers: [] });
      // Written at once, without the lock, while the turn runs.
      await other.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "/model:set another-model" }] });
    });
    expect((await recover(other)).answers.map((a) => a.text)).toEqual(["answered after the model was chosen"]);
  });

  it("refuses -32602, handing over nothing, when _meta.link.agent names an agent the connection doesn't serve", async () => {
    const { other } = await leftMidTurn("the agent's own answer");
    const refused = await other.agent.request("_link/recover", { _meta: { link: { agent: "someone-else" } } }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(refused).toMatchObject({ code: -32602, message: expect.stringContaining('not "someone-else"') });
    expect((await recover(other)).answers.map((a) => a.text)).toEqual(["the agent's own answer"]);
  });
});
