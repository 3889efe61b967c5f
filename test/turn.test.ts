// The turn against the scripted model server: the prompt's bytes, the window, thinking, failures.
import { cpSync, mkdtempSync, rmSync, writeFileSync, mkdirSync, readdirSync, readFileSync, statSync } from "node:fs";
import { createRequire, syncBuiltinESMExports } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { Event, type Settings } from "../protocol/index.js";
import { appendEvent, eventName, paths, readEventsFrom, readMark, readStats, sparesKept, writeMark, writeSettings, type AgentRef } from "../store/index.js";
import { History, keptHistoryChars } from "../turn/history.js";
import { eventTokens, roughTokens } from "../turn/window.js";
import { forgetProcessState, runTurn, turnsSettled } from "../turn/turn.js";
import { CLIENTS_KEPT, clientsKept } from "../turn/model.js";
import type { TurnEvent } from "../turn/types.js";
import { assertBuilt, ROOT } from "./fixtures/built.js";
import { Child } from "./fixtures/child.js";
import { McpToolHost } from "../daemon/tools/host.js";
import { startModelServer, type ModelServer, type RecordedRequest } from "./model-server.js";

const EVERYTHING = join(process.cwd(), "node_modules/@modelcontextprotocol/server-everything/dist/index.js");
let server: ModelServer;
const dirs: string[] = [];

beforeAll(async () => {
  server = await startModelServer();
});
afterAll(async () => {
  await server.close();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});
afterEach(() => {
  server.requests.length = 0;
});

function agentWith(settings: Partial<Settings> = {}): AgentRef {
  const dir = mkdtempSync(join(tmpdir(), "lh-turn-"));
  dirs.push(dir);
  const agent = { dir };
  writeSettings(agent, { model: { provider: "test", name: "scripted-1", base_url: server.url }, ...settings });
  return agent;
}

async function turn(agent: AgentRef, thread: string, text: string) {
  const seen: TurnEvent[] = [];
  const outcome = await runTurn({ agent, thread, message: { text } }, (e) => seen.push(e));
  return { outcome, seen };
}

function chats(r: RecordedRequest): { role: string; content?: unknown }[] {
  return (r.body as { messages: { role: string; content?: unknown }[] }).messages;
}

describe("the prompt stays byte-stable", () => {
  it("over 50 turns each request starts with the previous one until a drop, whose start is a turn", async () => {
    // A small window so the conversation crosses drop points: each turn is ~60 tokens.
    const agent = agentWith({ window: { max: 2_000, answer: 200, margin: 100 } });
    server.fallback = (req) => ({ text: `answer ${chats(req).length} ${"lorem ipsum ".repeat(10)}` });
    const requests: RecordedRequest[] = [];
    for (let i = 0; i < 50; i++) {
      await turn(agent, "stable", `question ${i} ${"dolor sit amet ".repeat(8)}`);
      requests.push(server.requests.at(-1)!);
    }
    let drops = 0;
    const system = JSON.stringify(chats(requests[0]!)[0]);
    for (let i = 1; i < requests.length; i++) {
      const before = chats(requests[i - 1]!);
      const now = chats(requests[i]!);
      expect(JSON.stringify(now[0])).toBe(system);
      const prefix = JSON.stringify(now.slice(0, before.length));
      if (prefix === JSON.stringify(before)) continue;
      drops++;
      // A drop: the window now starts with a user message that the previous request also held.
      expect(now[1]!.role).toBe("user");
      const start = JSON.stringify(now[1]);
      const at = before.findIndex((m) => JSON.stringify(m) === start);
      expect(at).toBeGreaterThan(1);
      // About half the window went: what stays of the previous request is a contiguous tail of it.
      expect(JSON.stringify(now.slice(1, 1 + before.length - at))).toBe(JSON.stringify(before.slice(at)));
      const dropped = before.slice(1, at).reduce((s, m) => s + JSON.stringify(m).length, 0);
      const kept = before.slice(at).reduce((s, m) => s + JSON.stringify(m).length, 0);
      expect(dropped / (dropped + kept)).toBeGreaterThan(0.3);
      expect(dropped / (dropped + kept)).toBeLessThan(0.75);
    }
    expect(drops).toBeGreaterThanOrEqual(2);
    // Many turns between drops: the cache holds for most requests.
    expect(drops).toBeLessThan(15);
  });

  it("heads each user message with its time, channel and speaker, kept so it reads the same later", async () => {
    const agent = agentWith();
    server.fallback = () => ({ text: "ok" });
    await runTurn({ agent, thread: "head", message: { text: "hi", channel: "telegram", from: { id: "u1", name: "Ann", owner: true }, time: new Date("2026-01-02T03:04:05Z") } }, () => {});
    await turn(agent, "head", "again");
    const first = chats(server.requests[0]!);
    const second = chats(server.requests[1]!);
    expect(first[1]!.content).toBe("[2026-01-02 03:04 UTC · telegram · Ann (your owner)]\nhi");
    expect(second[1]).toEqual(first[1]);
    expect(first[0]).toEqual(second[0]);
  });
});

