// What a conversation cost and what the cache held, over the built daemon and its `usage` command,
// with the scripted model, which reports as cached the tokens of the longest start a request shares
// with the last ones (a provider's prompt cache), so every share here is real.
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as acp from "@agentclientprotocol/sdk";
import type { PromptResponse, SessionNotification, SessionUpdate } from "@agentclientprotocol/sdk";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { AgentUsage, type AssistantMessage } from "../protocol/index.js";
import { paths, readEventsFrom } from "../store/index.js";
import { configure, daemonTestHooks, scriptedSettings, startDaemon, stdioClient, tempDir, watched, type Client, type Daemon } from "./acp-client.js";
import { BIN, MAIN, ROOT } from "./fixtures/built.js";
import type { ModelServer } from "./model-server.js";

const EVERYTHING = `"${process.execPath}" "${ROOT}node_modules/@modelcontextprotocol/server-everything/dist/index.js" stdio`;

let server: ModelServer;
const cleanup = daemonTestHooks([BIN, "dist/daemon/usage.js", "dist/turn/usage.js", "dist/acp/updates.js"], (s) => (server = s));

function agent(extra: Record<string, unknown> = {}): string {
  const dir = tempDir();
  cleanup.push(() => dir.remove());
  configure(dir.path, scriptedSettings(server.url, extra));
  return dir.path;
}

function daemon(dir: string, env: NodeJS.ProcessEnv = {}): Daemon {
  return watched(startDaemon(["--agent", dir], env), cleanup);
}

type Usage = { inputTokens: number; outputTokens: number; cachedReadTokens?: number | null; totalTokens: number };

/** Sessions work outside any repository, so the prompt has no repository section. */
const tmpCwd = tmpdir();

async function session(c: Client): Promise<string> {
  return (await c.agent.request(acp.methods.agent.session.new, { cwd: tmpCwd, mcpServers: [] })).sessionId;
}

async function prompt(c: Client, sessionId: string, text: string): Promise<PromptResponse & { usage?: Usage }> {
  return c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text }] });
}

