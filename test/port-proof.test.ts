// The port endpoint (127.0.0.1 only) and the proof: `_link/prove` answers a challenge with an HMAC of
// the key, refuses a replay, and on a port with a key nothing else is served until the client has
// answered the daemon's nonce.
import { createHmac } from "node:crypto";
import { networkInterfaces } from "node:os";
import { connect } from "node:net";
import { join } from "node:path";
import * as acp from "@agentclientprotocol/sdk";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { CLIENT_PROOF_PREFIX, LinkConnection, REMEMBERED_MAX, prove as proveHere, remembered } from "../acp/link.js";
import { answerText, configure, daemonTestHooks, failure, openClient, portStream, scriptedSettings, servedPort, startDaemon, stdioClient, tempDir, until, watched, type Client } from "./acp-client.js";
import { BIN } from "./fixtures/built.js";
import { freePort } from "./fixtures/port.js";
import type { ModelServer } from "./model-server.js";

let server: ModelServer;
const cleanup = daemonTestHooks([BIN, "dist/daemon/serve.js", "dist/daemon/port.js", "dist/daemon/gate.js", "dist/acp/link.js"], (s) => (server = s));

const KEY = "lnk-test-key-5f0c2a9e7b41d3";
const hmac = (key: string, text: string) => createHmac("sha256", key).update(text, "utf8").digest("hex");

function agentDir(): string {
  const tmp = tempDir("lnk-port-");
  cleanup.push(() => tmp.remove());
  const dir = join(tmp.path, "agent");
  configure(dir, scriptedSettings(server.url));
  return dir;
}

async function portClient(port: number): Promise<Client> {
  const { stream, socket } = await portStream(port);
  const c = await openClient(stream);
  cleanup.push(() => socket.destroy());
  return c;
}

const prove = (c: Client, params: unknown) => c.agent.request("_link/prove", params as Record<string, unknown>) as Promise<{ hmac?: string; nonce?: string; proved: boolean }>;

describe("the port endpoint", () => {
  it("serves ACP on 127.0.0.1 alone, a port of 0 being one the system chose", async () => {
    const dir = agentDir();
    const d = watched(startDaemon(["--agent", dir, "--port", "0"], { LNK_KEY: "" }), cleanup);
    const port = await servedPort(d);
    expect(port).toBeGreaterThan(0);
    const c = await portClient(port);
    const { sessionId } = await c.agent.request(acp.methods.agent.session.new, { cwd: dir, mcpServers: [] });
    const answer = await c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "over the port" }] });
    expect(answer.stopReason).toBe("end_turn");
    expect(answerText(c.updates, sessionId)).toBe("echo: over the port");
    // Another interface of this machine, if it has one, reaches nothing there.
    const other = Object.values(networkInterfaces())
      .flat()
      .find((a) => a && a.family === "IPv4" && !a.internal);
    if (other) {
      const refused = await new Promise<string>((resolve) => {
        const s = connect({ port, host: other.address });
        s.once("connect", () => {
          s.destroy();
          resolve("connected");
        });
        s.once("error", (e: NodeJS.ErrnoException) => resolve(e.code ?? "error"));
      });
      expect(refused).toBe("ECONNREFUSED");
    }
  });

  it("LNK_PORT is --port's default; a port in use is refused at start, saying so, and nothing is served", async () => {
    const dir = agentDir();
    const port = await freePort();
    const d = watched(startDaemon(["--agent", dir], { LNK_PORT: String(port), LNK_KEY: "" }), cleanup);
    expect(await servedPort(d)).toBe(port);
    const second = watched(startDaemon(["--agent", dir, "--port", String(port)]), cleanup);
    expect((await second.exited).code).toBe(2);
    expect(second.stderr().trim()).toBe(`lnk-link-harness: port ${port} on 127.0.0.1 is in use by another process: choose another with --port`);
    const bad = watched(startDaemon(["--agent", dir, "--port", "65536"]), cleanup);
    expect((await bad.exited).code).toBe(2);
    expect(bad.stderr()).toContain("a port is a whole number from 0 to 65535");
  });
});

