// Tools against the limits a long-lived daemon needs, over the built daemon on stdio with the real ACP
// client and real MCP servers: a call that reports progress forever is still bounded, a stdio tool
// starts in the agent's files folder, a tool that says a secret has it taken out, and eight rounds
// leave no listener behind.
import { existsSync, mkdirSync, readdirSync, readFileSync, realpathSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import * as acp from "@agentclientprotocol/sdk";
import type { ContentBlock, SessionNotification, SessionUpdate } from "@agentclientprotocol/sdk";
import { beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { offeredName } from "../daemon/tools/offer.js";
import { TOOL_ANSWERS_WAITING_MAX } from "../daemon/tools/session.js";
import { paths, readEventsFrom } from "../store/index.js";
import { configure, daemonTestHooks, openClient, scriptedSettings, startDaemon, stdioStream, tempDir, until, type Client, type Daemon, watched } from "./acp-client.js";
import type { ModelServer, RecordedRequest } from "./model-server.js";
import { assertBuilt, BIN, ROOT } from "./fixtures/built.js";

const EVERYTHING = `"${process.execPath}" "${ROOT}node_modules/@modelcontextprotocol/server-everything/dist/index.js" stdio`;
const PROBE = join(ROOT, "dist/test/probe-server.js");
const RAW = join(ROOT, "dist/test/raw-tool-server.js");

let server: ModelServer;
const cleanup = daemonTestHooks([BIN, "dist/daemon/serve.js", "dist/acp/app.js"], (s) => (server = s));
// The probe runs from dist/, as the daemon does.
beforeAll(() => assertBuilt(["dist/test/probe-server.js", "dist/test/raw-tool-server.js"], ["test/probe-server.ts", "test/raw-tool-server.ts"]));

function agent(extra: Record<string, unknown> = {}): string {
  const dir = tempDir("lnk-hardening-tools-");
  cleanup.push(() => dir.remove());
  configure(dir.path, scriptedSettings(server.url, extra));
  return dir.path;
}

function daemon(args: string[], env: NodeJS.ProcessEnv = {}): Daemon {
  const d = startDaemon(args, env);
  return watched(d, cleanup);
}

async function session(d: Daemon, mcpServers: acp.McpServer[] = []): Promise<{ c: Client; sessionId: string }> {
  const c = await openClient(stdioStream(d.child));
  cleanup.push(() => c.close());
  const { sessionId } = await c.agent.request(acp.methods.agent.session.new, { cwd: ROOT, mcpServers });
  return { c, sessionId };
}

const text = (s: string): ContentBlock[] => [{ type: "text", text: s }];
const prompt = (c: Client, sessionId: string, s: string) => c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: text(s) });
const of = <K extends SessionUpdate["sessionUpdate"]>(updates: readonly SessionNotification[], kind: K) =>
  updates.map((u) => u.update).filter((u): u is Extract<SessionUpdate, { sessionUpdate: K }> => u.sessionUpdate === kind);
const results = (dir: string, thread: string) =>
  readEventsFrom(paths({ dir }).conversation(thread), 1)
    .map((e) => e.event)
    .filter((e) => e.kind === "tool_result");
/** Whether a process runs: there, and not a zombie waiting for whoever took it over to reap it. */
function alive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "latin1");
    return stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3) !== "Z";
  } catch {
    return false;
  }
}

/** What the daemon wrote on stderr: one JSON object a line, nothing else. */
const logLines = (d: Daemon) =>
  d
    .stderr()
    .trim()
    .split("\n")
    .map((line) => z.record(z.string(), z.unknown()).parse(JSON.parse(line)));

describe("a tool call's bounds", { timeout: 30_000 }, () => {
  it("a call that reports progress all along still ends at timeouts.tool_call, answered as failed", async () => {
    const dir = agent({ timeouts: { tool_call: 1 } });
    const d = daemon(["--agent", dir], { LNK_TOOL_EVERYTHING: EVERYTHING });
    const { c, sessionId } = await session(d);
    // Progress every 0.25 s for 20 s: each report would start a call's own timeout again.
    const long = { duration: 20, steps: 80 };
    server.script({ tool_calls: [{ id: "long", name: "everything__trigger-long-running-operation", arguments: long }] }, { text: "It took too long." });
    expect(await prompt(c, sessionId, "run it")).toMatchObject({ stopReason: "end_turn" });
    const [result] = results(dir, sessionId);
    expect(result).toMatchObject({ error: true, text: expect.stringMatching(/still running after 1 s, the most a tool call may take \(timeouts\.tool_call\)/) });
    expect(of(c.updates, "tool_call_update").at(-1)).toMatchObject({ status: "failed" });
    // The model was told, and answered.
    expect(JSON.stringify(server.requests[1]?.body.messages)).toContain("timeouts.tool_call");
  });
});