describe("what a process keeps between turns", () => {
  it("sends what a fresh process would, while other writers add turns and models between its own", async () => {
    assertBuilt(["dist/test/fixtures/turn-worker.js", "dist/turn/turn.js"], ["turn", "store", "protocol", "test/fixtures/turn-worker.ts"]);
    // A small window for long turns, so the conversation crosses a drop point every few turns: the
    // count this process keeps must find the same starts as one made from disk.
    const settings = { window: { max: 2_000, answer: 200, margin: 100 } };
    const warm = agentWith(settings);
    const conv = paths(warm).conversation("kept");
    server.fallback = (req) => ({ text: `answer ${chats(req).length} ${"lorem ipsum ".repeat(20)}` });
    const time = new Date().toISOString();
    let compared = 0;
    let drops = 0;
    for (let i = 0; i < 30; i++) {
      // Now and then another process takes a turn (its events, no new mark), or sets the model.
      if (i % 5 === 2) {
        await appendEvent(conv, { v: 1, kind: "message", role: "user", time, text: `elsewhere ${i}`, header: `[elsewhere ${i}]` });
        await appendEvent(conv, { v: 1, kind: "message", role: "assistant", time, text: `answered elsewhere ${i}`, model: "m", provider: "p", latency_ms: 1, stop: "end_turn" });
      }
      if (i % 7 === 3) await appendEvent(conv, { v: 1, kind: "command", name: "/model:set", model: `scripted-${i}`, time });
      const message = { text: `question ${i} ${"dolor sit amet ".repeat(20)}`, time: new Date() };
      // Every third turn is also taken by a new process, on a copy of the folder as it was before the
      // turn: both must send the same request.
      const copy = i % 3 === 1 ? agentWith(settings) : undefined;
      if (copy) cpSync(join(warm.dir, "chats"), join(copy.dir, "chats"), { recursive: true });
      await runTurn({ agent: warm, thread: "kept", message }, () => undefined);
      const sent = server.requests.at(-1)!;
      // Where the window starts is a function of the events and the budget alone: counting every
      // event from the first, with no mark, finds the start this process's kept count found.
      const mark = readMark(conv)!;
      const recount = agentWith(settings);
      cpSync(conv.dir, paths(recount).conversation("kept").dir, { recursive: true });
      rmSync(paths(recount).conversation("kept").window);
      const counted = await History.load(paths(recount).conversation("kept"), () => Promise.resolve(mark.budget));
      expect({ start: counted.count.start, before: counted.count.tokensBefore }, `turn ${i}`).toEqual({ start: mark.event, before: mark.tokens_before });
      if (mark.event > 1) drops++;
      if (!copy) continue;
      const worker = new Child(process.execPath, [join(ROOT, "dist/test/fixtures/turn-worker.js"), copy.dir, "kept", message.text, message.time.toISOString()]);
      expect(await worker.line((l) => l.includes('"outcome"'))).toContain('"end_turn"');
      await worker.exit();
      const again = server.requests.at(-1)!;
      expect(again).not.toBe(sent);
      expect(again.body.model).toBe(sent.body.model);
      // The system prompt names each agent's own folder; all after it is the same.
      expect(JSON.stringify(chats(again).slice(1))).toBe(JSON.stringify(chats(sent).slice(1)));
      compared++;
    }
    expect(compared).toBe(10);
    // The window dropped its oldest turns on the way.
    expect(drops).toBeGreaterThan(5);
    // Every event once, in order, none lost to the cache.
    const events = readEventsFrom(conv, 1);
    expect(events.map((e) => e.n)).toEqual(events.map((_, i) => i + 1));
  }, 60_000);
});

describe("a question written while the model is asked", () => {
  it("keeps its place when a writer that takes no lock (setting the model) takes its number first", async () => {
    const agent = agentWith();
    const conv = paths(agent).conversation("overtaken");
    server.fallback = () => ({ text: "first answer" });
    await turn(agent, "overtaken", "first");
    const budget = readMark(conv)!.budget;
    const history = await History.load(conv, () => Promise.resolve(budget));
    const time = new Date().toISOString();
    const question = { v: 1, kind: "message", role: "user", time, text: "second", header: "[h]" } as const;
    const expected = history.ahead(question);
    // The model is set meanwhile, and takes the number the question was to have.
    expect(await appendEvent(conv, { v: 1, kind: "command", name: "/model:set", model: "scripted-2", time })).toBe(expected);
    const actual = await appendEvent(conv, question);
    expect(actual).toBe(expected + 1);
    history.settle(expected, actual);
    // As a load from disk finds them: each event at its number, the model set, the same count.
    forgetProcessState();
    const fresh = await History.load(conv, () => Promise.resolve(budget));
    expect(history.events.map((e) => e.n)).toEqual(fresh.events.map((e) => e.n));
    expect(history.events.at(-1)?.event).toEqual(question);
    expect(history.model).toBe("scripted-2");
    expect(history.count).toEqual(fresh.count);
  });
});

