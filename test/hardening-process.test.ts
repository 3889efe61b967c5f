// The daemon as a process, against what goes wrong around it: a module that fails to load once, two
// daemons starting on one stale socket, a read-only agent folder, a restart between a group's turns.
// Each runs the built daemon as a child process with the scripted model server.
import { copyFileSync, cpSync, lstatSync, mkdirSync, readFileSync, readdirSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import * as acp from "@agentclientprotocol/sdk";
import type { ContentBlock } from "@agentclientprotocol/sdk";
import { describe, expect, it, onTestFailed } from "vitest";
import {
  answerText,
  configure,
  daemonTestHooks,
  openClient,
  scriptedSettings,
  socketStream,
  startDaemon,
  stdioStream,
  tempDir,
  type Client,
  type Daemon,
} from "./acp-client.js";
import { BIN, ROOT } from "./fixtures/built.js";
import { linkFreeEnv } from "./fixtures/env.js";
import type { ModelServer, RecordedRequest } from "./model-server.js";

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
  cleanup.push(() => d.stop("SIGKILL"));
  onTestFailed(() => void process.stderr.write(`the daemon's log:\n${d.stderr()}\n`));
  return d;
}

async function client(d: Daemon): Promise<Client> {
  const c = await openClient(stdioStream(d.child));
  cleanup.push(() => c.close());
  return c;
}

const text = (s: string): ContentBlock[] => [{ type: "text", text: s }];
const toolNames = (r: RecordedRequest | undefined) => ((r?.body as { tools?: { function: { name: string } }[] } | undefined)?.tools ?? []).map((t) => t.function.name);

async function failure(p: Promise<unknown>): Promise<{ code: number; message: string }> {
  try {
    await p;
  } catch (e) {
    return e as { code: number; message: string };
  }
  throw new Error("expected the request to fail");
}

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

/** A copy of the built program in a folder of its own, as installed: its dist/ and the files it reads copied, its packages seen through links but for `own`. */
function copyOfBuild(own: readonly string[]): { bin: string; path(rel: string): string } {
  const tmp = tempDir("lnk-hard-build-");
  cleanup.push(() => tmp.remove());
  cpSync(join(ROOT, "dist"), join(tmp.path, "dist"), { recursive: true, filter: (p) => !p.startsWith(join(ROOT, "dist", "test")) });
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

describe("a module that failed to load once", { timeout: 120_000 }, () => {
  it("is loaded again by the next prompt: the turn, openai, the tool host and the MCP SDK", async () => {
    const OPENAI = "openai/index.mjs";
    const SDK = "@modelcontextprotocol/sdk/dist/esm/client/index.js";
    const build = copyOfBuild([OPENAI, SDK]);
    const dir = agent();
    const d = watch(startDaemon(["--agent", dir], linkFreeEnv({ LNK_TOOL_EVERYTHING: EVERYTHING }), build.bin));
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

describe("the agent, when it failed to load", { timeout: 120_000 }, () => {
  it("is loaded again for the next connection to the socket", async () => {
    const build = copyOfBuild([]);
    const dir = agent();
    const socket = join(dir, "control.sock");
    const mend = breakModule(build.path("dist/daemon/agent.js"));
    const d = watch(startDaemon(["--agent", dir, "--socket", socket], linkFreeEnv(), build.bin));
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
    breakModule(build.path("dist/daemon/agent.js"));
    const d = watch(startDaemon(["--agent", agent()], linkFreeEnv(), build.bin));
    const c = await client(d);
    void c.agent.request(acp.methods.agent.session.list, {}).catch(() => undefined);
    expect(await d.exited).toEqual({ code: 1, signal: null });
    expect(d.stderr()).toMatch(/"level":"error","msg":"connection ended","error":"the agent could not be loaded: /);
  });
});
