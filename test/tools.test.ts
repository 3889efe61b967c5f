// The MCP tool host against real MCP servers from npm (everything, memory) over stdio and Streamable
// HTTP, and the project's own memory stand-in. Spec: decisions.txt, "How does Link Harness get tools?" on.
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { ROOT } from "./fixtures/built.js";
import { freePort } from "./fixtures/port.js";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { discoverTools, splitCommandLine } from "../daemon/tools/discover.js";
import { McpToolHost, type McpToolHostOptions } from "../daemon/tools/host.js";
import type { ToolBox, ToolServer } from "../turn/tools.js";

const EVERYTHING = join(ROOT, "node_modules/@modelcontextprotocol/server-everything/dist/index.js");
const PROBE = join(ROOT, "dist/test/probe-server.js");
const SERVER_MEMORY = join(ROOT, "node_modules/@modelcontextprotocol/server-memory/dist/index.js");
const MEMORY_STAND_IN = join(ROOT, "test/memory-server.ts");

// What server-everything 2026.8.31 lists, less simulate-research-query (it needs MCP tasks).
const EVERYTHING_CALLS = [
  "echo",
  "get-annotated-message",
  "get-env",
  "get-resource-links",
  "get-resource-reference",
  "get-structured-content",
  "get-sum",
  "get-tiny-image",
  "gzip-file-as-resource",
  "toggle-simulated-logging",
  "toggle-subscriber-updates",
  "trigger-long-running-operation",
];
const MEMORY_CALLS = [
  "add_observations",
  "create_entities",
  "create_relations",
  "delete_entities",
  "delete_observations",
  "delete_relations",
  "open_nodes",
  "read_graph",
  "search_nodes",
];

let dir: string;
const hosts: McpToolHost[] = [];

/**
 * The log lines the code under test writes on stderr (one JSON object a line), kept for the tests to
 * read rather than printed among the test runner's own lines, where a warning looks like a failure.
 */
const LogLine = z.record(z.string(), z.unknown());
const logged: z.infer<typeof LogLine>[] = [];
const writeStderr = process.stderr.write.bind(process.stderr);
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "lnk-tools-"));
});
beforeEach(() => {
  logged.length = 0;
  process.stderr.write = ((chunk: string | Uint8Array, ...rest: unknown[]) => {
    const text = typeof chunk === "string" ? chunk : Buffer.from(chunk).toString("utf8");
    if (!text.startsWith('{"time":')) return (writeStderr as (...a: unknown[]) => boolean)(chunk, ...rest);
    for (const line of text.trim().split("\n")) logged.push(LogLine.parse(JSON.parse(line)));
    return true;
  }) as typeof process.stderr.write;
});
afterEach(async () => {
  await Promise.all(hosts.splice(0).map((h) => h.close()));
  process.stderr.write = writeStderr;
});

/** What the log said of `msg`: each line's field `key`. */
const saidOf = (msg: string, key: string) => logged.filter((l) => l.msg === msg).map((l) => l[key]);
afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

function host(opts: McpToolHostOptions = {}): McpToolHost {
  const h = new McpToolHost(opts);
  hosts.push(h);
  return h;
}

let serial = 0;
/** A folder of its own for one test's files. */
function scratch(): string {
  const d = join(dir, String(++serial));
  mkdirSync(d);
  return d;
}

/**
 * A stdio tool whose every start is written to `starts` (its pid: `exec` keeps it), and which fails
 * to start while the file `broken` exists.
 */
function counted(name: string, starts: string, program: string[], broken = join(starts, "..", "broken"), env?: Record<string, string>): ToolServer {
  const line = program.map((w) => `'${w}'`).join(" ");
  const script = `if [ -e '${broken}' ]; then echo "cannot start" >&2; exit 3; fi; echo $$ >> '${starts}'; exec ${line}`;
  return { name, source: { type: "stdio", command: "sh", args: ["-c", script], ...(env ? { env } : {}) } };
}

const everythingProgram = [process.execPath, EVERYTHING, "stdio"];
const memoryProgram = [process.execPath, SERVER_MEMORY];