describe("a question whose file is begun once its request is on its way", () => {
  it("keeps its place before a message that steers the turn from its first round, on disk and in what the model read", async () => {
    const agent = agentWith();
    server.fallback = () => ({ text: "answered both" });
    // A turn before: the window known, so the steering message is written at once in the first round.
    expect((await runTurn({ agent, thread: "steered", message: { text: "before" } }, () => undefined)).stop).toBe("end_turn");
    let given = false;
    const steering = { take: () => (given ? [] : ((given = true), [{ text: "and one more thing" }])) };
    const outcome = await runTurn({ agent, thread: "steered", message: { text: "the question" }, steering }, () => undefined);
    expect(outcome.stop).toBe("end_turn");
    const conv = paths(agent).conversation("steered");
    const users = readEventsFrom(conv, 1).filter((e) => e.event.kind === "message" && e.event.role === "user");
    expect(users.map((e) => (e.event as { text: string }).text)).toEqual(["before", "the question", "and one more thing"]);
    expect(users[2]!.n).toBe(users[1]!.n + 1);
    const sent = chats(server.requests.at(-1)!).filter((m) => m.role === "user").map((m) => String(m.content));
    expect(sent.findIndex((c) => c.includes("the question"))).toBeLessThan(sent.findIndex((c) => c.includes("and one more thing")));
  });
});

describe("the usage a turn reports", () => {
  /** Where the usage report falls among a second turn's reports: before or after its answer's event. */
  async function usageAgainstAnswer(agent: AgentRef, thread: string): Promise<{ usage: number; answer: number; seen: TurnEvent[] }> {
    await turn(agent, thread, "first");
    const { outcome, seen } = await turn(agent, thread, "again");
    expect(outcome.stop).toBe("end_turn");
    const usage = seen.findIndex((e) => e.type === "usage");
    const answer = seen.findIndex((e) => e.type === "event" && e.event.kind === "message" && e.event.role === "assistant");
    expect(usage).toBeGreaterThan(-1);
    expect(answer).toBeGreaterThan(-1);
    return { usage, answer, seen };
  }

  it("goes out before the answer is written when nothing of it waits on that: the window known, the text streamed, no cost", async () => {
    server.fallback = () => ({ text: "a streamed answer", chunks: 3 });
    const { usage, answer, seen } = await usageAgainstAnswer(agentWith(), "early");
    expect(usage).toBeLessThan(answer);
    // After the text it counts.
    expect(seen.findLastIndex((e) => e.type === "text")).toBeLessThan(usage);
  });

  it("waits for the answer to be written when the provider reports a cost: the conversation's cost counts this answer's", async () => {
    server.fallback = () => ({ text: "a costed answer", chunks: 3, usage: { cost: 0.25 } });
    const { usage, answer, seen } = await usageAgainstAnswer(agentWith(), "costed");
    expect(usage).toBeGreaterThan(answer);
    const report = seen[usage] as Extract<TurnEvent, { type: "usage" }>;
    expect(report.cost).toBeCloseTo(0.5);
  });
});

describe("a new conversation's history, loaded before its window is known", () => {
  it("counts its first turn without the budget, refuses a second message until it is known, and saves the mark with it", async () => {
    const agent = agentWith();
    const conv = paths(agent).conversation("later");
    let tell!: (budget: number) => void;
    const asked: (string | undefined)[] = [];
    const history = await History.load(
      conv,
      (model) => {
        asked.push(model);
        return new Promise<number>((resolve) => (tell = resolve));
      },
      { later: true },
    );
    // Asked at once, and not waited for.
    expect(asked).toEqual([undefined]);
    expect(history.waiting).toBe(true);
    expect(() => history.budget).toThrow(/still asked/);
    const time = new Date().toISOString();
    const question = { v: 1, kind: "message", role: "user", time, text: "x".repeat(4000), header: "[h]" } as const;
    history.settle(history.ahead(question), await appendEvent(conv, question));
    const answer = { v: 1, kind: "message", role: "assistant", time, text: "an answer", model: "m", provider: "p", latency_ms: 1, stop: "end_turn" } as const;
    history.settle(history.ahead(answer), await appendEvent(conv, answer));
    expect(history.window().map((e) => e.n)).toEqual([1, 2]);
    // A second message could drop the first: counted only with the budget.
    expect(() => history.ahead({ ...question, text: "second" })).toThrow(/budget was known/);
    expect(history.events).toHaveLength(2);
    // A budget far under the question's 1,000 tokens: the window still starts at the one message.
    tell(100);
    expect(await history.sure()).toBe(100);
    expect(history.waiting).toBe(false);
    history.saveMark();
    expect(readMark(conv)).toMatchObject({ event: 1, budget: 100 });
    // As a load from disk with that budget counts them.
    forgetProcessState();
    const fresh = await History.load(conv, () => Promise.resolve(100));
    expect(fresh.count).toEqual(history.count);
    // Now the second message is counted, and drops the first.
    const second = { ...question, text: "second" };
    history.settle(history.ahead(second), await appendEvent(conv, second));
    expect(history.window().map((e) => e.n)).toEqual([3]);
  });

  it("is loaded at once when the conversation has events, or a budget that is known", async () => {
    const agent = agentWith();
    server.fallback = () => ({ text: "first answer" });
    await turn(agent, "older", "first");
    const older = await History.load(paths(agent).conversation("older"), () => Promise.resolve(500), { later: true });
    expect(older.waiting).toBe(false);
    expect(older.budget).toBe(500);
  });
});

