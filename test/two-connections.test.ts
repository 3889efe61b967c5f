// One session opened by two connections to one daemon, on its Unix socket: each connection's prompts
// run with the MCP servers and the working folder it opened the session with, never another's, while
// the conversation and its turns are the session's, shared by both.
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import * as acp from "@agentclientprotocol/sdk";
import type { ContentBlock, McpServer } from "@agentclientprotocol/sdk";
import { beforeAll, describe, expect, it, onTestFailed } from "vitest";
import { z } from "zod";
import { EVENT_KINDS } from "../protocol/index.js";
import { paths, readEventsFrom } from "../store/index.js";
import { answerText, configure, daemonTestHooks, openClient, scriptedSettings, socketStream, startDaemon, tempDir, until, type Client } from "./acp-client.js";
import { assertBuilt, BIN, ROOT } from "./fixtures/built.js";
import type { ModelServer, RecordedRequest } from "./model-server.js";

const PROBE = join(ROOT, "dist/test/probe-server.js");
const THREAD = "shared";

let server: ModelServer;
const cleanup = daemonTestHooks([BIN, "dist/acp/sessions.js"], (s) => (server = s));
beforeAll(() => assertBuilt(["dist/test/probe-server.js"], ["test/probe-server.ts"]));

const text = (s: string): ContentBlock[] => [{ type: "text", text: s }];

/** The probe tool named `name`, whose `env` call tells its variable WHO: `who`. */
const probe = (name: string, who: string): McpServer => ({ name, command: process.execPath, args: [PROBE], env: [{ name: "WHO", value: who }] });

/** An agent served on a socket, and two repositories to work in, each with its own AGENTS.md. */
async function place(): Promise<{ dir: string; socket: string; repoA: string; repoB: string }> {
  const tmp = tempDir("lnk-two-conn-");
  cleanup.push(() => tmp.remove());
  const dir = join(tmp.path, "agent");
  configure(dir, scriptedSettings(server.url));
  const repo = (name: string) => {
    const root = join(tmp.path, name);
    mkdirSync(join(root, ".git"), { recursive: true });
    writeFileSync(join(root, "AGENTS.md"), `The rules of ${name}.\n`);
    return root;
  };
  const socket = join(tmp.path, "control.sock");
  const d = startDaemon(["--agent", dir, "--socket", socket]);
  cleanup.push(() => d.stop("SIGKILL"));
  onTestFailed(() => void process.stderr.write(`the daemon's log:\n${d.stderr()}\n`));
  await d.waitForLog(/"serving ACP"/);
  return { dir, socket, repoA: repo("repo-a"), repoB: repo("repo-b") };
}

async function client(socket: string): Promise<Client & { hangUp(): void }> {
  const { stream, socket: conn } = await socketStream(socket);
  const c = await openClient(stream);
  cleanup.push(() => conn.destroy());
  return { ...c, hangUp: () => conn.destroy() };
}

const Tools = z.array(z.object({ function: z.object({ name: z.string() }).loose() }).loose()).optional();
/** The names of the tool calls a request to the model offered. */
const offered = (request: RecordedRequest | undefined): string[] => (Tools.parse((request?.body as { tools?: unknown }).tools) ?? []).map((t) => t.function.name);
/** The tools (before `__`) a request offered calls of. */
const toolsOf = (request: RecordedRequest | undefined): string[] => [...new Set(offered(request).map((name) => name.split("__")[0] ?? name))].sort();
/** The system prompt a request was sent with. */
const systemOf = (request: RecordedRequest | undefined): string => String(request?.body.messages?.[0]?.content);

/** What the last tool call shown to the client answered. */
const lastResult = (c: Client): string => {
  const done = c.updates.flatMap((n) => (n.update.sessionUpdate === "tool_call_update" && n.update.status !== "in_progress" ? [JSON.stringify(n.update.content)] : []));
  return done.at(-1) ?? "";
};

/** Prompts the session from `c`, the model calling `call` first, and returns the turn's first request to the model. */
async function promptCalling(c: Client, call: string, words: string): Promise<RecordedRequest | undefined> {
  const first = server.requests.length;
  server.script({ tool_calls: [{ name: call, arguments: { name: "WHO" } }] }, { text: `done: ${words}` });
  await c.agent.request(acp.methods.agent.session.prompt, { sessionId: THREAD, prompt: text(words) });
  await until(() => answerText(c.updates).endsWith(`done: ${words}`), `the answer to ${words}`);
  return server.requests[first];
}