describe("a stdio tool's folder", { timeout: 30_000 }, () => {
  it("is the agent's files folder, not the daemon's working folder", async () => {
    const dir = agent();
    const files = join(dir, "workspace");
    mkdirSync(files);
    const d = daemon(["--agent", dir, "--files", files], { LNK_TOOL_PROBE: `"${process.execPath}" "${PROBE}"` });
    const own: acp.McpServer = { name: "mine", command: process.execPath, args: [PROBE], env: [] };
    const { c, sessionId } = await session(d, [own]);
    server.script({ tool_calls: [{ name: "probe__cwd", arguments: {} }, { name: "mine__cwd", arguments: {} }] }, { text: "Both in the workspace." });
    expect(await prompt(c, sessionId, "where are you?")).toMatchObject({ stopReason: "end_turn" });
    const answers = results(dir, sessionId).map((r) => (r as { text: string; error: boolean }));
    expect(answers.map((a) => a.error)).toEqual([false, false]);
    expect(answers.map((a) => a.text)).toEqual([realpathSync(files), realpathSync(files)]);
    expect(realpathSync(files)).not.toBe(realpathSync(process.cwd()));
  });
});

describe("a tool that says a secret", { timeout: 30_000 }, () => {
  it("has it taken out of its answers, its stderr, the events, the updates and the log", async () => {
    const token = "tok-0123456789abcdef-SECRET";
    const password = "pa55w0rd-SECRET";
    const dir = agent();
    // A URL with credentials that leads nowhere, and a tool whose own environment holds a token.
    const d = daemon(["--agent", dir], { LNK_DEBUG: "1", LNK_TOOL_NOWHERE: `http://user:${password}@127.0.0.1:9/mcp` });
    const own: acp.McpServer = { name: "probe", command: process.execPath, args: [PROBE], env: [{ name: "PROBE_API_TOKEN", value: token }] };
    const { c, sessionId } = await session(d, [own]);
    server.script(
      { tool_calls: [{ name: "probe__env", arguments: { name: "PROBE_API_TOKEN" } }] },
      { tool_calls: [{ name: "probe__crash", arguments: { name: "PROBE_API_TOKEN" } }] },
      { text: "Done." },
    );
    expect(await prompt(c, sessionId, "tell me your token")).toMatchObject({ stopReason: "end_turn" });
    const answers = results(dir, sessionId).map((r) => r as { text: string; error: boolean });
    expect(answers[0]).toEqual(expect.objectContaining({ error: false, text: "PROBE_API_TOKEN=[redacted]" }));
    expect(answers[1]).toEqual(expect.objectContaining({ error: true, text: expect.stringMatching(/crashing with PROBE_API_TOKEN=\[redacted\]/) }));
    expect(JSON.stringify(c.updates)).not.toContain(token);
    expect(JSON.stringify(server.requests.map((r) => r.body))).not.toContain(token);
    expect(await d.stop()).toEqual({ code: 0, signal: null });
    // Every file of the conversation, once the daemon has stopped: what the turn wrote after its
    // answer too (the copy, the mark), and no lock of a turn still letting go.
    const folder = paths({ dir }).conversation(sessionId).dir;
    for (const name of readdirSync(folder)) expect(readFileSync(join(folder, name), "utf8")).not.toContain(token);
    // The tool's stderr was logged (LNK_DEBUG), with the token taken out.
    expect(d.stderr()).toMatch(/crashing with PROBE_API_TOKEN=\[redacted\]/);
    expect(d.stderr()).not.toContain(token);
    expect(d.stderr()).not.toContain(password);
  });
});

describe("a round whose calls show large images", { timeout: 60_000 }, () => {
  it("shows the client its images up to 32 MiB of them in all; the rest are left out, their answers' text kept", async () => {
    const dir = agent();
    const d = daemon(["--agent", dir]);
    const own: acp.McpServer = { name: "probe", command: process.execPath, args: [PROBE], env: [] };
    const { c, sessionId } = await session(d, [own]);
    // Six images of 6 MiB (8 Mi characters of base64 each): four make 32 MiB.
    const calls = Array.from({ length: 6 }, (_, i) => ({ id: `img${i}`, name: "probe__image", arguments: { bytes: 6 * 1024 * 1024 } }));
    server.script({ tool_calls: calls }, { text: "Seen." });
    expect(await prompt(c, sessionId, "show me")).toMatchObject({ stopReason: "end_turn" });
    const done = of(c.updates, "tool_call_update").filter((u) => u.status === "completed");
    expect(done).toHaveLength(6);
    const images = done.flatMap((u) => (u.content ?? []).filter((x) => x.type === "content" && x.content.type === "image"));
    expect(images).toHaveLength(4);
    for (const u of done) expect(JSON.stringify(u.content)).toContain(`an image of ${6 * 1024 * 1024} bytes`);
    c.close();
    expect(await d.stop()).toEqual({ code: 0, signal: null });
  });
});