describe("a turn's writes", () => {
  it("a process new to a conversation with a number missing among its events, its copy past it, writes nothing", async () => {
    const agent = agentWith();
    const conv = paths(agent).conversation("holed");
    server.fallback = () => ({ text: "fine" });
    for (let i = 0; i < 5; i++) await turn(agent, "holed", `question ${i}`);
    // Removed by hand; the copy still names the answers after it.
    rmSync(conv.event(5));
    const names = () => readdirSync(conv.dir).filter((name) => /^\d{12}\.json$/.test(name));
    const before = names();
    forgetProcessState();
    await expect(runTurn({ agent, thread: "holed", message: { text: "after the hole" } }, () => undefined)).rejects.toThrow(/event 5 .* is missing/);
    expect(names()).toEqual(before);
    // A copy that names answers this folder never had (copied in from elsewhere): written as ever.
    const other = agentWith();
    const otherConv = paths(other).conversation("copied");
    await turn(other, "copied", "one");
    cpSync(conv.transcript, otherConv.transcript);
    forgetProcessState();
    const after = await turn(other, "copied", "two");
    expect(after.outcome.failure).toBeUndefined();
    expect(readEventsFrom(otherConv, 1).map((e) => e.n)).toEqual([1, 2, 3, 4]);
  });

  it("a question that can't be written fails the turn, and no turn after it sees it", async () => {
    const agent = agentWith();
    const conv = paths(agent).conversation("unwritable");
    server.fallback = () => ({ text: "an answer that must not be kept" });
    // A speaker without the owner flag fails the event's schema: the write is refused.
    const bad = { text: "lost?", from: { id: "x" } as unknown as { id: string; owner: boolean } };
    await expect(runTurn({ agent, thread: "unwritable", message: bad }, () => undefined)).rejects.toThrow(/invalid event/);
    expect(readEventsFrom(conv, 1)).toEqual([]);
    server.fallback = () => ({ text: "fine" });
    await turn(agent, "unwritable", "next");
    expect(readEventsFrom(conv, 1).map((e) => e.event.kind === "message" && e.event.text)).toEqual(["next", "fine"]);
    expect(JSON.stringify(chats(server.requests.at(-1)!))).not.toContain("lost?");
  });

  it("a turn cancelled before the model answers ends only once its question is on disk", async () => {
    const agent = agentWith();
    const conv = paths(agent).conversation("cancelled");
    server.fallback = () => ({ text: "too late" });
    const outcome = await runTurn({ agent, thread: "cancelled", message: { text: "never mind" }, signal: AbortSignal.abort() }, () => undefined);
    expect(outcome.stop).toBe("cancelled");
    // At once, not later: the turn's end is the moment its events are all on disk.
    expect(readdirSync(conv.dir).filter((n) => /^\d{12}\.json$/.test(n))).toEqual([eventName(1)]);
  });

  it("leaves none of the files it makes while the model answers behind, however it ends", async () => {
    const agent = agentWith();
    const conv = paths(agent).conversation("ends");
    server.script({ text: "answered" });
    await turn(agent, "ends", "one");
    server.script({ error: { status: 400, message: "refused" } });
    await turn(agent, "ends", "two");
    server.script({ text: "a long answer ".repeat(20), chunks: 20, chunkDelayMs: 20 });
    // Cancelled once its answer began to stream: what came of it is kept, in the file made for it.
    const cancel = new AbortController();
    const running = runTurn({ agent, thread: "ends", message: { text: "three" }, signal: cancel.signal }, (e) => {
      if (e.type === "text") cancel.abort();
    });
    expect((await running).stop).toBe("cancelled");
    expect(readdirSync(conv.dir).filter((n) => n.startsWith(".tmp-"))).toEqual([]);
    const kinds = readEventsFrom(conv, 1).map((e) => (e.event.kind === "message" ? `${e.event.role}: ${e.event.text.slice(0, 8)}` : e.event.kind));
    expect(kinds).toEqual(["user: one", "assistant: answered", "user: two", "failure", "user: three", expect.stringMatching(/^assistant: /)]);
  });

  it("a long-lived process's turn makes its conversation's next files once its lock is let go, and a process that stops waits for them", async () => {
    const agent = agentWith();
    const conv = paths(agent).conversation("spares");
    server.fallback = () => ({ text: "answered" });
    try {
      const outcome = await runTurn({ agent, thread: "spares", message: { text: "one" } }, () => undefined, { early: true, spare: true });
      expect(outcome.stop).toBe("end_turn");
      // Once the turns settle, with no other wait: a process that exits then leaves no file half made.
      await turnsSettled();
      expect(sparesKept()).toBe(2);
      expect(readdirSync(conv.dir).filter((n) => n.startsWith(`.tmp-${process.pid}-`))).toHaveLength(2);
    } finally {
      forgetProcessState();
    }
    expect(readdirSync(conv.dir).filter((n) => n.startsWith(".tmp-"))).toEqual([]);
  });

  it("a long-lived process's turn makes the next turn's files while the model answers, and the next turn writes its question and answer into them", async () => {
    const agent = agentWith();
    const conv = paths(agent).conversation("spared");
    server.fallback = () => ({ text: "answered" });
    const temps = () => readdirSync(conv.dir).filter((n) => n.startsWith(`.tmp-${process.pid}-`));
    try {
      // Resolved once its lock is let go, with nothing settled after: its next files are made by then.
      expect((await runTurn({ agent, thread: "spared", message: { text: "one" } }, () => undefined, { spare: true })).stop).toBe("end_turn");
      expect(sparesKept()).toBe(2);
      const made = temps().map((n) => statSync(join(conv.dir, n)).ino);
      expect(made).toHaveLength(2);
      expect((await runTurn({ agent, thread: "spared", message: { text: "two" } }, () => undefined, { spare: true })).stop).toBe("end_turn");
      // Its question and answer are those files, linked to their numbers; two more are made for the turn after.
      expect([3, 4].map((n) => statSync(conv.event(n)).ino).sort()).toEqual([...made].sort());
      expect(readEventsFrom(conv, 3).map((e) => (e.event.kind === "message" ? e.event.text : e.event.kind))).toEqual(["two", "answered"]);
      expect(sparesKept()).toBe(2);
      expect(temps().filter((n) => made.includes(statSync(join(conv.dir, n)).ino))).toEqual([]);
    } finally {
      forgetProcessState();
    }
    expect(readdirSync(conv.dir).filter((n) => n.startsWith(".tmp-"))).toEqual([]);
  });

  it("a steady turn looks for the files it may not find (the agent's own, your facts, the next event) and meets no error for one missing", async () => {
    const agent = agentWith();
    server.fallback = () => ({ text: "answered" });
    await turn(agent, "looked", "one");
    // Every sync call of node:fs, as the store and the turn import it, watched for what it throws.
    const fs = createRequire(import.meta.url)("node:fs") as Record<string, unknown>;
    const thrown: string[] = [];
    const kept = new Map<string, unknown>();
    for (const name of Object.keys(fs).filter((n) => n.endsWith("Sync") && typeof fs[n] === "function")) {
      const real = fs[name] as (...args: unknown[]) => unknown;
      kept.set(name, real);
      fs[name] = (...args: unknown[]) => {
        try {
          return real(...args);
        } catch (e) {
          thrown.push(`${name} ${(e as NodeJS.ErrnoException).code}: ${String(args[0])}`);
          throw e;
        }
      };
    }
    syncBuiltinESMExports();
    try {
      expect((await turn(agent, "looked", "two")).outcome.stop).toBe("end_turn");
    } finally {
      for (const [name, real] of kept) fs[name] = real;
      syncBuiltinESMExports();
    }
    expect(thrown).toEqual([]);
    expect(readEventsFrom(paths(agent).conversation("looked"), 1)).toHaveLength(4);
  });

  it("a model set while a turn runs is the conversation's model at the next turn of the same process", async () => {
    const agent = agentWith();
    const conv = paths(agent).conversation("set-midway");
    server.fallback = () => ({ text: "first" });
    await turn(agent, "set-midway", "one");
    server.script({ text: "slow answer", chunks: 5, chunkDelayMs: 40 });
    const running = turn(agent, "set-midway", "two");
    await server.waitForRequest();
    // Set over ACP meanwhile, without the conversation's lock: it takes the next number.
    await appendEvent(conv, { v: 1, kind: "command", name: "/model:set", model: "scripted-2", time: new Date().toISOString() });
    await running;
    server.fallback = () => ({ text: "third" });
    await turn(agent, "set-midway", "three");
    expect(server.requests.at(-1)!.body.model).toBe("scripted-2");
    expect(readMark(conv)?.model).toBe("scripted-2");
  });
});