describe("the proof", () => {
  it("answers a challenge with the HMAC of the key, which a wrong key doesn't make; a replay, a short or a long challenge is refused", async () => {
    const dir = agentDir();
    const d = watched(startDaemon(["--agent", dir], { LNK_KEY: KEY }), cleanup);
    const c = await stdioClient(d, cleanup);
    const challenge = "a7c1e0f4b9d2368e5a1f0c7b";
    const got = await prove(c, { challenge });
    expect(got.hmac).toBe(hmac(KEY, challenge));
    expect(got.hmac).not.toBe(hmac(`${KEY}x`, challenge));
    expect(await failure(prove(c, { challenge }))).toMatchObject({ code: -32602, message: expect.stringContaining("answered already by this process") });
    expect(await failure(prove(c, { challenge: "short-15-bytes!" }))).toMatchObject({ code: -32602, message: expect.stringContaining("at least 16 bytes") });
    expect(await failure(prove(c, { challenge: "x".repeat(1025) }))).toMatchObject({ code: -32602, message: expect.stringContaining("at most 1024 bytes") });
    // 16 bytes, not 16 characters: é is two.
    expect((await prove(c, { challenge: "é".repeat(8) })).hmac).toBe(hmac(KEY, "é".repeat(8)));
    expect(await failure(prove(c, { challenge: `${CLIENT_PROOF_PREFIX}0123456789abcdef` }))).toMatchObject({ code: -32602 });
    // The key reaches no log line.
    expect(d.stderr()).not.toContain(KEY);
  });

  it("a client sending challenge after challenge never leaves the process unable to prove itself: past its most, the oldest is forgotten", () => {
    const conn = new LinkConnection(true);
    const challenge = (i: number) => `flood-challenge-${String(i).padStart(8, "0")}`;
    // Each answer also gives the unproved connection a nonce, remembered too: two a request.
    const sent = REMEMBERED_MAX / 2 + 10;
    for (let i = 0; i < sent; i++) expect(proveHere(KEY, conn, { challenge: challenge(i) }).hmac).toBe(hmac(KEY, challenge(i)));
    expect(remembered()).toBe(REMEMBERED_MAX);
    // Link's challenge, after the flood, is answered; the last ones sent are still refused.
    expect(proveHere(KEY, conn, { challenge: "challenge-from-link-after-flood" }).hmac).toBe(hmac(KEY, "challenge-from-link-after-flood"));
    expect(() => proveHere(KEY, conn, { challenge: challenge(sent - 1) })).toThrow(/answered already by this process/);
    expect(() => proveHere(KEY, conn, { challenge: "challenge-from-link-after-flood" })).toThrow(/answered already by this process/);
    expect(remembered()).toBe(REMEMBERED_MAX);
  });

  it("without a key is a clear error", async () => {
    const dir = agentDir();
    const d = watched(startDaemon(["--agent", dir], { LNK_KEY: "" }), cleanup);
    const c = await stdioClient(d, cleanup);
    expect(await failure(prove(c, { challenge: "0123456789abcdef0123" }))).toMatchObject({ code: -32600, message: expect.stringContaining("no key to prove with") });
  });

  it("on a port with a key, serves nothing but initialize and _link/prove until the client answers the daemon's nonce", async () => {
    const dir = agentDir();
    const d = watched(startDaemon(["--agent", dir, "--port", "0"], { LNK_KEY: KEY }), cleanup);
    const c = await portClient(await servedPort(d));
    const refused = await failure(c.agent.request(acp.methods.agent.session.new, { cwd: dir, mcpServers: [] }));
    expect(refused).toMatchObject({ code: -32000, message: expect.stringContaining("session/new is served once this connection has proved itself") });
    const first = await prove(c, { challenge: "challenge-from-link-0001" });
    expect(first).toMatchObject({ hmac: hmac(KEY, "challenge-from-link-0001"), proved: false, nonce: expect.stringMatching(/^[0-9a-f]{64}$/) });
    // A wrong answer (made with another key) proves nothing, and uses the nonce up.
    expect(await failure(prove(c, { answer: hmac("another key", `${CLIENT_PROOF_PREFIX}${first.nonce}`) }))).toMatchObject({ code: -32000 });
    expect(await failure(prove(c, { answer: hmac(KEY, `${CLIENT_PROOF_PREFIX}${first.nonce}`) }))).toMatchObject({ code: -32602, message: expect.stringContaining("no nonce") });
    expect(await failure(c.agent.request(acp.methods.agent.session.list, {}))).toMatchObject({ code: -32000 });
    // The daemon answers no challenge that is its own nonce: it can't be made to answer for the client.
    const second = await prove(c, { challenge: "challenge-from-link-0002" });
    expect(await failure(prove(c, { challenge: second.nonce }))).toMatchObject({ code: -32602 });
    const third = await prove(c, { challenge: "challenge-from-link-0003" });
    expect(await prove(c, { answer: hmac(KEY, `${CLIENT_PROOF_PREFIX}${third.nonce}`) })).toEqual({ proved: true });
    // Proved, its first request may be longer than the 64 KiB of an unproved connection's lines.
    const { sessionId } = await c.agent.request(acp.methods.agent.session.new, { cwd: dir, mcpServers: [], _meta: { pad: "x".repeat(100_000) } });
    await c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "proved" }] });
    expect(answerText(c.updates, sessionId)).toBe("echo: proved");
    // Another connection has proved nothing yet.
    const other = await portClient(await servedPort(d));
    expect(await failure(other.agent.request(acp.methods.agent.session.list, {}))).toMatchObject({ code: -32000 });
    expect(d.stderr()).not.toContain(KEY);
  });
});