function pids(starts: string): number[] {
  if (!existsSync(starts)) return [];
  return readFileSync(starts, "utf8").split("\n").filter(Boolean).map(Number);
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Waits for a condition the code under test brings about on its own (a timer), checking often. */
async function until(cond: () => boolean, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`still not so after ${ms} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

function names(box: ToolBox): string[] {
  return box.offered.map((c) => c.name);
}

describe("discoverTools", () => {
  it("names the bridge's tools and memory, splits command lines like a shell, and sorts them", () => {
    const tools = discoverTools(
      {
        LNK_MEMORY: "http://127.0.0.1:9/mcp",
        LNK_TOOL_BROWSER: `node "/opt/my tools/browser.js" --profile 'a b' plain\\ word`,
        LNK_TOOL_Shell: "https://tools.example/shell",
        PATH: "/usr/bin",
      },
      {
        settings: { notes: "notes-server --dir /tmp" },
        acp: [
          { name: "Editor Files", command: "files-mcp", args: ["--root", "/src"], env: [{ name: "TOKEN", value: "x" }] },
          { type: "http", name: "search", url: "https://search.example/mcp", headers: [{ name: "Authorization", value: "Bearer t" }] },
        ],
      },
    );
    expect(tools).toEqual([
      { name: "browser", source: { type: "stdio", command: "node", args: ["/opt/my tools/browser.js", "--profile", "a b", "plain word"] } },
      { name: "editor_files", source: { type: "stdio", command: "files-mcp", args: ["--root", "/src"], env: { TOKEN: "x" } } },
      { name: "memory", source: { type: "http", url: "http://127.0.0.1:9/mcp" } },
      { name: "notes", source: { type: "stdio", command: "notes-server", args: ["--dir", "/tmp"] } },
      { name: "search", source: { type: "http", url: "https://search.example/mcp", headers: { Authorization: "Bearer t" } } },
      { name: "shell", source: { type: "http", url: "https://tools.example/shell" } },
    ]);
  });

  it("leaves out what it can't use, and never throws", () => {
    const tools = discoverTools(
      {
        LNK_TOOL_A__B: "cmd",
        LNK_TOOL_EMPTY: "  ",
        LNK_TOOL_OPEN: `cmd "never closed`,
        LNK_TOOL_BADURL: "http://",
        LNK_TOOL_: "cmd",
        LNK_MEMORY: "memory-server",
        LNK_TOOL_MEMORY: "another-memory",
        LNK_TOOL_OK: "ok-server",
      },
      {
        settings: { ok: "shadowed" },
        acp: [
          { type: "sse", name: "old", url: "http://x/sse", headers: [] },
          { type: "http", name: "ftp", url: "ftp://x", headers: [] },
          { name: "nocommand", command: "", args: [], env: [] },
        ],
      },
    );
    expect(tools).toEqual([
      { name: "memory", source: { type: "stdio", command: "memory-server", args: [] } },
      { name: "ok", source: { type: "stdio", command: "ok-server", args: [] } },
    ]);
    // Each left out with a warning that names where it came from.
    expect(saidOf("tool left out", "origin").sort()).toEqual(
      ["LNK_TOOL_", "LNK_TOOL_A__B", "LNK_TOOL_BADURL", "LNK_TOOL_EMPTY", "LNK_TOOL_MEMORY", "LNK_TOOL_OPEN", "settings tools.ok", "ACP mcpServers old", "ACP mcpServers ftp", "ACP mcpServers nocommand"].sort(),
    );
  });

  it("says why a URL can't be used without its user, its password or its query", () => {
    discoverTools(
      {
        LNK_TOOL_X: "https://user:hunter2-SECRET-pass@exa mple.com/mcp?key=SECRET-q",
        LNK_TOOL_SLASH: "https://alice:s3cr/et-SECRET@host.example/mcp",
        LNK_TOOL_HASH: "https://alice:pw#SECRET@host/mcp x",
        LNK_TOOL_ASK: "https://alice:pw?SECRET@host/mcp x",
      },
      { acp: [{ type: "http", name: "bob", url: "https://bob:pw-SECRET@host:99999/mcp#SECRET-f", headers: [] }] },
    );
    const said = saidOf("tool left out", "why");
    expect(said).toEqual(expect.arrayContaining(['"https://exa mple.com/mcp" is not a valid URL', '"https://host:99999/mcp" is not an http(s) URL']));
    expect(JSON.stringify(said)).not.toContain("SECRET");
  });

  it("splits words as a POSIX shell does, without running one", () => {
    expect(splitCommandLine(`a 'b "c"' "d \\"e\\" \\$f \\n" g\\ h '' $HOME`)).toEqual(["a", 'b "c"', 'd "e" $f \\n', "g h", "", "$HOME"]);
    expect(typeof splitCommandLine("a 'b")).toBe("string");
  });
});