describe("the window", () => {
  function fill(agent: AgentRef, thread: string, count: number, o: { from?: string; chars?: number } = {}): void {
    // Written directly, as an earlier process would have: one event a file.
    const conv = paths(agent).conversation(thread);
    mkdirSync(conv.dir, { recursive: true });
    const t = new Date(o.from ?? "2026-01-01T00:00:00Z").getTime();
    for (let n = 1; n <= count; n++) {
      const time = new Date(t + n * 1000).toISOString();
      const event =
        n % 2 === 1
          ? { v: 1, kind: "message", role: "user", time, text: `message ${n} ${"x".repeat(o.chars ?? 200)}`, header: `[h ${n}]` }
          : { v: 1, kind: "message", role: "assistant", time, text: `answer ${n} ${"y".repeat(o.chars ?? 200)}`, model: "m", provider: "p", latency_ms: 1, stop: "end_turn" };
      writeFileSync(join(conv.dir, eventName(n)), JSON.stringify(Event.parse(event)));
    }
  }

  it("reads no more event files for 5,000 events than for 500 with the same window", async () => {
    const reads: number[] = [];
    for (const size of [500, 5_000]) {
      const agent = agentWith({ window: { max: 8_000, answer: 500, margin: 200 } });
      fill(agent, "long", size);
      server.fallback = () => ({ text: "fine" });
      await turn(agent, "long", "first"); // no mark yet: reads every message once, and marks
      // Its window's events file left out: one file an event (window-file.test.ts reads it).
      rmSync(paths(agent).conversation("long").windowEvents);
      forgetProcessState(); // as a fresh process would
      readStats.files = 0;
      await turn(agent, "long", "second");
      reads.push(readStats.files);
      const sent = chats(server.requests.at(-1)!);
      expect(sent.length).toBeLessThan(200);
    }
    // Each holds between half a window and a window of ~70-token events, whatever the conversation's length.
    for (const r of reads) expect(r).toBeGreaterThan(10);
    for (const r of reads) expect(r).toBeLessThan(8_000 / 60);
    expect(reads[1]! / reads[0]!).toBeLessThan(2);
  });

  it("counts an image by its size past 1,000 tokens, so a window holds at most its share in KiB of them", async () => {
    const agent = agentWith();
    const conv = paths(agent).conversation("photos");
    // Eight messages, each with a photo of 3 MiB (4 Mi characters as a data: URL) and its answer.
    const photo = `data:image/jpeg;base64,${"A".repeat(4 * 1024 * 1024)}`;
    const time = new Date().toISOString();
    for (let i = 0; i < 8; i++) {
      await appendEvent(conv, { v: 1, kind: "message", role: "user", time, text: `photo ${i}`, header: "[h]", parts: [{ type: "image_url", image_url: { url: photo } }] });
      await appendEvent(conv, { v: 1, kind: "message", role: "assistant", time, text: "a photo", model: "m", provider: "p", latency_ms: 1, stop: "end_turn" });
    }
    const small: Event = { v: 1, kind: "message", role: "user", time, text: "a small one", header: "[h]", parts: [{ type: "image_url", image_url: { url: "data:image/png;base64,iVBORw0KGgo=" } }] };
    expect(eventTokens(small)).toBe(roughTokens("[h]") + 1 + roughTokens("a small one") + 1_000);
    // A share of 20,000 tokens holds four of them at most, not all eight (8,000 tokens at 1,000 each).
    const history = await History.load(conv, () => Promise.resolve(20_000));
    const users = history.window().filter((e) => e.event.kind === "message" && e.event.role === "user");
    expect(users.length).toBeGreaterThan(0);
    expect(users.length).toBeLessThanOrEqual(4);
    const last = users.at(-1)?.event;
    expect(last?.kind === "message" ? last.text : undefined).toBe("photo 7");
  });

  it("keeps between turns at most 64 Mi characters of events of all its conversations, the last used kept", async () => {
    forgetProcessState();
    const agent = agentWith();
    const photo = `data:image/jpeg;base64,${"B".repeat(6 * 1024 * 1024)}`;
    const time = new Date().toISOString();
    for (let i = 0; i < 14; i++) {
      const conv = paths(agent).conversation(`big-${i}`);
      await appendEvent(conv, { v: 1, kind: "message", role: "user", time, text: `photo ${i}`, header: "[h]", parts: [{ type: "image_url", image_url: { url: photo } }] });
      const history = await History.load(conv, () => Promise.resolve(1_000_000));
      history.saveMark();
      const { held, max } = keptHistoryChars();
      expect(held).toBeLessThanOrEqual(max);
      // The one just saved is kept: at least its photo's characters.
      expect(held).toBeGreaterThanOrEqual(photo.length);
    }
    // 14 conversations of 6 Mi characters were more than the bound: some were let go.
    expect(keptHistoryChars().held).toBeLessThan(14 * photo.length);
    forgetProcessState();
  });

  it("counts a conversation again from its first event when its mark was made for another share, and marks it again", async () => {
    const small = { window: { max: 2_000, answer: 200, margin: 100 } };
    const agent = agentWith(small);
    const conv = paths(agent).conversation("reshared");
    fill(agent, "reshared", 40);
    server.fallback = () => ({ text: "fine" });
    await turn(agent, "reshared", "first");
    // Some 2,200 tokens in a share under 1,700: the oldest turns dropped, and the mark says where.
    const before = readMark(conv)!;
    expect(before.event).toBeGreaterThan(1);
    expect(JSON.stringify(chats(server.requests.at(-1)!))).not.toContain("message 1 x");
    // The window set larger: the whole conversation fits its share. Counted on from the mark, it
    // would still start where the smaller share dropped it.
    writeSettings(agent, { model: { provider: "test", name: "scripted-1", base_url: server.url }, window: { ...small.window, max: 100_000 } });
    await turn(agent, "reshared", "second");
    const sent = chats(server.requests.at(-1)!);
    expect(String(sent[1]?.content)).toContain("message 1 x");
    expect(sent.filter((m) => m.role === "user")).toHaveLength(22);
    // Made again for the share it was counted with: the same instructions, 98,000 tokens more window.
    expect(readMark(conv)).toMatchObject({ event: 1, time: "2026-01-01T00:00:01.000Z", tokens_before: 0, budget: before.budget + 98_000 });
  });

  it("counts a conversation again from its first event when its mark is of other messages, and marks it again", async () => {
    const settings = { window: { max: 2_000, answer: 200, margin: 100 } };
    const agent = agentWith(settings);
    server.fallback = () => ({ text: "fine" });
    // A long conversation whose mark says its oldest turns dropped.
    fill(agent, "long", 40);
    await turn(agent, "long", "first");
    const other = readMark(paths(agent).conversation("long"))!;
    expect(other.event).toBeGreaterThan(1);
    // Another, short enough to fit the share whole, of other messages at the same numbers (a user
    // message at the mark's, sent at another time), left with the long one's mark, for the same
    // share: it is another's. Counted on from it, the window would start where the long one's does.
    const conv = paths(agent).conversation("short");
    fill(agent, "short", 40, { from: "2026-02-01T00:00:00Z", chars: 20 });
    writeMark(conv, other);
    const marked = readEventsFrom(conv, other.event)[0]!.event;
    expect(marked).toMatchObject({ kind: "message", role: "user" });
    expect(marked.time).not.toBe(other.time);
    await turn(agent, "short", "second");
    const sent = chats(server.requests.at(-1)!);
    expect(String(sent[1]?.content)).toContain("message 1 x");
    expect(readMark(conv)).toMatchObject({ event: 1, time: "2026-02-01T00:00:01.000Z", tokens_before: 0, budget: other.budget });
  });

  it("starts anew after /new, keeping what came before on disk", async () => {
    const agent = agentWith();
    server.fallback = () => ({ text: "ok" });
    await turn(agent, "fresh", "remember the word apple");
    await appendEvent(paths(agent).conversation("fresh"), { v: 1, kind: "command", name: "/new", time: new Date().toISOString() });
    await turn(agent, "fresh", "what word?");
    const sent = chats(server.requests.at(-1)!);
    expect(sent).toHaveLength(2);
    expect(JSON.stringify(sent)).not.toContain("apple");
    const all = readEventsFrom(paths(agent).conversation("fresh"), 1);
    expect(all.some((e) => e.event.kind === "message" && e.event.text.includes("apple"))).toBe(true);
  });
});