describe("a tool slow to exit once its turn is over", { timeout: 60_000 }, () => {
  it("is not waited for by the turn's answer: it is still running when the answer comes, and ended after", async () => {
    const dir = agent();
    const d = daemon(["--agent", dir]);
    const pidFile = join(dir, "linger.pid");
    const own: acp.McpServer = { name: "probe", command: process.execPath, args: [PROBE], env: [{ name: "PROBE_LINGER_FILE", value: pidFile }] };
    const { c, sessionId } = await session(d, [own]);
    server.script({ tool_calls: [{ name: "probe__cwd", arguments: {} }] }, { text: "Done." });
    expect(await prompt(c, sessionId, "where are you?")).toMatchObject({ stopReason: "end_turn" });
    const pid = Number(readFileSync(pidFile, "utf8"));
    // Its session was ended with the turn; it takes seconds to go (its input's end, then a SIGTERM it ignores, then a SIGKILL).
    expect(alive(pid)).toBe(true);
    await until(() => !alive(pid), "the tool slow to exit ended", 15_000);
    c.close();
    expect(await d.stop()).toEqual({ code: 0, signal: null });
  });

  it("is ended by a process that stops at once, at a second signal, mid-call: nothing of it left running", async () => {
    const dir = agent({ timeouts: { tool_idle: 300, tool_call: 600 } });
    const d = daemon(["--agent", dir]);
    const pidFile = join(dir, "linger.pid");
    const own: acp.McpServer = { name: "probe", command: process.execPath, args: [PROBE], env: [{ name: "PROBE_LINGER_FILE", value: pidFile }] };
    const { c, sessionId } = await session(d, [own]);
    // A call that waits for another that never comes: under way when the signals come.
    server.script({ tool_calls: [{ name: "probe__meet", arguments: { count: 2 } }] }, { text: "Met." });
    void prompt(c, sessionId, "wait for it").catch(() => undefined);
    await until(() => existsSync(pidFile) && readFileSync(pidFile, "utf8").length > 0, "the tool started", 15_000);
    const pid = Number(readFileSync(pidFile, "utf8"));
    cleanup.push(() => {
      if (alive(pid)) process.kill(pid, "SIGKILL");
    });
    await new Promise((resolve) => setTimeout(resolve, 300));
    d.child.kill("SIGTERM");
    await d.waitForLog(/"stopping"/);
    expect(await d.stop("SIGTERM")).toEqual({ code: 1, signal: null });
    await until(() => !alive(pid), "the tool was ended", 5_000);
  });
});

describe("a call whose arguments nest thousands deep", { timeout: 60_000 }, () => {
  it("is answered as failed, shown as text, and its conversation loads again: the client's connection stays", async () => {
    const dir = agent();
    const d = daemon(["--agent", dir]);
    const own: acp.McpServer = { name: "probe", command: process.execPath, args: [PROBE], env: [] };
    const { c, sessionId } = await session(d, [own]);
    const deep = `{"deep":${"[".repeat(5000)}${"]".repeat(5000)}}`;
    server.script({ tool_calls: [{ id: "deep", name: "probe__cwd", arguments: deep }] }, { text: "Too deep." });
    expect(await prompt(c, sessionId, "go deep")).toMatchObject({ stopReason: "end_turn" });
    // Shown to the client as the model sent it, as text.
    expect(of(c.updates, "tool_call").map((u) => u.rawInput)).toEqual([deep]);
    expect(results(dir, sessionId)).toEqual([expect.objectContaining({ error: true, text: expect.stringContaining("nest deeper than 64 arrays and objects") })]);
    c.close();
    expect(await d.stop()).toEqual({ code: 0, signal: null });
    // Replayed by a process of its own: the same call, as text.
    const again = daemon(["--agent", dir]);
    const r = await openClient(stdioStream(again.child));
    await r.agent.request(acp.methods.agent.session.load, { sessionId, cwd: ROOT, mcpServers: [] });
    expect(of(r.updates, "tool_call").map((u) => u.rawInput)).toEqual([deep]);
    r.close();
    expect(await again.stop()).toEqual({ code: 0, signal: null });
  });
});

describe("a tool that answers at length", { timeout: 30_000 }, () => {
  it("a 9 MB answer, one line on the pipe, is read whole and kept cut to the bound of a tool's answer", async () => {
    const dir = agent();
    const d = daemon(["--agent", dir]);
    const own: acp.McpServer = { name: "probe", command: process.execPath, args: [PROBE], env: [{ name: "PROBE_HOSTILE", value: "1" }] };
    const { c, sessionId } = await session(d, [own]);
    server.script({ tool_calls: [{ name: "probe__big", arguments: { bytes: 9_000_000 } }] }, { text: "Read." });
    expect(await prompt(c, sessionId, "read the big one")).toMatchObject({ stopReason: "end_turn" });
    const [answer] = results(dir, sessionId).map((r) => r as { text: string; error: boolean; truncated?: boolean });
    expect(answer).toMatchObject({ error: false, truncated: true });
    expect(answer?.text.startsWith("z".repeat(1000))).toBe(true);
    expect(Buffer.byteLength(answer?.text ?? "")).toBeLessThanOrEqual(32 * 1024);
    expect(await d.stop()).toEqual({ code: 0, signal: null });
  });
});

/** An agent, its daemon, and a session with the probe as its client's tool, started with `name`=`value`. */
async function probeWith(name: string, value: string, extra: Record<string, unknown> = {}): Promise<{ dir: string; d: Daemon; c: Client; sessionId: string }> {
  const dir = agent(extra);
  const d = daemon(["--agent", dir]);
  return { dir, d, ...(await session(d, [{ name: "probe", command: process.execPath, args: [PROBE], env: [{ name, value }] }])) };
}

type OfferedFunction = { name: string; description?: string; parameters?: unknown };
/** The functions a request to the model offered. */
const functionsOf = (r: RecordedRequest): OfferedFunction[] => ((r.body as { tools?: { function: OfferedFunction }[] }).tools ?? []).map((t) => t.function);