/** The working folder each user message of the conversation came with, in order. */
const messageFolders = (dir: string): (string | undefined)[] =>
  readEventsFrom(paths({ dir }).conversation(THREAD), 1).flatMap(({ event }) => (event.kind === EVENT_KINDS.message && event.role === "user" ? [event.cwd] : []));

describe("a session two connections open", { timeout: 60_000 }, () => {
  it("runs each connection's prompts with the servers and the working folder that connection opened it with", async () => {
    const { dir, socket, repoA, repoB } = await place();
    const a = await client(socket);
    const b = await client(socket);
    await a.agent.request(acp.methods.agent.session.new, { cwd: repoA, mcpServers: [probe("alpha", "A")], _meta: { link: { thread: THREAD } } });
    // B loads it last, with servers and a folder of its own: A's stay A's.
    await b.agent.request(acp.methods.agent.session.load, { sessionId: THREAD, cwd: repoB, mcpServers: [probe("beta", "B")] });

    const fromA = await promptCalling(a, "alpha__env", "from A");
    expect(toolsOf(fromA)).toEqual(["alpha"]);
    expect(lastResult(a)).toContain("WHO=A");
    expect(systemOf(fromA)).toContain("The rules of repo-a.");
    expect(systemOf(fromA)).not.toContain("repo-b");

    const fromB = await promptCalling(b, "beta__env", "from B");
    expect(toolsOf(fromB)).toEqual(["beta"]);
    expect(lastResult(b)).toContain("WHO=B");
    expect(systemOf(fromB)).toContain("The rules of repo-b.");
    expect(systemOf(fromB)).not.toContain("repo-a");

    // And A's again, after B's turn: the conversation is one, its tools and folder each connection's own.
    const again = await promptCalling(a, "alpha__env", "A again");
    expect(toolsOf(again)).toEqual(["alpha"]);
    expect(systemOf(again)).toContain("The rules of repo-a.");
    expect(messageFolders(dir)).toEqual([repoA, repoB, repoA]);

    // session/list shows each connection the folder it holds the session open with.
    const listed = async (c: Client) => (await c.agent.request(acp.methods.agent.session.list, {})).sessions.find((s) => s.sessionId === THREAD)?.cwd;
    expect(await listed(a)).toBe(repoA);
    expect(await listed(b)).toBe(repoB);
  });

  it("keeps a connection's servers when the other closes, and offers one that opened it not no one else's", async () => {
    const { dir, socket, repoA, repoB } = await place();
    const a = await client(socket);
    const b = await client(socket);
    await a.agent.request(acp.methods.agent.session.new, { cwd: repoA, mcpServers: [probe("alpha", "A")], _meta: { link: { thread: THREAD } } });
    await b.agent.request(acp.methods.agent.session.load, { sessionId: THREAD, cwd: repoB, mcpServers: [probe("beta", "B")] });
    await promptCalling(b, "beta__env", "from B");
    b.hangUp();
    await b.closed;

    const fromA = await promptCalling(a, "alpha__env", "A after B left");
    expect(toolsOf(fromA)).toEqual(["alpha"]);
    expect(lastResult(a)).toContain("WHO=A");
    expect(systemOf(fromA)).toContain("The rules of repo-a.");

    // A connection that prompts the session without opening it has none of the others' servers.
    const c = await client(socket);
    const first = server.requests.length;
    server.script({ text: "no tools for you" });
    await c.agent.request(acp.methods.agent.session.prompt, { sessionId: THREAD, prompt: text("from C") });
    expect(toolsOf(server.requests[first])).toEqual([]);
    // One that loads it with no servers has none either, and its own folder.
    const d = await client(socket);
    await d.agent.request(acp.methods.agent.session.load, { sessionId: THREAD, cwd: dir, mcpServers: [] });
    server.script({ text: "nor for you" });
    await d.agent.request(acp.methods.agent.session.prompt, { sessionId: THREAD, prompt: text("from D") });
    expect(toolsOf(server.requests.at(-1))).toEqual([]);
    expect(systemOf(server.requests.at(-1))).not.toContain("The rules of");
    expect(messageFolders(dir).at(-1)).toBe(dir);

    // A still has its own.
    const last = await promptCalling(a, "alpha__env", "A at the end");
    expect(toolsOf(last)).toEqual(["alpha"]);
  });
});