describe("the model call", () => {
  it("keeps the clients of the endpoints and keys used most lately, each key's request sent with its own", async () => {
    const agent = agentWith();
    // Keys rotated again and again (the settings edited each time): the process keeps no more clients than its bound.
    for (let i = 0; i < CLIENTS_KEPT + 6; i++) {
      writeSettings(agent, { model: { provider: "test", name: "scripted-1", base_url: server.url, key: `sk-rotated-${i}` } });
      server.script({ text: `answer ${i}` });
      expect((await turn(agent, "rotated", `question ${i}`)).outcome.stop).toBe("end_turn");
      expect(server.requests.at(-1)?.headers.authorization).toBe(`Bearer sk-rotated-${i}`);
    }
    expect(clientsKept()).toBe(CLIENTS_KEPT);
    // One let go is made again when a turn needs it.
    writeSettings(agent, { model: { provider: "test", name: "scripted-1", base_url: server.url, key: "sk-rotated-0" } });
    server.script({ text: "again" });
    expect((await turn(agent, "rotated", "once more")).outcome.stop).toBe("end_turn");
    expect(server.requests.at(-1)?.headers.authorization).toBe("Bearer sk-rotated-0");
    expect(clientsKept()).toBe(CLIENTS_KEPT);
  }, 60_000);

  it("keeps a model's thinking with its answer and sends it back with its tool-call message", async () => {
    const agent = agentWith();
    const host = new McpToolHost();
    const servers = [{ name: "everything", source: { type: "stdio" as const, command: process.execPath, args: [EVERYTHING, "stdio"] } }];
    server.script(
      { reasoning_content: "I should call the tool.", tool_calls: [{ id: "call_1", name: "everything__echo", arguments: { message: "hi" } }] },
      { reasoning_content: "Now answer.", text: "Done." },
    );
    const seen: TurnEvent[] = [];
    const outcome = await runTurn({ agent, thread: "think", message: { text: "go" }, tools: host, toolServers: servers }, (e) => seen.push(e));
    await host.close();
    expect(outcome.stop).toBe("end_turn");
    // Thinking is never shown.
    expect(seen.filter((e) => e.type === "text").map((e) => (e as { delta: string }).delta).join("")).toBe("Done.");
    const second = chats(server.requests[1]!);
    const withCalls = second.find((m) => m.role === "assistant") as Record<string, unknown>;
    expect(withCalls.reasoning_content).toBe("I should call the tool.");
    expect(withCalls.tool_calls).toHaveLength(1);
    const answer = second.find((m) => m.role === "tool") as { content: string };
    expect(answer.content).toContain("hi");
    const events = readEventsFrom(paths(agent).conversation("think"), 1).map((e) => e.event);
    const last = events.at(-1)!;
    expect(last.kind === "message" && last.role === "assistant" && last.thinking?.reasoning_content).toBe("Now answer.");
    // Thinking of a plain answer isn't sent back at the next turn.
    await turn(agent, "think", "more");
    expect(JSON.stringify(chats(server.requests[2]!))).not.toContain("Now answer.");
  });

  it("keeps usage, latency, response id, and cost only when reported", async () => {
    const agent = agentWith();
    server.script({ text: "a", usage: { prompt_tokens: 100, completion_tokens: 5, cached_tokens: 64, cost: 0.0012 } }, { text: "b", usage: { prompt_tokens: 10, completion_tokens: 2 } });
    await turn(agent, "usage", "one");
    await turn(agent, "usage", "two");
    const answers = readEventsFrom(paths(agent).conversation("usage"), 1)
      .map((e) => e.event)
      .filter((e) => e.kind === "message" && e.role === "assistant");
    expect(answers[0]).toMatchObject({ usage: { in: 100, out: 5, cached: 64 }, cost: 0.0012, model: "scripted-1", provider: "test" });
    expect(answers[0]).toHaveProperty("response_id");
    expect(answers[1]).not.toHaveProperty("cost");
  });

  it("stores and reports a prompt refused as too long, saying what was sent", async () => {
    const agent = agentWith();
    server.script({ error: { status: 400, code: "context_length_exceeded", message: "This model's maximum context length is 8192 tokens." } });
    const { outcome } = await turn(agent, "long", "hello");
    expect(outcome.failure?.reason).toBe("context_too_long");
    expect(outcome.failure?.message).toMatch(/too long: sent 2 messages, about \d+ tokens/);
    const last = readEventsFrom(paths(agent).conversation("long"), 1).at(-1)!.event;
    expect(last).toMatchObject({ kind: "failure", reason: "context_too_long", sent: { messages: 2 } });
  });

  it("retries a 5xx a bounded number of times, then reports the turn's failure", async () => {
    const agent = agentWith();
    const before = server.requests.length;
    server.script(...Array.from({ length: 5 }, () => ({ error: { status: 503, message: "overloaded" } })));
    const { outcome } = await turn(agent, "down", "hello");
    expect(outcome.failure?.reason).toBe("model_error");
    expect(server.requests.length - before).toBe(3);
    server.fallback = () => ({ text: "back" });
    server.script();
  });
});