describe("a tool that lists past what a provider takes", { timeout: 60_000 }, () => {
  it("has at most 128 calls offered, each named in 64 characters a provider takes, described and schemed within bounds; a shortened name still reaches its call", async () => {
    const { dir, d, c, sessionId } = await probeWith("PROBE_WIDE", "200");
    let offered: OfferedFunction[] = [];
    server.script(
      (r) => {
        offered = functionsOf(r);
        const long = offered.find((f) => f.name.startsWith("probe__zz_a_call_named_at_such_length"));
        return { tool_calls: [{ name: long?.name ?? "none", arguments: {} }] };
      },
      { text: "Called." },
    );
    // The scripted model refuses what OpenAI's API refuses: the turn ends well only if all was taken.
    expect(await prompt(c, sessionId, "call a long one")).toMatchObject({ stopReason: "end_turn" });
    expect(offered.length).toBe(128);
    expect(new Set(offered.map((f) => f.name)).size).toBe(128);
    for (const f of offered) {
      expect(f.name).toMatch(/^[A-Za-z0-9_-]{1,64}$/);
      expect((f.description ?? "").length).toBeLessThanOrEqual(8192);
      expect(JSON.stringify(f.parameters).length).toBeLessThanOrEqual(64 * 1024);
    }
    const names = offered.map((f) => f.name);
    // Sorted by name, the first 128 kept: the long ones shortened and told apart by their hash.
    expect(names).toEqual([...names].sort());
    expect(names.filter((n) => n.startsWith("probe__zz_"))).toHaveLength(128 - 8);
    expect(names).toContain("probe__appel__-nommer__");
    expect(names).toContain("probe__described_at_length");
    expect(names).not.toContain("probe__schema_of_a_thousand_fields");
    expect(offered.find((f) => f.name === "probe__described_at_length")?.description).toMatch(/^A call described at length\. .*…$/s);
    // The call named by its shortened name ran, as the tool named it.
    const [answer] = results(dir, sessionId).map((r) => r as { text: string; error: boolean });
    expect(answer).toMatchObject({ error: false, text: expect.stringMatching(/^called zz_a_call_named_at_such_length_that_with_its_tool_it_passes_sixty_four_\d{3}$/) });
    expect(offeredName("probe", (answer?.text ?? "").slice("called ".length))).toBe(names.find((n) => n.startsWith("probe__zz_")));
    // Each call left out is said once in the log, with why: not again at the next turn.
    server.script({ text: "Again." });
    expect(await prompt(c, sessionId, "again")).toMatchObject({ stopReason: "end_turn" });
    expect(await d.stop()).toEqual({ code: 0, signal: null });
    const left = logLines(d).filter((l) => l.msg === "a tool's call is not offered");
    expect(left.filter((l) => l.call === "schema_of_a_thousand_fields")).toEqual([expect.objectContaining({ tool: "probe", why: expect.stringContaining("over the 65536") })]);
    expect(left.filter((l) => String(l.call).startsWith("nnnn"))).toEqual([expect.objectContaining({ call: "n".repeat(200), why: "its name is 2000 characters, over the 1024 a call's may be" })]);
    // 210 listed (200 wide, the other letters, the long description, the schema, the long name; cwd,
    // env, crash, big, image, meet): 208 less the schema and the long name, 128 offered.
    expect(left.filter((l) => String(l.why).startsWith("past the 128"))).toHaveLength(208 - 128);
  });
});

describe("an endpoint that takes short descriptions only", { timeout: 60_000 }, () => {
  it("is asked again at once with each description cut to the bound it said, and sent them so cut from then on", async () => {
    const { d, c, sessionId } = await probeWith("PROBE_WIDE", "1");
    server.descriptionMax = 1024;
    try {
      server.script({ text: "First." }, { text: "Second." });
      const before = server.requests.length;
      expect(await prompt(c, sessionId, "first")).toMatchObject({ stopReason: "end_turn" });
      const [refused, taken, ...more] = server.requests.slice(before) as RecordedRequest[];
      expect(more).toHaveLength(0);
      expect(Math.max(...functionsOf(refused as RecordedRequest).map((f) => (f.description ?? "").length))).toBe(8192);
      const cut = functionsOf(taken as RecordedRequest);
      expect(cut.map((f) => f.name)).toEqual(functionsOf(refused as RecordedRequest).map((f) => f.name));
      for (const f of cut) expect((f.description ?? "").length).toBeLessThanOrEqual(1024);
      expect(cut.find((f) => f.name === "probe__described_at_length")?.description).toMatch(/^A call described at length\. .*…$/s);
      expect(cut.find((f) => f.name === "probe__cwd")?.description).toBe("The folder this tool was started in.");
      // The next turn's request is cut from the first: one request, taken.
      const at = server.requests.length;
      expect(await prompt(c, sessionId, "second")).toMatchObject({ stopReason: "end_turn" });
      expect(server.requests.slice(at).map((r) => functionsOf(r))).toEqual([cut]);
    } finally {
      server.descriptionMax = undefined;
    }
    expect(await d.stop()).toEqual({ code: 0, signal: null });
  });
});