/** `usage` as a person runs it. */
function usage(args: string[]): { code: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [MAIN, "usage", ...args], { encoding: "utf8", timeout: 30_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

function usageJson(dir: string, thread?: string): AgentUsage {
  const r = usage(["--agent", dir, ...(thread ? [thread] : []), "--json"]);
  expect(r.code, r.stderr).toBe(0);
  return AgentUsage.parse(JSON.parse(r.stdout));
}

function answers(dir: string, thread: string): AssistantMessage[] {
  return readEventsFrom(paths({ dir }).conversation(thread), 1)
    .map((e) => e.event)
    .filter((e): e is AssistantMessage => e.kind === "message" && e.role === "assistant");
}

const usageUpdates = (updates: readonly SessionNotification[]) =>
  updates.map((u) => u.update).filter((u): u is Extract<SessionUpdate, { sessionUpdate: "usage_update" }> => u.sessionUpdate === "usage_update");

/** The `usage` figures' totals are the sums of the answer events' own counts. */
function expectSums(figures: AgentUsage["total"], events: readonly AssistantMessage[]): void {
  const sum = (f: (a: AssistantMessage) => number) => events.reduce((s, a) => s + f(a), 0);
  expect(figures.requests).toBe(events.length);
  expect(figures.tokens).toEqual({ in: sum((a) => a.usage?.in ?? 0), out: sum((a) => a.usage?.out ?? 0), cached: sum((a) => a.usage?.cached ?? 0) });
  expect(figures.model_ms).toBe(sum((a) => a.latency_ms));
}

const warnings = (d: Daemon) =>
  d
    .stderr()
    .split("\n")
    .filter((l) => l.includes('"cause":"section"'))
    .map((l) => z.object({ level: z.string(), thread: z.string(), section: z.string() }).loose().parse(JSON.parse(l)));

describe("usage and the cache", { timeout: 120_000 }, () => {
  it("20 plain turns: the cached share rises toward the whole prompt; a usage_update follows each request; usage's totals are the events' sums", async () => {
    const dir = agent();
    const d = daemon(dir);
    const c = await stdioClient(d, cleanup);
    const id = await session(c);
    const shares: number[] = [];
    const responses: Usage[] = [];
    for (let i = 1; i <= 20; i++) {
      const res = await prompt(c, id, `plain turn number ${i}`);
      expect(res.usage).toBeDefined();
      responses.push(res.usage as Usage);
      shares.push((res.usage?.cachedReadTokens ?? 0) / (res.usage?.inputTokens ?? 1));
    }
    // Nothing cached at first; then each request finds the one before it cached, almost whole.
    expect(shares[0]).toBe(0);
    for (let i = 1; i < 20; i++) {
      expect(shares[i], `turn ${i + 1}`).toBeGreaterThan(shares[i - 1] ?? 0);
      expect(responses[i]?.cachedReadTokens, `turn ${i + 1}`).toBeGreaterThanOrEqual((responses[i - 1]?.inputTokens ?? 0) - 1);
    }
    expect(shares[19]).toBeGreaterThan(0.9);

    // One usage_update a request: the tokens the window holds now, of the model's window; no cost reported, none sent.
    const events = answers(dir, id);
    const updates = usageUpdates(c.updates);
    expect(updates).toHaveLength(20);
    updates.forEach((u, i) => {
      const a = events[i];
      expect(u.used).toBe((a?.usage?.in ?? 0) + (a?.usage?.out ?? 0));
      expect(u.size).toBe(32_768);
      expect(u.cost ?? undefined).toBeUndefined();
      expect(u._meta).toEqual({ link: { tokens: a?.usage } });
    });
    // Each answer keeps what its prompt began with: its sections' fingerprints and the window's start.
    expect(Object.keys(events[0]?.prompt?.sections ?? {})).toEqual(["base", "environment"]);
    expect(new Set(events.map((a) => JSON.stringify(a.prompt))).size).toBe(1);

    const u = usageJson(dir, id);
    expect(u.conversations).toHaveLength(1);
    expectSums(u.total, events);
    expect(u.total).toMatchObject({ turns: 20, requests: 20, turns_without_cost: 20, requests_without_cost: 20, falls: [] });
    expect(u.total).not.toHaveProperty("cost");
    expect(u.total.cached_share).toBeCloseTo(u.total.tokens.cached / u.total.tokens.in, 10);
    expect(u.total.slowest).toHaveLength(5);
    expect(u.conversations[0]).toMatchObject({ ...u.total, thread: id });

    // The table, for people.
    const table = usage(["--agent", dir]);
    expect(table.code, table.stderr).toBe(0);
    expect(table.stdout).toMatch(new RegExp(`^conversation +turns +requests +in +out +cached +cached share +cost +model time\\n${id} +20 +20 `));
    expect(table.stdout).toContain(`${(u.total.cached_share! * 100).toFixed(1)}%`);
    expect(table.stdout).toContain("cost: the provider reported none (never estimated)");
    expect(table.stdout).toContain("Slowest turns");
    expect(table.stdout).toContain("The cached share fell in no turn.");
    expect(warnings(d)).toEqual([]);

    // What a count got to is kept beside the events: the next counts on from it, to the same figures as a count from the first event.
    const kept = paths({ dir }).conversation(id).usage;
    expect(existsSync(kept)).toBe(true);
    for (let i = 21; i <= 23; i++) await prompt(c, id, `plain turn number ${i}`);
    const on = usageJson(dir, id);
    rmSync(kept);
    expect(usageJson(dir, id)).toEqual(on);
    expect(on.total).toMatchObject({ turns: 23, requests: 23, falls: [] });
    expectSums(on.total, answers(dir, id));
  });

  it("an edit of instruction.md between turns: the share falls, for the standing section; logged once per conversation and section", async () => {
    const dir = agent();
    const standing = join(dir, "instructions", "instruction.md");
    mkdirSync(join(dir, "instructions"), { recursive: true });
    writeFileSync(standing, "Answer in English.\n");
    const d = daemon(dir);
    const c = await stdioClient(d, cleanup);
    const id = await session(c);
    for (let i = 1; i <= 4; i++) await prompt(c, id, `before the edit, turn ${i}`);
    writeFileSync(standing, "Answer in English, briefly.\n");
    await prompt(c, id, "after the first edit");
    await prompt(c, id, "and once more");
    writeFileSync(standing, "Answer in English, briefly and kindly.\n");
    await prompt(c, id, "after the second edit");
    await d.stop();

    const events = answers(dir, id);
    const u = usageJson(dir, id);
    expectSums(u.total, events);
    const questions = readEventsFrom(paths({ dir }).conversation(id), 1).filter((e) => e.event.kind === "message" && e.event.role === "user");
    expect(u.total.falls.map((f) => ({ turn: f.turn, cause: f.cause, sections: f.sections }))).toEqual([
      { turn: questions[4]?.n, cause: "section", sections: ["standing"] },
      { turn: questions[6]?.n, cause: "section", sections: ["standing"] },
    ]);
    for (const f of u.total.falls) expect(f.share).toBeLessThan(f.previous);
    const table = usage(["--agent", dir, id]);
    expect(table.stdout).toContain("Turns whose cached share fell:");
    expect(table.stdout).toContain("the standing section changed");
    // One JSON line on stderr, naming the section: the second edit is the same cause, not logged again.
    expect(warnings(d)).toMatchObject([{ level: "warn", thread: id, section: "standing" }]);
  });

  it("a window that drops: the share falls, for the window, and nothing is logged", async () => {
    const dir = agent({ window: { max: 700, answer: 64, margin: 16 } });
    const d = daemon(dir);
    const c = await stdioClient(d, cleanup);
    const id = await session(c);
    const padding = "a message long enough that a few of them fill the window of this agent. ".repeat(3);
    for (let i = 1; i <= 12; i++) await prompt(c, id, `turn ${i}: ${padding}`);
    const events = answers(dir, id);
    const starts = new Set(events.map((a) => a.prompt?.window));
    expect(starts.size).toBeGreaterThan(1);

    const u = usageJson(dir, id);
    expectSums(u.total, events);
    expect(u.total.falls.length).toBeGreaterThan(0);
    expect(u.total.falls.every((f) => f.cause === "window")).toBe(true);
    // Each fall is where the window's start moved.
    const questions = readEventsFrom(paths({ dir }).conversation(id), 1).filter((e) => e.event.kind === "message" && e.event.role === "user");
    for (const f of u.total.falls) {
      const i = questions.findIndex((q) => q.n === f.turn);
      expect(events[i]?.prompt?.window).not.toBe(events[i - 1]?.prompt?.window);
    }
    expect(usage(["--agent", dir, id]).stdout).toContain("the window dropped");
    expect(warnings(d)).toEqual([]);
  });

  it("the cost: summed where the provider reports it, absent where it reports none, and the turns without one counted", async () => {
    const dir = agent();
    const d = daemon(dir);
    const c = await stdioClient(d, cleanup);
    const paid = await session(c);
    server.script({ text: "one", usage: { cost: 0.25 } }, { text: "two", usage: { cost: 0.5 } }, { text: "three" });
    for (const text of ["a", "b", "c"]) await prompt(c, paid, text);
    const free = await session(c);
    await prompt(c, free, "nothing reported");

    // Each update carries the conversation's cost so far, once the provider reports one.
    const costs = usageUpdates(c.updates).map((u) => u.cost ?? undefined);
    expect(costs).toEqual([{ amount: 0.25, currency: "USD" }, { amount: 0.75, currency: "USD" }, undefined, undefined]);

    const u = usageJson(dir);
    const byThread = new Map(u.conversations.map((x) => [x.thread, x]));
    expect(byThread.get(paid)).toMatchObject({ cost: 0.75, turns: 3, turns_without_cost: 1, requests_without_cost: 1 });
    expect(byThread.get(free)).not.toHaveProperty("cost");
    expect(byThread.get(free)).toMatchObject({ turns: 1, turns_without_cost: 1 });
    expect(u.total).toMatchObject({ cost: 0.75, turns: 4, turns_without_cost: 2 });
    expectSums(u.total, [...answers(dir, paid), ...answers(dir, free)]);
    const table = usage(["--agent", dir]);
    expect(table.stdout).toMatch(/^total +4 +4 .* 0\.75\* /m);
    expect(table.stdout).toContain("* 2 of 4 turns had a request without a reported cost");
    // One conversation alone; and --since, only what came after.
    expect(usageJson(dir, paid).total.requests).toBe(3);
    const later = usage(["--agent", dir, paid, "--since", "2999-01-01", "--json"]);
    expect(AgentUsage.parse(JSON.parse(later.stdout)).total).toMatchObject({ turns: 0, requests: 0, cached_share: null });
  });

  it("a turn with tool rounds: the prompt response's usage is the sum of its requests', and a usage_update follows each", async () => {
    const dir = agent();
    const d = daemon(dir, { LNK_TOOL_EVERYTHING: EVERYTHING });
    const c = await stdioClient(d, cleanup);
    const id = await session(c);
    server.script(
      { tool_calls: [{ name: "everything__echo", arguments: { message: "one" } }] },
      { tool_calls: [{ name: "everything__echo", arguments: { message: "two" } }] },
      { text: "Both echoed." },
    );
    const res = await prompt(c, id, "echo twice");
    const events = answers(dir, id);
    expect(events).toHaveLength(3);
    const sum = (f: (a: AssistantMessage) => number) => events.reduce((s, a) => s + f(a), 0);
    expect(res.usage).toEqual({
      inputTokens: sum((a) => a.usage?.in ?? 0),
      outputTokens: sum((a) => a.usage?.out ?? 0),
      cachedReadTokens: sum((a) => a.usage?.cached ?? 0),
      totalTokens: sum((a) => (a.usage?.in ?? 0) + (a.usage?.out ?? 0)),
    });
    // Each round found the one before it cached.
    expect(events[2]?.usage?.cached).toBeGreaterThanOrEqual((events[1]?.usage?.in ?? 0) - 1);
    expect(usageUpdates(c.updates).map((u) => u.used)).toEqual(events.map((a) => (a.usage?.in ?? 0) + (a.usage?.out ?? 0)));
    // The tools' section and the calls offered are in the fingerprints.
    expect(events[0]?.prompt?.sections.tools).toMatch(/^[0-9a-f]{12}$/);
    const u = usageJson(dir, id);
    expect(u.total).toMatchObject({ turns: 1, requests: 3, falls: [] });
    expect(u.total.slowest[0]).toMatchObject({ turn: 1, requests: 3, model_ms: sum((a) => a.latency_ms) });
  });
});

describe("usage, bad input", { timeout: 60_000 }, () => {
  it("one line on stderr, exit 2: a bad date, a bad thread name, a conversation that isn't there, options of another command", () => {
    const dir = agent();
    for (const [args, said] of [
      [["--agent", dir, "--since", "yesterday"], /--since "yesterday": not a date/],
      [["--agent", dir, "--since", "2026-13-45"], /not a date/],
      [["--agent", dir, "--since", "2026-02-30"], /not a date/],
      [["--agent", dir, "--since", "2026-04-31T10:00Z"], /not a date/],
      [["--agent", dir, "../escape"], /invalid thread name/],
      [["--agent", dir, "nobody"], /no conversation "nobody"/],
      [["--agent", dir, "a", "b"], /at most one THREAD/],
      [["--agent", dir, "--socket", "/tmp/x"], /usage takes no --socket/],
    ] as const) {
      const r = usage([...args]);
      expect(r.code, r.stderr).toBe(2);
      expect(r.stderr).toMatch(/^lnk-link-harness: [^\n]+\n$/);
      expect(r.stderr).toMatch(said);
      expect(r.stdout).toBe("");
    }
  });
});

describe("usage over a folder changed by hand", () => {
  const event = (i: number, role: "user" | "assistant") =>
    `${JSON.stringify(
      role === "user"
        ? { v: 1, time: `2026-01-02T03:04:${String(i).padStart(2, "0")}.000Z`, kind: "message", role, text: `q${i}`, header: "[h]" }
        : { v: 1, time: `2026-01-02T03:04:${String(i).padStart(2, "0")}.000Z`, kind: "message", role, text: `a${i}`, model: "m", provider: "p", usage: { in: 10, out: 2, cached: 0 }, latency_ms: 5, stop: "end_turn" },
    )}\n`;
  function chat(dir: string, thread: string, turns: number): string {
    const folder = join(dir, "chats", thread);
    mkdirSync(folder, { recursive: true });
    for (let i = 1; i <= turns * 2; i++) writeFileSync(join(folder, `${String(i).padStart(12, "0")}.json`), event(i, i % 2 === 1 ? "user" : "assistant"));
    return folder;
  }

  it("a folder of chats/ whose name is no thread's is named and passed over; the rest is counted", () => {
    const dir = agent();
    chat(dir, "t1", 2);
    mkdirSync(join(dir, "chats", "t1..old"));
    const r = usage(["--agent", dir, "--json"]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toBe("lnk-link-harness: left out: chats/t1..old: not a thread's name\n");
    expect(AgentUsage.parse(JSON.parse(r.stdout)).total).toMatchObject({ turns: 2, requests: 2 });
  });

  it("events that skip a number: counted up to it, and said so", () => {
    const dir = agent();
    const folder = chat(dir, "t1", 3);
    rmSync(join(folder, "000000000003.json"));
    const r = usage(["--agent", dir, "--json"]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toBe("lnk-link-harness: left out of t1: its events after number 3, which is missing\n");
    expect(AgentUsage.parse(JSON.parse(r.stdout)).total).toMatchObject({ turns: 1, requests: 1 });
  });

  it("a time that would act on a terminal is no event's: the file is read whole, and named as no JSON, on one line", () => {
    const dir = agent();
    const folder = chat(dir, "t1", 1);
    writeFileSync(join(folder, "000000000003.json"), '{"v":1,"time":"\u001b]0;owned\u0007\u001b[2J","kind":"message","role":"user"}\n');
    const r = usage(["--agent", dir]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^lnk-link-harness: [^\n]*000000000003\.json is not JSON[^\n]*\n$/);
    for (const c of ["\u0007", "\u001b"]) expect(r.stdout + r.stderr).not.toContain(c);
    // An answer with a key of that name, escaped in the JSON: its schema names it, and the line shows it escaped.
    writeFileSync(join(folder, "000000000003.json"), `${JSON.stringify({ ...JSON.parse(event(3, "assistant")), "\u001b]0;owned\u0007": 1 })}\n`);
    const keyed = usage(["--agent", dir]);
    expect(keyed.code).toBe(1);
    expect(keyed.stderr).toMatch(/^lnk-link-harness: [^\n]*000000000003\.json fails its schema[^\n]*\\u\{1b\}\]0;owned[^\n]*\n$/);
    for (const c of ["\u0007", "\u001b"]) expect(keyed.stderr).not.toContain(c);
  });

  it("a usage.json that claims more than its events could hold is counted again from the first event", () => {
    const dir = agent();
    const folder = chat(dir, "t1", 2);
    const first = usage(["--agent", dir, "--json"]);
    expect(first.code, first.stderr).toBe(0);
    const truth = AgentUsage.parse(JSON.parse(first.stdout)).total;
    const kept = z.object({ count: z.record(z.string(), z.unknown()) }).loose().parse(JSON.parse(readFileSync(join(folder, "usage.json"), "utf8")));
    writeFileSync(join(folder, "usage.json"), JSON.stringify({ ...kept, count: { ...kept.count, requests: 5_000_000, cost: 123456.78 } }));
    const again = usage(["--agent", dir, "--json"]);
    expect(again.code, again.stderr).toBe(0);
    expect(AgentUsage.parse(JSON.parse(again.stdout)).total).toEqual(truth);
  });

  it("a conversation's folder gone when its count is kept: not made again for it", async () => {
    const { writeUsageMark } = await import("../store/index.js");
    const dir = agent();
    const conv = paths({ dir }).conversation("gone");
    mkdirSync(join(dir, "chats"), { recursive: true });
    expect(() => writeUsageMark(conv, { v: 1, through: 1, time: "2026-01-02T03:04:05.000Z", count: { turns: 0, requests: 0, tokens: { in: 0, out: 0, cached: 0 }, turns_without_cost: 0, requests_without_cost: 0, model_ms: 0, slowest: [], falls: [] } as never })).toThrow();
    expect(existsSync(conv.dir)).toBe(false);
  });
});

describe("figures as a person reads them", () => {
  it("three figures, rounded before the unit is chosen", async () => {
    const { human } = await import("../daemon/usage.js");
    expect([999, 1_000, 9_999, 12_345, 99_999, 999_499, 999_999, 4_560_000, 999_999_999, 12_300_000_000].map(human)).toEqual([
      "999",
      "1.00k",
      "10.0k",
      "12.3k",
      "100k",
      "999k",
      "1.00M",
      "4.56M",
      "1.00G",
      "12.3G",
    ]);
  });
});