describe("the transcript", () => {
  it("holds only the owner's messages and the agent's answers, up to the last answer", async () => {
    const agent = agentWith();
    server.script({ tool_calls: [{ id: "c1", name: "x__y", arguments: {} }] }, { text: "the answer" });
    await turn(agent, "copy", "the question");
    const conv = paths(agent).conversation("copy");
    const copy = readFileSync(conv.transcript, "utf8");
    expect(copy).toContain("the question");
    expect(copy).toContain("the answer");
    expect(copy).not.toContain("x__y");
    expect(copy).not.toContain("there is no tool");
    // Cut short: made again from every message.
    writeFileSync(conv.transcript, copy.slice(0, 20));
    server.fallback = () => ({ text: "second answer" });
    await turn(agent, "copy", "next question");
    const again = readFileSync(conv.transcript, "utf8");
    expect(again.match(/the question/g)).toHaveLength(1);
    expect(again).toContain("next question");
    expect(again.trimEnd().endsWith(`-->`)).toBe(true);
    expect(readdirSync(conv.dir).filter((f) => f.startsWith(".tmp"))).toHaveLength(0);
  });
});

describe("a turn killed mid-answer", () => {
  it("leaves every event file whole, and the next turn proceeds (from any process)", async () => {
    assertBuilt(["dist/test/fixtures/turn-worker.js", "dist/turn/turn.js"], ["turn", "store", "protocol", "test/fixtures/turn-worker.ts"]);
    const agent = agentWith();
    server.script({ text: "a long answer that never ends ".repeat(40), chunks: 40, chunkDelayMs: 50 });
    const worker = new Child(process.execPath, [join(ROOT, "dist/test/fixtures/turn-worker.js"), agent.dir, "cut", "tell me a story"]);
    await worker.line((l) => l.includes('"text"'));
    worker.proc.kill("SIGKILL");
    expect((await worker.exit()).signal).toBe("SIGKILL");
    const conv = paths(agent).conversation("cut");
    // Every event file parses whole; the question is on disk.
    const names = readdirSync(conv.dir).filter((f) => /^\d{12}\.json$/.test(f));
    for (const name of names) Event.parse(JSON.parse(readFileSync(join(conv.dir, name), "utf8")));
    forgetProcessState();
    const before = readEventsFrom(conv, 1);
    expect(before[0]?.event).toMatchObject({ role: "user", text: "tell me a story" });
    // The lock the killed process held doesn't stop the next turn.
    server.fallback = () => ({ text: "here it is" });
    const { outcome } = await turn(agent, "cut", "are you there?");
    expect(outcome.stop).toBe("end_turn");
    const sent = chats(server.requests.at(-1)!);
    expect(sent.filter((m) => m.role === "user").map((m) => m.content)).toEqual([expect.stringContaining("tell me a story"), expect.stringContaining("are you there?")]);
    expect(readFileSync(conv.transcript, "utf8")).toContain("here it is");
  });
});