describe("a tool whose list runs to megabytes", { timeout: 60_000 }, () => {
  it("is read to 4 MiB and no further, said in the log; the calls read before are offered", async () => {
    // A window they fit in: 128 calls of 8 KiB each fill the unknown model's 32,768 tokens, which a first turn is told before anything is sent.
    const { d, c, sessionId } = await probeWith("PROBE_HEAVY", "600", { window: { max: 1_000_000 } });
    let offered: string[] = [];
    server.script((r) => {
      offered = functionsOf(r).map((f) => f.name);
      return { text: "Listed." };
    });
    expect(await prompt(c, sessionId, "what can you call?")).toMatchObject({ stopReason: "end_turn" });
    expect(offered).toHaveLength(128);
    expect(offered.slice(0, 5)).toEqual(["probe__big", "probe__crash", "probe__cwd", "probe__env", "probe__heavy_0000"]);
    expect(await d.stop()).toEqual({ code: 0, signal: null });
    const said = logLines(d).filter((l) => l.msg === "a tool's list is read no further");
    expect(said).toEqual([expect.objectContaining({ tool: "probe", why: `past the ${4 * 1024 * 1024} characters of a tool's list read` })]);
    // Some 500 of the 605 calls, 8 KiB each, were read.
    expect(Number(said[0]?.calls)).toBeGreaterThan(450);
    expect(Number(said[0]?.calls)).toBeLessThan(520);
  });
});

describe("eight rounds of calls", { timeout: 60_000 }, () => {
  it("leave no abort listener behind: no MaxListenersExceededWarning, the log all JSON", async () => {
    const dir = agent();
    const d = daemon(["--agent", dir], { LNK_TOOL_EVERYTHING: EVERYTHING });
    const { c, sessionId } = await session(d);
    server.fallback = (r) =>
      (r.body as { tool_choice?: string }).tool_choice === "none"
        ? { text: "stopping here" }
        : { tool_calls: [{ name: "everything__echo", arguments: { message: "again" } }, { name: "everything__get-sum", arguments: { a: 1, b: 2 } }] };
    expect(await prompt(c, sessionId, "loop")).toMatchObject({ stopReason: "end_turn" });
    expect(server.requests).toHaveLength(9);
    expect(results(dir, sessionId)).toHaveLength(16);
    // A second turn in the same process adds nothing either.
    expect(await prompt(c, sessionId, "loop again")).toMatchObject({ stopReason: "end_turn" });
    expect(await d.stop()).toEqual({ code: 0, signal: null });
    expect(d.stderr()).not.toMatch(/MaxListenersExceeded/);
    expect(logLines(d).every((l) => l.level !== "error")).toBe(true);
  });
});

describe("a subagent's narrowed tools", { timeout: 30_000 }, () => {
  it("a tool's name then one of its calls, in either order, leave that call offered", async () => {
    const d = daemon(["--agent", agent()], { LNK_TOOL_EVERYTHING: EVERYTHING });
    const c = await openClient(stdioStream(d.child));
    cleanup.push(() => c.close());
    const offered: string[][] = [];
    for (const [thread, lists] of [
      ["sub-a", [["everything"], ["everything__echo"]]],
      ["sub-b", [["everything__echo"], ["everything"]]],
    ] as const) {
      for (const tools of lists) await c.agent.request(acp.methods.agent.session.new, { cwd: ROOT, mcpServers: [], _meta: { link: { thread, tools } } });
      server.script({ text: "Only echo." });
      await prompt(c, thread, "what can you call?");
      offered.push(((server.requests.at(-1)?.body as { tools?: { function: { name: string } }[] }).tools ?? []).map((t) => t.function.name));
    }
    expect(offered).toEqual([["everything__echo"], ["everything__echo"]]);
  });
});