describe("McpToolHost over stdio", () => {
  it("offers every call as <tool>__<call>, in the same order every turn", async () => {
    const d = scratch();
    const everything: ToolServer = { name: "everything", source: { type: "stdio", command: process.execPath, args: [EVERYTHING, "stdio"] } };
    const memory: ToolServer = {
      name: "memory",
      source: { type: "stdio", command: process.execPath, args: [SERVER_MEMORY], env: { MEMORY_FILE_PATH: join(d, "memory.jsonl") } },
    };
    const h = host();
    const first = await h.open([memory, everything]);
    const expected = [...EVERYTHING_CALLS.map((c) => `everything__${c}`), ...MEMORY_CALLS.map((c) => `memory__${c}`)];
    expect(names(first)).toEqual(expected);
    const echo = first.offered.find((c) => c.name === "everything__echo");
    expect(echo).toMatchObject({ tool: "everything", call: "echo", description: "Echoes back the input string" });
    expect(echo?.parameters).toMatchObject({ type: "object", properties: { message: { type: "string" } }, required: ["message"] });
    expect(echo?.parameters).not.toHaveProperty("$schema");
    await first.close();
    const second = await h.open([everything, memory]);
    expect(second.offered).toEqual(first.offered);
    await second.close();
  });

  it("answers a call as text, an isError result as an error, and a name not offered as no tool", async () => {
    const h = host();
    const box = await h.open([{ name: "everything", source: { type: "stdio", command: process.execPath, args: [EVERYTHING, "stdio"] } }]);
    expect(await box.call("everything__echo", { message: "hello" })).toEqual({ text: "Echo: hello", error: false });
    const image = await box.call("everything__get-tiny-image", {});
    expect(image.error).toBe(false);
    expect(image.text).toMatch(/^\[image image\/png, \d+ bytes\]$/m);
    const links = await box.call("everything__get-resource-links", { count: 1 });
    expect(links.text).toContain("[resource_link demo://resource/dynamic/");
    const bad = await box.call("everything__get-sum", { a: "one" });
    expect(bad.error).toBe(true);
    expect(bad.text).toContain("Invalid arguments");
    expect(await box.call("everything__no-such-call", {})).toEqual({ text: "there is no tool everything__no-such-call", error: true });
    expect(await box.call("nothing__echo", {})).toEqual({ text: "there is no tool nothing__echo", error: true });
    await box.close();
  });

  it("runs the calls of one round at once, on one session", async () => {
    const d = scratch();
    const starts = join(d, "starts");
    const h = host();
    const box = await h.open([counted("everything", starts, everythingProgram)]);
    expect(pids(starts)).toHaveLength(1); // the listing's session
    const long = { duration: 1.5, steps: 3 };
    // Two first calls at once start one session.
    const cold = await Promise.all([
      box.call("everything__trigger-long-running-operation", long),
      box.call("everything__echo", { message: "x" }),
    ]);
    expect(cold.map((a) => a.error)).toEqual([false, false]);
    expect(pids(starts)).toHaveLength(2);
    const warm = await Promise.all([
      box.call("everything__trigger-long-running-operation", long),
      box.call("everything__trigger-long-running-operation", long),
    ]);
    expect(warm.map((a) => a.error)).toEqual([false, false]);
    expect(warm[0]?.text).toContain("Long running operation completed");
    expect(pids(starts)).toHaveLength(2);
    await box.close();

    // Side by side, seen by the tool: each call of `meet` answers only once both are running.
    const probeStarts = join(d, "probe-starts");
    const probes = await h.open([counted("probe", probeStarts, [process.execPath, PROBE])]);
    const met = await Promise.all([probes.call("probe__meet", { count: 2 }), probes.call("probe__meet", { count: 2 })]);
    expect(met).toEqual([
      { text: "met 2", error: false },
      { text: "met 2", error: false },
    ]);
    // The listing's session and the one both calls ran on.
    expect(pids(probeStarts)).toHaveLength(2);
    await probes.close();
  });

  it("answers a server killed mid-call with an error, and starts it again for the next call and turn", async () => {
    const d = scratch();
    const starts = join(d, "starts");
    const h = host();
    const box = await h.open([counted("everything", starts, everythingProgram)]);
    expect((await box.call("everything__echo", { message: "up" })).error).toBe(false);
    const pid = pids(starts)[1] as number;
    const t0 = Date.now();
    const pending = box.call("everything__trigger-long-running-operation", { duration: 30, steps: 30 });
    // The request is written within this tick's microtasks; the kill comes after it.
    await new Promise((r) => setImmediate(r));
    process.kill(pid, "SIGKILL");
    const answer = await pending;
    expect(answer.error).toBe(true);
    expect(answer.text).toMatch(/Connection closed/);
    expect(Date.now() - t0).toBeLessThan(10_000);
    expect(await box.call("everything__echo", { message: "again" })).toEqual({ text: "Echo: again", error: false });
    expect(pids(starts)).toHaveLength(3);
    await box.close();
    const next = await h.open([counted("everything", starts, everythingProgram)]);
    expect(await next.call("everything__echo", { message: "next turn" })).toEqual({ text: "Echo: next turn", error: false });
    await next.close();
  });

  it("still offers a listed tool that fails to start, and answers it as unavailable", async () => {
    const d = scratch();
    const starts = join(d, "starts");
    const broken = join(d, "broken");
    const tool = counted("everything", starts, everythingProgram, broken);
    const h = host();
    const first = await h.open([tool]);
    await first.close();
    writeFileSync(broken, "");
    const second = await h.open([tool]);
    expect(names(second)).toEqual(names(first));
    const answer = await second.call("everything__echo", { message: "x" });
    expect(answer.error).toBe(true);
    expect(answer.text).toMatch(/^tool everything is unavailable: /);
    expect(answer.text).toContain("cannot start");
    // The rest of the turn doesn't wait for it to fail again.
    expect((await second.call("everything__get-env", {})).text).toBe(answer.text);
    await second.close();
    rmSync(broken);
    const third = await h.open([tool]);
    expect(await third.call("everything__echo", { message: "back" })).toEqual({ text: "Echo: back", error: false });
    await third.close();
  });

  it("keeps the lists of the tools used most lately, and lists one let go again when it is next opened", async () => {
    const d = scratch();
    const tools = ["a", "b", "c"].map((name) => counted(name, join(d, `starts-${name}`), [process.execPath, PROBE]));
    const starts = () => tools.map((t) => pids(join(d, `starts-${t.name}`)).length);
    const h = host({ listsKept: 2 });
    for (const t of tools) await (await h.open([t])).close();
    expect(starts()).toEqual([1, 1, 1]);
    // b and c are kept; a was let go, and is listed again, in the place of b (c, opened with it, stays).
    const again = await h.open([tools[2] as ToolServer, tools[0] as ToolServer]);
    expect(starts()).toEqual([2, 1, 1]);
    expect(names(again).filter((n) => n.endsWith("__cwd"))).toEqual(["a__cwd", "c__cwd"]);
    await again.close();
    await (await h.open([tools[1] as ToolServer])).close();
    expect(starts()).toEqual([2, 2, 1]);
    // b took the place of a (used before c, in the order the tools are offered): b and c are kept.
    await (await h.open([tools[1] as ToolServer, tools[2] as ToolServer])).close();
    expect(starts()).toEqual([2, 2, 1]);
  });

  it("leaves a never-listed tool that fails out of that turn only", async () => {
    const d = scratch();
    const broken = join(d, "broken");
    writeFileSync(broken, "");
    const flaky = counted("flaky", join(d, "starts"), everythingProgram, broken);
    const missing: ToolServer = { name: "missing", source: { type: "stdio", command: join(d, "no-such-command"), args: [] } };
    const h = host({ listTimeoutMs: 5_000 });
    const first = await h.open([flaky, missing]);
    expect(names(first)).toEqual([]);
    expect(saidOf("tool left out of this turn", "tool").sort()).toEqual(["flaky", "missing"]);
    expect(await first.call("flaky__echo", { message: "x" })).toEqual({ text: "there is no tool flaky__echo", error: true });
    await first.close();
    rmSync(broken);
    const second = await h.open([flaky, missing]);
    expect(names(second)).toEqual(EVERYTHING_CALLS.map((c) => `flaky__${c}`));
    await second.close();
  });

  it("offers a subagent only the tools and calls it was given", async () => {
    const d = scratch();
    const everything: ToolServer = { name: "everything", source: { type: "stdio", command: process.execPath, args: [EVERYTHING, "stdio"] } };
    const memory: ToolServer = {
      name: "memory",
      source: { type: "stdio", command: process.execPath, args: [SERVER_MEMORY], env: { MEMORY_FILE_PATH: join(d, "memory.jsonl") } },
    };
    const h = host();
    const narrow = await h.open([everything, memory], { allowed: ["everything__echo", "memory"] });
    expect(names(narrow)).toEqual(["everything__echo", ...MEMORY_CALLS.map((c) => `memory__${c}`)]);
    expect(await narrow.call("everything__get-env", {})).toEqual({ text: "there is no tool everything__get-env", error: true });
    expect((await narrow.call("everything__echo", { message: "ok" })).text).toBe("Echo: ok");
    await narrow.close();
    const onlyEverything = await h.open([everything, memory], { allowed: ["everything"] });
    expect(names(onlyEverything)).toEqual(EVERYTHING_CALLS.map((c) => `everything__${c}`));
    expect((await onlyEverything.call("memory__read_graph", {})).text).toBe("there is no tool memory__read_graph");
    await onlyEverything.close();
  });

  it("keeps memory's one session across turns, while each turn's other sessions end with it", async () => {
    const d = scratch();
    const memStarts = join(d, "memory-starts");
    const evStarts = join(d, "everything-starts");
    const tools = [
      counted("memory", memStarts, memoryProgram, undefined, { MEMORY_FILE_PATH: join(d, "memory.jsonl") }),
      counted("everything", evStarts, everythingProgram),
    ];
    const h = host();
    const one = await h.open(tools);
    const entity = { entities: [{ name: "Ada", entityType: "person", observations: ["likes tea"] }] };
    expect((await one.call("memory__create_entities", entity)).error).toBe(false);
    expect((await one.call("everything__echo", { message: "1" })).error).toBe(false);
    const turnPid = pids(evStarts).at(-1) as number;
    expect(alive(turnPid)).toBe(true);
    await one.close();
    expect(alive(turnPid)).toBe(false);

    // Two turns at once: memory's session is the same one, each turn has its own everything.
    const [two, three] = await Promise.all([h.open(tools), h.open(tools)]);
    const answers = await Promise.all([
      two.call("memory__open_nodes", { names: ["Ada"] }),
      three.call("memory__search_nodes", { query: "tea" }),
      two.call("everything__echo", { message: "2" }),
      three.call("everything__echo", { message: "3" }),
    ]);
    expect(answers.map((a) => a.error)).toEqual([false, false, false, false]);
    expect(answers[0]?.text).toContain("likes tea");
    expect(answers[1]?.text).toContain("Ada");
    const memPids = pids(memStarts);
    expect(memPids).toHaveLength(1);
    const turnPids = pids(evStarts).slice(-2);
    expect(pids(evStarts)).toHaveLength(4); // the listing, turn one, and one each for two and three
    expect(new Set(turnPids).size).toBe(2);
    await Promise.all([two.close(), three.close()]);
    expect(turnPids.some(alive)).toBe(false);
    expect(alive(memPids[0] as number)).toBe(true);
    await h.close();
    expect(alive(memPids[0] as number)).toBe(false);
  });

  it("ends memory's session after its idle time and after its age, and starts it again when called", async () => {
    const d = scratch();
    const starts = join(d, "starts");
    const memory = counted("memory", starts, memoryProgram, undefined, { MEMORY_FILE_PATH: join(d, "memory.jsonl") });

    const idle = host({ memoryIdleMs: 300 });
    const box = await idle.open([memory]);
    expect((await box.call("memory__read_graph", {})).error).toBe(false);
    await box.close();
    const idlePids = pids(starts);
    await until(() => !idlePids.some(alive));
    const again = await idle.open([memory]);
    expect((await again.call("memory__read_graph", {})).error).toBe(false);
    expect(pids(starts).length).toBeGreaterThan(idlePids.length);
    await again.close();

    const aged = host({ memoryIdleMs: 60_000, memoryMaxAgeMs: 300 });
    const turn = await aged.open([memory]);
    const before = pids(starts);
    await until(() => !before.some(alive));
    // The same turn goes on: its next call starts memory again.
    expect((await turn.call("memory__read_graph", {})).error).toBe(false);
    const after = pids(starts);
    expect(after.length).toBe(before.length + 1);
    expect(alive(after.at(-1) as number)).toBe(true);
    await turn.close();
  });

  it("cancels a call when its signal aborts, and keeps the session", async () => {
    const d = scratch();
    const starts = join(d, "starts");
    const h = host();
    const box = await h.open([counted("everything", starts, everythingProgram)]);
    expect((await box.call("everything__echo", { message: "up" })).error).toBe(false);
    const stop = new AbortController();
    const t0 = Date.now();
    const pending = box.call("everything__trigger-long-running-operation", { duration: 30, steps: 30 }, stop.signal);
    stop.abort();
    const answer = await pending;
    expect(answer.error).toBe(true);
    expect(answer.text).toMatch(/cancelled/);
    expect(Date.now() - t0).toBeLessThan(5_000);
    expect((await box.call("everything__echo", { message: "still" })).text).toBe("Echo: still");
    expect(pids(starts)).toHaveLength(2);
    await box.close();
  });

  it("ends every session and child when the host closes", async () => {
    const d = scratch();
    const evStarts = join(d, "everything-starts");
    const memStarts = join(d, "memory-starts");
    const h = host();
    const box = await h.open([
      counted("everything", evStarts, everythingProgram),
      counted("memory", memStarts, memoryProgram, undefined, { MEMORY_FILE_PATH: join(d, "memory.jsonl") }),
    ]);
    const pending = box.call("everything__trigger-long-running-operation", { duration: 30, steps: 30 });
    expect((await box.call("memory__read_graph", {})).error).toBe(false);
    await h.close();
    expect((await pending).error).toBe(true);
    expect([...pids(evStarts), ...pids(memStarts)].some(alive)).toBe(false);
    expect((await box.call("everything__echo", { message: "late" })).error).toBe(true);
    await expect(h.open([])).rejects.toThrow(/closed/);
  });

  it("serves memory from the conversations' transcripts (the test stand-in for Link Memory)", async () => {
    const agent = scratch();
    mkdirSync(join(agent, "chats", "alice"), { recursive: true });
    mkdirSync(join(agent, "chats", "telegram-42"), { recursive: true });
    writeFileSync(join(agent, "chats", "alice", "transcript.md"), "**Alice**: My cat is called Miso.\n**Agent**: Noted.\n");
    writeFileSync(join(agent, "chats", "telegram-42", "transcript.md"), "**Bob**: the CAT food is in the cupboard\n");
    const memory: ToolServer = {
      name: "memory",
      source: { type: "stdio", command: process.execPath, args: ["--import", "tsx", MEMORY_STAND_IN, agent], env: {} },
    };
    const h = host();
    const box = await h.open([memory]);
    expect(names(box)).toEqual(["memory__links", "memory__list", "memory__read", "memory__search"]);
    expect((await box.call("memory__search", { query: "cat" })).text).toBe(
      "alice: **Alice**: My cat is called Miso.\ntelegram-42: **Bob**: the CAT food is in the cupboard",
    );
    expect((await box.call("memory__search", { query: "miso CAT" })).text).toBe("alice: **Alice**: My cat is called Miso.");
    expect((await box.call("memory__list", {})).text).toBe("alice\ntelegram-42");
    expect((await box.call("memory__read", { path: "telegram-42" })).text).toContain("cupboard");
    expect((await box.call("memory__read", { path: "../alice" })).error).toBe(true);
    expect((await box.call("memory__links", {})).text).toBe("[]");
    await box.close();
  });
});

