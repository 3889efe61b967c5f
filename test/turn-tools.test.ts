// A turn with real MCP servers from npm: a round's calls at once, answers cut at 32 KiB, at most
// eight rounds, a server killed mid-call, a subagent's narrowed tools.
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { McpToolHost } from "../daemon/tools/host.js";
import { narrowToolsList, paths, readEventsFrom, writeSettings, type AgentRef } from "../store/index.js";
import { CALLS_AT_ONCE } from "../turn/calls.js";
import { runTurn } from "../turn/turn.js";
import type { ToolServer } from "../turn/tools.js";
import type { TurnEvent } from "../turn/types.js";
import { ROOT } from "./fixtures/built.js";
import { startRendezvous } from "./fixtures/rendezvous.js";
import { startModelServer, type ModelServer, type RecordedRequest } from "./model-server.js";

const EVERYTHING = join(ROOT, "node_modules/@modelcontextprotocol/server-everything/dist/index.js");
const MEMORY = join(ROOT, "node_modules/@modelcontextprotocol/server-memory/dist/index.js");

let server: ModelServer;
let host: McpToolHost;
const dirs: string[] = [];

beforeAll(async () => {
  server = await startModelServer();
});
afterEach(async () => {
  await host?.close();
});
afterAll(async () => {
  await server.close();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

function agent(extra: Record<string, unknown> = {}): AgentRef {
  const dir = mkdtempSync(join(tmpdir(), "lh-turn-tools-"));
  dirs.push(dir);
  writeSettings({ dir }, { model: { provider: "test", name: "scripted", base_url: server.url }, ...extra });
  return { dir };
}

/** everything over stdio, each process's pid added to a file where a test can kill it. */
function everything(pidFile: string): ToolServer {
  return { name: "everything", source: { type: "stdio", command: "sh", args: ["-c", `echo $$ >> "${pidFile}"; exec "${process.execPath}" "${EVERYTHING}" stdio`] } };
}

function pids(pidFile: string): number[] {
  return existsSync(pidFile) ? readFileSync(pidFile, "utf8").split("\n").filter(Boolean).map(Number) : [];
}

function memory(dir: string): ToolServer {
  return { name: "memory", source: { type: "stdio", command: process.execPath, args: [MEMORY], env: { MEMORY_FILE_PATH: join(dir, "graph.jsonl") } } };
}

const messages = (r: RecordedRequest) => (r.body as { messages: { role: string; content?: unknown; tool_call_id?: string }[] }).messages;
const toolNames = (r: RecordedRequest) => ((r.body as { tools?: { function: { name: string } }[] }).tools ?? []).map((t) => t.function.name);

async function turn(a: AgentRef, text: string, tools: ToolServer[], thread = "t") {
  const seen: { at: number; e: TurnEvent }[] = [];
  const outcome = await runTurn({ agent: a, thread, message: { text }, tools: host, toolServers: tools }, (e) => seen.push({ at: Date.now(), e }));
  return { outcome, seen };
}

describe("a turn with tools", () => {
  it("runs two tools' calls of one round at once, gets both answers, and answers the user", async () => {
    host = new McpToolHost();
    const a = agent();
    // Two tools whose one call answers only once both calls are running at once.
    const meeting = await startRendezvous(2);
    try {
      const tools: ToolServer[] = [
        { name: "left", source: { type: "http", url: `${meeting.url}/left` } },
        { name: "right", source: { type: "http", url: `${meeting.url}/right` } },
        memory(a.dir),
      ];
      server.script(
        { tool_calls: [{ id: "c1", name: "left__meet", arguments: {} }, { id: "c2", name: "right__meet", arguments: {} }] },
        (r) => ({ text: `both done: ${messages(r).filter((m) => m.role === "tool").length}` }),
      );
      const { outcome, seen } = await turn(a, "meet", tools);
      expect(outcome.stop).toBe("end_turn");
      const results = seen.filter((s) => s.e.type === "tool_result");
      expect(results.map((s) => (s.e as { status: string }).status)).toEqual(["completed", "completed"]);
      // Both were running at once: each call was answered only once the other had started.
      expect(meeting.answered).toEqual([2, 2]);
      const events = readEventsFrom(paths(a).conversation("t"), 1).map((e) => e.event);
      expect(events.filter((e) => e.kind === "tool_result").map((e) => (e as { text: string }).text)).toEqual(["met 2", "met 2"]);
      expect(events.at(-1)).toMatchObject({ role: "assistant", text: "both done: 2" });
      // Every tool is offered, in the same order every turn.
      expect(toolNames(server.requests.at(-1)!).filter((n) => n.startsWith("memory__")).length).toBeGreaterThan(0);
      expect(toolNames(server.requests.at(-1)!)).toEqual(expect.arrayContaining(["left__meet", "right__meet"]));
    } finally {
      await host.close();
      await meeting.close();
    }
  });

  it("runs at most CALLS_AT_ONCE calls of a round at once, the rest each as one ends, and answers them all", async () => {
    host = new McpToolHost();
    const a = agent();
    // Answered only once one more than the bound run at once, which never comes: each is answered alone, saying how many ran.
    const meeting = await startRendezvous(CALLS_AT_ONCE + 1, 1_000);
    try {
      const calls = Array.from({ length: CALLS_AT_ONCE + 4 }, (_, i) => ({ id: `c${i}`, name: "many__meet", arguments: {} }));
      server.script({ tool_calls: calls }, { text: "all done" });
      const { outcome } = await turn(a, "meet many", [{ name: "many", source: { type: "http", url: `${meeting.url}/many` } }]);
      expect(outcome.stop).toBe("end_turn");
      expect(meeting.answered).toHaveLength(calls.length);
      expect(Math.max(...meeting.answered)).toBe(CALLS_AT_ONCE);
      const results = readEventsFrom(paths(a).conversation("t"), 1).filter((e) => e.event.kind === "tool_result");
      expect(results.map((e) => (e.event as { call_id: string }).call_id).sort()).toEqual(calls.map((c) => c.id).sort());
    } finally {
      await host.close();
      await meeting.close();
    }
  });

  it("a prompt refused as too long names the tool calls it offered and what they took, beside the conversation's messages", async () => {
    host = new McpToolHost();
    const a = agent();
    server.script({ error: { status: 400, code: "context_length_exceeded", message: "This model's maximum context length is 8192 tokens." } });
    const { outcome } = await turn(a, "long", [memory(a.dir)]);
    expect(outcome.failure?.reason).toBe("context_too_long");
    const offered = toolNames(server.requests.at(-1)!).length;
    expect(offered).toBeGreaterThan(0);
    expect(outcome.failure?.message).toMatch(new RegExp(`sent 2 messages, about \\d+ tokens, and ${offered} tool calls offered, about [1-9]\\d* tokens \\(window`));
    await host.close();
  });

  it("a window the instructions and the tools offered fill alone: the turn is refused as too long, naming them, and nothing is sent", async () => {
    host = new McpToolHost();
    const a = agent({ window: { max: 600, answer: 100, margin: 0 } });
    // A new conversation's first turn too: its instructions and tools are over FILL_NO_WINDOW, so it waits for the window.
    const before = server.requests.length;
    for (const prompt of ["hello", "again"]) {
      const { outcome } = await turn(a, prompt, [memory(a.dir)]);
      expect(outcome.failure?.reason).toBe("context_too_long");
      expect(outcome.failure?.message).toMatch(/the instructions and the tools offered take about \d+ tokens, of them \d+ tool calls offered, about \d+ tokens, all the 600-token window \(from settings\) leaves a request: the request was not sent/);
    }
    expect(server.requests.length).toBe(before);
    const events = readEventsFrom(paths(a).conversation("t"), 1).map((e) => e.event);
    expect(events.map((e) => e.kind)).toEqual(["message", "failure", "message", "failure"]);
    await host.close();
  });

  it("keeps an answer up to 32 KiB, saying where it was cut", async () => {
    host = new McpToolHost();
    const a = agent();
    server.script({ tool_calls: [{ id: "big", name: "everything__echo", arguments: { message: "x".repeat(40_000) } }] }, { text: "ok" });
    await turn(a, "echo a lot", [everything(join(a.dir, "pid"))]);
    const result = readEventsFrom(paths(a).conversation("t"), 1).find((e) => e.event.kind === "tool_result")!.event;
    expect(result).toMatchObject({ kind: "tool_result", truncated: true, error: false });
    const text = (result as { text: string }).text;
    expect(Buffer.byteLength(text)).toBeLessThanOrEqual(32 * 1024);
    expect(text).toMatch(/\[cut: the answer was \d+ bytes; only the first 32 KiB are kept\]$/);
  });

  it("gives a model that calls tools forever eight rounds, then one answer with no calls", async () => {
    host = new McpToolHost();
    const a = agent();
    const before = server.requests.length;
    server.fallback = (r) =>
      (r.body as { tool_choice?: string }).tool_choice === "none"
        ? { text: "stopping here" }
        : { tool_calls: [{ name: "everything__echo", arguments: { message: "again" } }] };
    const { outcome } = await turn(a, "loop", [everything(join(a.dir, "pid"))]);
    const asked = server.requests.slice(before).filter((r) => r.path.endsWith("/chat/completions"));
    expect(asked).toHaveLength(9);
    expect(asked.slice(0, 8).every((r) => (r.body as { tool_choice?: string }).tool_choice === undefined)).toBe(true);
    expect((asked[8]!.body as { tool_choice?: string }).tool_choice).toBe("none");
    expect(outcome.stop).toBe("end_turn");
    const events = readEventsFrom(paths(a).conversation("t"), 1).map((e) => e.event);
    expect(events.filter((e) => e.kind === "tool_result")).toHaveLength(8);
    expect(events.at(-1)).toMatchObject({ role: "assistant", text: "stopping here" });
    expect(events.at(-1)).not.toHaveProperty("tool_calls");
    server.fallback = () => ({ text: "fine" });
  });

  it("answers a call whose server is killed mid-call as failed, and the next turn still works", async () => {
    host = new McpToolHost();
    const a = agent();
    const pidFile = join(a.dir, "pid");
    const tools = [everything(pidFile)];
    server.script(
      () => {
        // The tools were listed by a first process; the call starts the turn's own session, a
        // second one: kill it once it is up (a kill that lands before the call fails it too).
        const listed = pids(pidFile).length;
        const kill = setInterval(() => {
          const pid = pids(pidFile)[listed];
          if (pid === undefined) return;
          clearInterval(kill);
          setTimeout(() => process.kill(pid, "SIGKILL"), 300);
        }, 20);
        return { tool_calls: [{ id: "slow", name: "everything__trigger-long-running-operation", arguments: { duration: 10, steps: 10 } }] };
      },
      { text: "it failed" },
    );
    const first = await turn(a, "start a long thing", tools);
    expect(first.outcome.stop).toBe("end_turn");
    const failed = first.seen.find((s) => s.e.type === "tool_result")!.e as { status: string; text: string };
    expect(failed.status).toBe("failed");
    server.script({ tool_calls: [{ id: "e", name: "everything__echo", arguments: { message: "back" } }] }, { text: "works again" });
    const second = await turn(a, "try echo", tools);
    const ok = second.seen.find((s) => s.e.type === "tool_result")!.e as { status: string; text: string };
    expect(ok).toMatchObject({ status: "completed" });
    expect(ok.text).toContain("back");
  });

  it("keeps a subagent to its narrowed tools, and a later wider list doesn't widen them", async () => {
    host = new McpToolHost();
    const a = agent();
    const conv = paths(a).conversation("sub");
    const tools = [everything(join(a.dir, "pid")), memory(a.dir)];
    narrowToolsList(conv, ["memory"]);
    narrowToolsList(conv, ["memory", "everything"]);
    server.script({ tool_calls: [{ id: "x", name: "everything__echo", arguments: { message: "hi" } }] }, { text: "no echo" });
    const { seen } = await turn(a, "echo hi", tools, "sub");
    const offered = toolNames(server.requests.at(-1)!);
    expect(offered.length).toBeGreaterThan(0);
    expect(offered.every((n) => n.startsWith("memory__"))).toBe(true);
    const refused = seen.find((s) => s.e.type === "tool_result")!.e as { status: string; text: string };
    expect(refused).toEqual(expect.objectContaining({ status: "failed", text: "there is no tool everything__echo" }));
  });
});