describe("a hostile stdio tool", { timeout: 60_000 }, () => {
  it("a process it starts that outlives it is ended with its session, which waits for none", async () => {
    const dir = agent();
    const d = daemon(["--agent", dir]);
    const own: acp.McpServer = { name: "probe", command: process.execPath, args: [PROBE], env: [{ name: "PROBE_HOSTILE", value: "1" }] };
    const { c, sessionId } = await session(d, [own]);
    const file = join(dir, "grandchild.pid");
    server.script({ tool_calls: [{ name: "probe__spawn", arguments: { file } }] }, { text: "Started." });
    expect(await prompt(c, sessionId, "start it")).toMatchObject({ stopReason: "end_turn" });
    const pid = Number(readFileSync(file, "utf8"));
    cleanup.push(() => {
      if (alive(pid)) process.kill(pid, "SIGKILL");
    });
    // The turn's sessions end with it: the tool, and what it started, are gone by the next turn.
    server.script({ text: "Again." });
    expect(await prompt(c, sessionId, "again")).toMatchObject({ stopReason: "end_turn" });
    // A hang detector only: the first turn's sessions end once its answer is out.
    await until(() => !alive(pid), "the process the tool started ended", 15_000);
    expect(await d.stop()).toEqual({ code: 0, signal: null });
  });

  it("one that exits mid-call, leaving a process it started on its pipes: the call fails at once, and that process is ended", async () => {
    // Its idle bound far off: the call must fail because the tool is gone, not because it waited.
    const dir = agent({ timeouts: { tool_idle: 300, tool_call: 600 } });
    const d = daemon(["--agent", dir]);
    const own: acp.McpServer = { name: "probe", command: process.execPath, args: [PROBE], env: [{ name: "PROBE_HOSTILE", value: "1" }] };
    const { c, sessionId } = await session(d, [own]);
    const file = join(dir, "left.pid");
    server.script({ tool_calls: [{ name: "probe__spawn_exit", arguments: { file } }] }, { text: "It went away." });
    const answered = prompt(c, sessionId, "start it and go");
    await until(() => existsSync(file) && readFileSync(file, "utf8").length > 0, "the tool started its process", 15_000);
    const pid = Number(readFileSync(file, "utf8"));
    cleanup.push(() => {
      if (alive(pid)) process.kill(pid, "SIGKILL");
    });
    expect(await answered).toMatchObject({ stopReason: "end_turn" });
    expect(results(dir, sessionId)).toEqual([expect.objectContaining({ error: true })]);
    await until(() => !alive(pid), "the process the tool left ended", 15_000);
    c.close();
    expect(await d.stop()).toEqual({ code: 0, signal: null });
  });

  it("one that reads nothing while it floods its client with requests has its session ended past 1 MiB unread, its call answered as failed", async () => {
    const dir = agent({ timeouts: { tool_idle: 50, tool_call: 55 } });
    const d = daemon(["--agent", dir]);
    const own: acp.McpServer = { name: "probe", command: process.execPath, args: [PROBE], env: [{ name: "PROBE_HOSTILE", value: "1" }] };
    const { c, sessionId } = await session(d, [own]);
    server.script({ tool_calls: [{ name: "probe__flood", arguments: {} }] }, { text: "It flooded." });
    expect(await prompt(c, sessionId, "flood")).toMatchObject({ stopReason: "end_turn" });
    const [result] = results(dir, sessionId);
    // Ended by the bound, long before the call's own timeouts.
    expect(result).toMatchObject({ error: true });
    expect(JSON.stringify(result)).not.toMatch(/timeouts\.tool_(idle|call)/);
    expect(await d.stop()).toEqual({ code: 0, signal: null });
    // The log all JSON: no warning of Node's about the listeners the flood's answers left waiting.
    expect(logLines(d).length).toBeGreaterThan(0);
  });

  it("a secret in what it shows, in a call's name or on its stderr as it fails to start is kept from the client, the model, the events and the log", async () => {
    const token = "tok-0123456789abcdef-SECRET";
    const key = "sk-settings-0123456789-SECRET";
    const dir = tempDir("lnk-hardening-tools-");
    cleanup.push(() => dir.remove());
    const settings = scriptedSettings(server.url) as { model: Record<string, unknown> };
    configure(dir.path, { ...settings, model: { ...settings.model, key } });
    const said = join(dir.path, "said.txt");
    writeFileSync(said, `auth failed with key ${key}`);
    const d = daemon(["--agent", dir.path]);
    const own: acp.McpServer = { name: "probe", command: process.execPath, args: [PROBE], env: [{ name: "PROBE_HOSTILE", value: "1" }, { name: "PROBE_TOKEN", value: token }, { name: "PROBE_NAMED", value: token }] };
    // One that says the settings' key as it fails to start.
    const failing: acp.McpServer = { name: "failing", command: process.execPath, args: [PROBE], env: [{ name: "PROBE_SAY_FILE", value: said }] };
    const { c, sessionId } = await session(d, [own, failing]);
    server.script({ tool_calls: [{ name: "probe__links", arguments: { name: "PROBE_TOKEN" } }] }, { text: "Shown." });
    expect(await prompt(c, sessionId, "show me")).toMatchObject({ stopReason: "end_turn" });
    const offered = JSON.stringify(server.requests.at(-1)?.body.tools ?? []);
    expect(offered).toContain("probe__links");
    expect(offered).not.toContain(token);
    expect(JSON.stringify(c.updates)).toContain("file:///tmp/plain");
    expect(JSON.stringify(c.updates)).not.toContain(token);
    expect(await d.stop()).toEqual({ code: 0, signal: null });
    const folder = paths({ dir: dir.path }).conversation(sessionId).dir;
    for (const name of readdirSync(folder)) expect(readFileSync(join(folder, name), "utf8")).not.toContain(token);
    expect(d.stderr()).toMatch(/"tool left out of this turn","tool":"failing".*auth failed with key \[redacted\]/);
    expect(d.stderr()).not.toContain(token);
    expect(d.stderr()).not.toContain(key);
  });
});

