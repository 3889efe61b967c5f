// Recovery: an answer is delivered once its session/prompt answer was written to the client. One a
// turn finished but that never reached its client (the daemon was killed first, or the client left)
// is handed over by _link/recover, once, from what is on disk; a delivered one never is.
import { existsSync, readdirSync } from "node:fs";
import { connect } from "node:net";
import { join } from "node:path";
import { createInterface } from "node:readline";
import * as acp from "@agentclientprotocol/sdk";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { paths, readEventsFrom } from "../store/index.js";
import { configure, daemonTestHooks, openClient, scriptedSettings, socketStream, startDaemon, stdioClient, tempDir, watched, type Client } from "./acp-client.js";
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
    const { dir, socket } = place();
    const d = watched(startDaemon(["--agent", dir, "--socket", socket]), cleanup);
    await d.waitForLog(/"serving ACP"/);
    const { stream, socket: conn } = await socketStream(socket);
    const leaving = await openClient(stream);
    const { sessionId } = await leaving.agent.request(acp.methods.agent.session.new, { cwd: dir, mcpServers: [] });
    const release = deferred();
    server.script(async () => {
      await release.promise;
      return { text: "answered after you left" };
    });
    void leaving.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "wait for it" }] }).catch(() => undefined);
    await server.waitForRequest(1);
    conn.destroy();
    release.resolve();
    await d.waitForLog(/"turn ended"/);

    const { stream: s2 } = await socketStream(socket);
    const other = await openClient(s2);
    cleanup.push(() => other.close());
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