describe("a port's connections that have not proved themselves", { timeout: 60_000 }, () => {
  /** A raw connection to the port: whether it was closed, and what it was sent. */
  function raw(port: number): Promise<{ socket: import("node:net").Socket; closed: Promise<string>; got: () => string }> {
    return new Promise((resolve, reject) => {
      const socket = connect({ port, host: "127.0.0.1" });
      let got = "";
      socket.on("data", (d) => (got += d.toString()));
      socket.on("error", () => undefined);
      const closed = new Promise<string>((done) => socket.on("close", () => done(got)));
      socket.once("connect", () => resolve({ socket, closed, got: () => got }));
      socket.once("error", reject);
      cleanup.push(() => socket.destroy());
    });
  }

  it("are refused a request led or ended by what the SDK trims and JSON does not, as any other, and a line none can read is a parse error", async () => {
    const dir = agentDir();
    const d = watched(startDaemon(["--agent", dir, "--port", "0"], { LNK_KEY: KEY }), cleanup);
    const c = await raw(await servedPort(d));
    c.socket.write(`${JSON.stringify({ jsonrpc: "2.0", id: 0, method: "initialize", params: { protocolVersion: 1 } })}\n`);
    const leads = ["\f", "\v", "\u00a0", "\ufeff", "\u3000", "\u2028", " \t"];
    for (const [i, lead] of leads.entries()) c.socket.write(`${lead}${JSON.stringify({ jsonrpc: "2.0", id: 1 + i, method: "session/new", params: { cwd: dir, mcpServers: [] } })}${lead}\n`);
    c.socket.write('\f{"jsonrpc":"2.0","id":99,\n');
    const answered = () => c.got().split("\n").filter(Boolean).map((l) => z.object({ id: z.unknown(), result: z.unknown().optional(), error: z.object({ code: z.number() }).optional() }).parse(JSON.parse(l)));
    await until(() => answered().length >= leads.length + 2, "every line answered");
    const got = answered();
    for (const i of leads.keys()) expect(got.filter((a) => a.id === 1 + i)).toEqual([expect.objectContaining({ error: expect.objectContaining({ code: -32000 }) })]);
    expect(got.filter((a) => a.result !== undefined).map((a) => a.id)).toEqual([0]);
    expect(got.filter((a) => a.id === null)).toEqual([expect.objectContaining({ error: expect.objectContaining({ code: -32700 }) })]);
    expect(server.requests).toHaveLength(0);
  });

  it("are closed unless proved in LNK_ACP_PROOF_MS; one that proved stays", async () => {
    const dir = agentDir();
    const d = watched(startDaemon(["--agent", dir, "--port", "0"], { LNK_KEY: KEY, LNK_ACP_PROOF_MS: "1000" }), cleanup);
    const port = await servedPort(d);
    const idle = await raw(port);
    const c = await portClient(port);
    const first = await prove(c, { challenge: "challenge-from-link-0101" });
    expect(await prove(c, { answer: hmac(KEY, `${CLIENT_PROOF_PREFIX}${first.nonce}`) })).toEqual({ proved: true });
    await idle.closed;
    await new Promise((resolve) => setTimeout(resolve, 1500));
    expect((await c.agent.request(acp.methods.agent.session.new, { cwd: dir, mcpServers: [] })).sessionId).toBeTruthy();
    await d.waitForLog(/did not prove itself in time/);
  });

  it("read lines of 64 KiB at most until proved: a longer one is refused under its id and nothing of it held", async () => {
    const dir = agentDir();
    const d = watched(startDaemon(["--agent", dir, "--port", "0"], { LNK_KEY: KEY }), cleanup);
    const c = await raw(await servedPort(d));
    c.socket.write(`{"jsonrpc":"2.0","id":7,"method":"initialize","params":{"protocolVersion":1,"pad":"${"x".repeat(100_000)}"}}\n`);
    await new Promise<void>((resolve) => {
      const check = setInterval(() => {
        if (c.got().includes("\n")) {
          clearInterval(check);
          resolve();
        }
      }, 20);
    });
    expect(JSON.parse(c.got().split("\n")[0] as string)).toMatchObject({ id: 7, error: { code: -32600 } });
  });

  it("are served 64 at once: one more is closed as it comes, and taken again once one of them ends", async () => {
    const dir = agentDir();
    const d = watched(startDaemon(["--agent", dir, "--port", "0"], { LNK_KEY: KEY }), cleanup);
    const port = await servedPort(d);
    const held = [];
    for (let i = 0; i < 64; i++) held.push(await raw(port));
    const over = await raw(port);
    expect(await over.closed).toBe("");
    await d.waitForLog(/too many connections to the port have not proved themselves/);
    (held[0] as { socket: import("node:net").Socket }).socket.destroy();
    await new Promise((resolve) => setTimeout(resolve, 200));
    const c = await portClient(port);
    expect(await prove(c, { challenge: "challenge-from-link-0102" })).toMatchObject({ proved: false });
  });
});