describe("McpToolHost over Streamable HTTP", () => {
  let server: HttpServer;

  beforeAll(async () => {
    server = await startHttp();
  });
  afterAll(async () => {
    await server.stop();
  });

  it("offers the same calls as over stdio, answers calls made together, and ends the turn's session", async () => {
    const tool: ToolServer = { name: "everything", source: { type: "http", url: server.url } };
    const h = host();
    const first = await h.open([tool]);
    expect(names(first)).toEqual(EVERYTHING_CALLS.map((c) => `everything__${c}`));
    await first.close();
    const box = await h.open([tool]);
    expect(box.offered).toEqual(first.offered);
    const answers = await Promise.all([
      box.call("everything__trigger-long-running-operation", { duration: 1, steps: 2 }),
      box.call("everything__trigger-long-running-operation", { duration: 1, steps: 2 }),
      box.call("everything__echo", { message: "over http" }),
    ]);
    expect(answers.map((a) => a.error)).toEqual([false, false, false]);
    expect(answers[2]?.text).toBe("Echo: over http");
    const terminations = (): number => (server.stdout().match(/Received session termination request/g) ?? []).length;
    const before = terminations();
    await box.close();
    expect(terminations()).toBe(before + 1);
  });

  it("answers a listed server that is gone as unavailable, and leaves out one never listed", async () => {
    const own = await startHttp();
    const tool: ToolServer = { name: "everything", source: { type: "http", url: own.url } };
    const h = host({ startTimeoutMs: 5_000 });
    const first = await h.open([tool]);
    expect(names(first)).toHaveLength(EVERYTHING_CALLS.length);
    await first.close();
    await own.stop();
    const port = await freePort();
    const nobody: ToolServer = { name: "nobody", source: { type: "http", url: `http://127.0.0.1:${port}/mcp` } };
    const box = await h.open([tool, nobody]);
    expect(box.offered).toEqual(first.offered);
    expect(saidOf("tool left out of this turn", "tool")).toEqual(["nobody"]);
    const answer = await box.call("everything__echo", { message: "x" });
    expect(answer.error).toBe(true);
    expect(answer.text).toMatch(/^tool everything is unavailable: /);
    await box.close();
  });
});

interface HttpServer {
  url: string;
  stdout(): string;
  stop(): Promise<void>;
}

/** server-everything over Streamable HTTP on a free port, once it listens. */
async function startHttp(): Promise<HttpServer> {
  const port = await freePort();
  const child = spawn(process.execPath, [EVERYTHING, "streamableHttp"], {
    env: { ...process.env, PORT: String(port) },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const exited = new Promise<void>((r) => child.once("exit", () => r()));
  let out = "";
  child.stdout.setEncoding("utf8").on("data", (s: string) => (out += s));
  const stop = async (): Promise<void> => {
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
    await exited;
  };
  try {
    await new Promise<void>((resolve, reject) => {
      let err = "";
      const timer = setTimeout(() => reject(new Error(`not listening after 15 s: ${err}`)), 15_000);
      child.stderr.setEncoding("utf8").on("data", (s: string) => {
        err += s;
        if (/listening on port/.test(err)) {
          clearTimeout(timer);
          resolve();
        }
      });
      void exited.then(() => reject(new Error(`exited: ${err}`)));
    });
  } catch (e) {
    await stop();
    throw e;
  }
  return { url: `http://127.0.0.1:${port}/mcp`, stdout: () => out, stop };
}