describe("a hostile HTTP tool", { timeout: 90_000 }, () => {
  /**
   * An MCP server over Streamable HTTP of the test's own, as little as a client takes: it answers
   * initialize and tools/list; a call it answers with a stream of pings and nothing else; the answers
   * to its pings it reads and never replies to, each left waiting on its connection.
   */
  const Message = z.object({ id: z.unknown().optional(), method: z.string().optional(), params: z.object({ protocolVersion: z.string().optional() }).loose().optional() }).loose();

  async function flooding(pings: number): Promise<{ url: string; answers: () => number; connections: () => number }> {
    let answers = 0;
    let connections = 0;
    const server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (b: Buffer) => chunks.push(b));
      req.on("end", (): void => {
        if (req.method === "DELETE") return void res.writeHead(200).end();
        if (req.method !== "POST") return void res.writeHead(405).end();
        const msg = Message.parse(JSON.parse(Buffer.concat(chunks).toString("utf8")));
        const json = (result: unknown): void => void res.writeHead(200, { "content-type": "application/json", "mcp-session-id": "s1" }).end(JSON.stringify({ jsonrpc: "2.0", id: msg.id, result }));
        if (msg.method === "initialize") return json({ protocolVersion: msg.params?.protocolVersion, capabilities: { tools: {} }, serverInfo: { name: "flood", version: "1" } });
        if (msg.method === "tools/list") return json({ tools: [{ name: "flood", description: "Floods its client with pings.", inputSchema: { type: "object" } }] });
        if (msg.method === "tools/call") {
          res.writeHead(200, { "content-type": "text/event-stream", "mcp-session-id": "s1" });
          for (let i = 0; i < pings; i++) res.write(`event: message\ndata: ${JSON.stringify({ jsonrpc: "2.0", id: `ping-${i}`, method: "ping" })}\n\n`);
          return;
        }
        // An answer to a ping: read, and left waiting.
        if (msg.method === undefined) answers++;
        else res.writeHead(202).end();
      });
    });
    server.on("connection", () => connections++);
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    cleanup.push(() => {
      server.closeAllConnections();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    });
    return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`, answers: () => answers, connections: () => connections };
  }

  it("one that leaves the answers to its own pings waiting has its session ended past 64 of them, its call answered as failed", async () => {
    const tool = await flooding(5_000);
    const dir = agent({ timeouts: { tool_idle: 60, tool_call: 65 } });
    const d = daemon(["--agent", dir]);
    const { c, sessionId } = await session(d, [{ type: "http", name: "flood", url: tool.url, headers: [] }]);
    server.script({ tool_calls: [{ name: "flood__flood", arguments: {} }] }, { text: "It flooded." });
    expect(await prompt(c, sessionId, "flood")).toMatchObject({ stopReason: "end_turn" });
    const [result] = results(dir, sessionId);
    expect(result).toMatchObject({ error: true });
    expect(JSON.stringify(result)).not.toMatch(/timeouts\.tool_(idle|call)/);
    // Of 5,000 pings, at most 64 answers were sent, each on a connection of its own (unbounded: 1,000
    // answers and connections, until the call's own timeout).
    expect(tool.answers()).toBeLessThanOrEqual(TOOL_ANSWERS_WAITING_MAX);
    expect(tool.connections()).toBeLessThan(3 * TOOL_ANSWERS_WAITING_MAX);
    expect(await d.stop()).toEqual({ code: 0, signal: null });
  });
});

describe("a call id the model uses again in a later turn", { timeout: 60_000 }, () => {
  it("is shown as the conversation's next <id>#n, live as a load shows it, also by a process that did not show the first", async () => {
    const dir = agent();
    const own: acp.McpServer = { name: "probe", command: process.execPath, args: [PROBE], env: [] };
    const d = daemon(["--agent", dir]);
    const { c, sessionId } = await session(d, [own]);
    const reused = () => server.script({ tool_calls: [{ id: "call_0", name: "probe__cwd", arguments: {} }] }, { text: "Done." });
    const ids = (updates: readonly SessionNotification[], from = 0) => of(updates.slice(from), "tool_call").map((u) => u.toolCallId);
    reused();
    expect(await prompt(c, sessionId, "one")).toMatchObject({ stopReason: "end_turn" });
    let seen = c.updates.length;
    reused();
    expect(await prompt(c, sessionId, "two")).toMatchObject({ stopReason: "end_turn" });
    expect(ids(c.updates, seen)).toEqual(["call_0#2"]);
    // Its result lands on the call it answers, not on the first turn's.
    expect(of(c.updates.slice(seen), "tool_call_update").map((u) => u.toolCallId)).toEqual(["call_0#2"]);
    c.close();
    expect(await d.stop()).toEqual({ code: 0, signal: null });
    // Another process, which showed neither, names the third call on from what is on disk.
    const again = daemon(["--agent", dir]);
    const r = await openClient(stdioStream(again.child));
    cleanup.push(() => r.close());
    await r.agent.request(acp.methods.agent.session.resume, { sessionId, cwd: ROOT, mcpServers: [own] });
    seen = r.updates.length;
    reused();
    expect(await prompt(r, sessionId, "three")).toMatchObject({ stopReason: "end_turn" });
    expect(ids(r.updates, seen)).toEqual(["call_0#3"]);
    // A load shows the ids the turns showed.
    seen = r.updates.length;
    await r.agent.request(acp.methods.agent.session.load, { sessionId, cwd: ROOT, mcpServers: [own] });
    expect(ids(r.updates, seen)).toEqual(["call_0", "call_0#2", "call_0#3"]);
    r.close();
    expect(await again.stop()).toEqual({ code: 0, signal: null });
  });
});

describe("lone halves of UTF-16 pairs", { timeout: 60_000 }, () => {
  /** Every string of a value, its keys too. */
  const strings = (value: unknown): string[] =>
    typeof value === "string" ? [value] : value !== null && typeof value === "object" ? Object.entries(value).flatMap(([k, v]) => [k, ...strings(v)]) : [];

  it("in a tool's description, schema and answer are kept and offered as U+FFFD: the conversation goes on, turn after turn", async () => {
    const { dir, d, c, sessionId } = await probeWith("PROBE_SURROGATE", "1");
    server.script({ tool_calls: [{ name: "probe__surrogate", arguments: {} }] }, { text: "Read." }, { text: "Still here." });
    // The scripted model refuses a body with a lone surrogate, as DeepSeek, OpenAI and Anthropic do.
    expect(await prompt(c, sessionId, "read it")).toMatchObject({ stopReason: "end_turn" });
    expect(await prompt(c, sessionId, "and again")).toMatchObject({ stopReason: "end_turn" });
    expect(results(dir, sessionId)).toEqual([expect.objectContaining({ error: false, text: "lone \ufffd high and \ufffd low, a pair 😀 kept" })]);
    const offered = functionsOf(server.requests.at(-1) as RecordedRequest).find((f) => f.name === "probe__surrogate");
    expect(offered?.description).toBe("Answers with lone halves \ufffd of a pair \ufffd.");
    expect(JSON.stringify(offered?.parameters)).toContain("A field described \ufffd with a lone half.");
    for (const r of server.requests) expect(strings(r.body).every((s) => s.isWellFormed())).toBe(true);
    expect(of(c.updates, "agent_message_chunk").map((u) => (u.content.type === "text" ? u.content.text : "")).join("")).toContain("Still here.");
    expect(await d.stop()).toEqual({ code: 0, signal: null });
  });

  it("in a prompt is kept and sent as U+FFFD, at its turn and at every later one", async () => {
    const dir = agent();
    const d = daemon(["--agent", dir]);
    const { c, sessionId } = await session(d);
    server.script({ text: "Odd." }, { text: "Fine." });
    expect(await prompt(c, sessionId, "half a pair \ud83d and the other \ude00, a whole 😀")).toMatchObject({ stopReason: "end_turn" });
    expect(await prompt(c, sessionId, "and now?")).toMatchObject({ stopReason: "end_turn" });
    const sent = server.requests.slice(-2).map((r) => JSON.stringify(r.body.messages));
    for (const body of sent) expect(body).toContain("half a pair \ufffd and the other \ufffd, a whole 😀");
    // Kept so too: a reader of the conversation that decodes strictly meets no lone half.
    const asked = readEventsFrom(paths({ dir }).conversation(sessionId), 1).find((e) => e.event.kind === "message" && e.event.role === "user")?.event;
    expect(asked).toMatchObject({ text: "half a pair \ufffd and the other \ufffd, a whole 😀" });
    expect(await d.stop()).toEqual({ code: 0, signal: null });
  });
});

describe("a call whose arguments' schema nests thousands deep", { timeout: 60_000 }, () => {
  it("is left out, saying why in the log, and the tool's other calls are offered and called, turn after turn", async () => {
    const dir = agent();
    const d = daemon(["--agent", dir]);
    const { c, sessionId } = await session(d, [{ name: "raw", command: process.execPath, args: [RAW], env: [{ name: "RAW_DEPTH", value: "3000" }] }]);
    let offered: string[] = [];
    server.script(
      (r) => {
        offered = functionsOf(r).map((f) => f.name);
        return { tool_calls: [{ name: "raw__plain", arguments: {} }] };
      },
      { text: "Called." },
      { text: "Again." },
    );
    expect(await prompt(c, sessionId, "call it")).toMatchObject({ stopReason: "end_turn" });
    expect(offered).toEqual(["raw__plain"]);
    expect(results(dir, sessionId)).toEqual([expect.objectContaining({ error: false, text: "called plain" })]);
    expect(await prompt(c, sessionId, "again")).toMatchObject({ stopReason: "end_turn" });
    expect(functionsOf(server.requests.at(-1) as RecordedRequest).map((f) => f.name)).toEqual(["raw__plain"]);
    expect(await d.stop()).toEqual({ code: 0, signal: null });
    const left = logLines(d).filter((l) => l.msg === "a tool's call is not offered");
    expect(left).toEqual([expect.objectContaining({ tool: "raw", call: "deep", why: "its arguments' schema nests deeper than 128 arrays and objects" })]);
  });
});

describe("a tool that shows thousands of links", { timeout: 60_000 }, () => {
  /** The resource links a tool call's update shows. */
  const linksOf = (u: { content?: unknown[] | null }) => (u.content ?? []).filter((x) => (x as { content?: { type?: string } }).content?.type === "resource_link");

  it("has the client shown 100 of an answer's, the rest counted as left out; a round's links held to 32 MiB with its images", async () => {
    // A window that takes the round's four answers of 32 KiB each, so the turn asks again after them.
    const { dir, d, c, sessionId } = await probeWith("PROBE_HOSTILE", "1", { window: { max: 200_000 } });
    const wide = Array.from({ length: 4 }, (_, i) => ({ id: `wide${i}`, name: "probe__many_links", arguments: { count: 100, uri_bytes: 100 * 1024 } }));
    server.script({ tool_calls: [{ id: "many", name: "probe__many_links", arguments: { count: 5000 } }] }, { tool_calls: wide }, { text: "Seen." });
    expect(await prompt(c, sessionId, "show me")).toMatchObject({ stopReason: "end_turn" });
    const done = of(c.updates, "tool_call_update").filter((u) => u.status === "completed");
    expect(done).toHaveLength(5);
    const [many, ...round] = done;
    expect(linksOf(many ?? {})).toHaveLength(100);
    expect(JSON.stringify(many?.content)).toContain("[4900 more resource links left out: an answer shows at most 100]");
    expect(JSON.stringify(many).length).toBeLessThan(64 * 1024);
    const [first] = results(dir, sessionId).map((r) => r as { text: string });
    expect(first?.text).toContain("[resource_link file:///links/99/ link 99]");
    expect(first?.text).not.toContain("file:///links/100/");
    expect(first?.text).toContain("[4900 more resource links left out: an answer shows at most 100]");
    // Four answers of 100 links of 100 KiB each, 40 MiB: three are shown theirs, within 32 MiB.
    expect(round.map((u) => linksOf(u).length).sort()).toEqual([0, 100, 100, 100]);
    expect(await d.stop()).toEqual({ code: 0, signal: null });
  });
});
