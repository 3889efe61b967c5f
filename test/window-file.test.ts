// A conversation's window's events file (window.jsonl): what a process new to a conversation reads its
// window from, one file rather than a file an event. Its turn asks the model the same as one that
// reads every event's file; the file is kept up by the turns, made again when another writer's, cut
// short or planted; anything planted there (a link, a FIFO, a hard link, a file of 1 GB, lines of
// another conversation, bytes changed anywhere) is read as far as it holds, and never past the events
// on disk.
import { cpSync, existsSync, linkSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, truncateSync, writeFileSync } from "node:fs";
import { execFileSync } from "node:child_process";
import { tmpdir } from "node:os";
import { join } from "node:path";
import fc from "fast-check";
import { z } from "zod";
import * as acp from "@agentclientprotocol/sdk";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { Event, type Numbered, type Settings } from "../protocol/index.js";
import { appendEvent, eventName, forgetEvents, lastEventNumber, paths, readEvent, readEventsFrom, readMark, readStats, readWindowFile, windowLine, writeSettings, type AgentRef, type ConversationPaths } from "../store/index.js";
import { keepWindowFile, WINDOW_FILE_LAG } from "../store/conversation.js";
import { conversationChoices, History } from "../turn/history.js";
import { transcriptEnd } from "../turn/transcript.js";
import { forgetProcessState, runTurn } from "../turn/turn.js";
import type { TurnEvent } from "../turn/types.js";
import { startModelServer, type ModelServer, type RecordedRequest } from "./model-server.js";
import { configure, openClient, scriptedSettings, startDaemon, stdioStream, watched } from "./acp-client.js";
import { assertBuilt } from "./fixtures/built.js";

const seed = process.env.FC_SEED ? { seed: Number(process.env.FC_SEED) } : {};
let server: ModelServer;
const dirs: string[] = [];

beforeAll(async () => {
  server = await startModelServer();
  server.fallback = (req) => ({ text: `answer ${messages(req).length} ${"lorem ipsum ".repeat(6)}` });
});
const cleanup: (() => unknown)[] = [];
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f();
});
afterAll(async () => {
  await server.close();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/** A small window, so that a conversation of some hundreds of events drops and has a mark. */
const SMALL: Partial<Settings> = { window: { max: 6_000, answer: 300, margin: 100 } };

function agentWith(settings: Partial<Settings> = SMALL): AgentRef {
  const dir = mkdtempSync(join(tmpdir(), "lh-window-file-"));
  dirs.push(dir);
  const agent = { dir };
  writeSettings(agent, { model: { provider: "test", name: "scripted-1", base_url: server.url }, ...settings });
  return agent;
}

function messages(r: RecordedRequest): unknown[] {
  return (r.body as { messages: unknown[] }).messages;
}

async function turn(agent: AgentRef, thread: string, text: string): Promise<{ request: RecordedRequest; warnings: string[] }> {
  const warnings: string[] = [];
  const outcome = await runTurn({ agent, thread, message: { text } }, (e: TurnEvent) => {
    if (e.type === "warning") warnings.push(e.message);
  });
  expect(outcome.failure).toBeUndefined();
  return { request: server.requests.at(-1)!, warnings };
}

/** Events written straight to the folder, as an earlier process would have: one a file. */
function fill(conv: ConversationPaths, count: number): void {
  mkdirSync(conv.dir, { recursive: true, mode: 0o700 });
  for (let n = 1; n <= count; n++) {
    const time = new Date(Date.UTC(2026, 0, 1, 0, 0, n)).toISOString();
    const event =
      n % 2 === 1
        ? { v: 1, kind: "message", role: "user", time, text: `message ${n} ${"x".repeat(120)}`, header: `[h ${n}]` }
        : { v: 1, kind: "message", role: "assistant", time, text: `answer ${n} ${"y".repeat(120)}`, model: "m", provider: "p", latency_ms: 1, stop: "end_turn" };
    writeFileSync(join(conv.dir, eventName(n)), `${JSON.stringify(Event.parse(event))}\n`, { mode: 0o600 });
  }
}

const Line = z.tuple([z.number(), z.unknown()]);

/** The window's events file's lines, parsed. */
function lines(conv: ConversationPaths): [number, unknown][] {
  return readFileSync(conv.windowEvents, "utf8")
    .split("\n")
    .filter((l) => l.length > 0)
    .map((l) => Line.parse(JSON.parse(l)));
}

/** The conversation's events read from their files alone, from `from` on. */
function fromFiles(conv: ConversationPaths, from: number): Numbered[] {
  const out: Numbered[] = [];
  for (let n = from; ; n++) {
    let text: string;
    try {
      text = readFileSync(conv.event(n), "utf8");
    } catch {
      return out;
    }
    out.push({ n, event: Event.parse(JSON.parse(text)) });
  }
}

/** A conversation of 300 events and a turn on it: a mark, and a window's events file. */
async function conversation(thread = "long"): Promise<{ agent: AgentRef; conv: ConversationPaths }> {
  const agent = agentWith();
  const conv = paths(agent).conversation(thread);
  fill(conv, 300);
  await turn(agent, thread, "first");
  expect(readMark(conv)?.event).toBeGreaterThan(1);
  return { agent, conv };
}

/** What a fresh process's turn asks the model (the conversation it sends), and how many files it read. */
async function freshTurn(agent: AgentRef, thread: string, text: string): Promise<{ asked: unknown[]; files: number; warnings: string[] }> {
  forgetProcessState();
  readStats.files = 0;
  const { request, warnings } = await turn(agent, thread, text);
  // The system message names the agent's folder: the rest, the new message aside.
  return { asked: [request.body.tools, ...messages(request).slice(1, -1)], files: readStats.files, warnings };
}

describe("a process new to a conversation reads its window from the window's events file", () => {
  it("asks the model what a process reading every event's file asks, reading three files rather than a window's", async () => {
    const { agent } = await conversation();
    // The same folder twice: one with the file, one without.
    const other = agentWith();
    rmSync(other.dir, { recursive: true });
    cpSync(agent.dir, other.dir, { recursive: true });
    const otherConv = paths(other).conversation("long");
    rmSync(otherConv.windowEvents);
    writeSettings(other, { model: { provider: "test", name: "scripted-1", base_url: server.url }, ...SMALL });

    const withFile = await freshTurn(agent, "long", "second");
    const without = await freshTurn(other, "long", "second");
    expect(withFile.asked).toEqual(without.asked);
    // The file, the events it holds first and last (checked against theirs), and the events after it.
    expect(withFile.files).toBeLessThanOrEqual(3 + WINDOW_FILE_LAG);
    expect(without.files).toBeGreaterThan(40);
    // The turn without made it: the next fresh process reads it.
    expect(statSync(otherConv.windowEvents).isFile()).toBe(true);
    const again = await freshTurn(other, "long", "third");
    expect(again.files).toBeLessThanOrEqual(3 + WINDOW_FILE_LAG);
  });

  it("is read by a process that read only some events of the window, one at a time (the mark's, the newest ones)", async () => {
    const { agent, conv } = await conversation();
    forgetProcessState();
    // What a session taken up reads one at a time before its first prompt: the mark's event (whether
    // the mark holds) and, from the newest back, its last user message's channel and folder.
    readEvent(conv, readMark(conv)!.event);
    const last = lastEventNumber(conv);
    for (const n of [last, last - 1]) readEvent(conv, n);
    readStats.files = 0;
    await turn(agent, "long", "after the resume");
    expect(readStats.files).toBeLessThanOrEqual(3 + WINDOW_FILE_LAG);
  });

  it("holds the events a load reads, line for line the same as their files, as turns go on and the window drops", async () => {
    const { agent, conv } = await conversation();
    const starts = new Set<number>();
    for (let i = 0; i < 60; i++) {
      // A fresh process now and then: the file is read, then added to.
      if (i % 7 === 0) forgetProcessState();
      await turn(agent, "long", `question ${i} ${"z".repeat(200)}`);
      const held = lines(conv);
      const start = held[0]![0];
      starts.add(start);
      // Numbered one after another, each line its event's file.
      expect(held.map(([n]) => n)).toEqual(held.map((_, k) => start + k));
      const files = fromFiles(conv, start);
      for (const [n, event] of held) expect(event).toEqual(files[n - start]?.event);
      // From no later than where a load starts (the mark, or the copy's end before it), lagging the
      // last event by less than the lag, and never more events before that start than from it.
      const mark = readMark(conv)!;
      const loadStart = Math.min(mark.event, transcriptEnd(conv) || mark.event);
      expect(start).toBeLessThanOrEqual(loadStart);
      expect(files.at(-1)!.n - held.at(-1)![0]).toBeLessThan(WINDOW_FILE_LAG);
      expect(held.length).toBeLessThanOrEqual(2 * (files.at(-1)!.n - loadStart + 1));
    }
    // The window dropped meanwhile, and the file was made again from a later start.
    expect(starts.size).toBeGreaterThan(1);
  });

  it("is made again whole when another process added to it, or it was cut short", async () => {
    const { agent, conv } = await conversation();
    await freshTurn(agent, "long", "read it");
    // Another writer's line (a turn of another process), then this process's turn: not added to.
    const before = lines(conv);
    writeFileSync(conv.windowEvents, readFileSync(conv.windowEvents, "utf8") + windowLine(before.at(-1)![0] + 1, Event.parse(before.at(-1)![1])), { mode: 0o600 });
    for (let i = 0; i < WINDOW_FILE_LAG / 2 + 1; i++) await turn(agent, "long", `more ${i}`);
    let held = lines(conv);
    expect(held.map(([n]) => n)).toEqual(held.map((_, k) => held[0]![0] + k));
    // Cut short mid-line, by a crash: read as far as it holds, and made again.
    truncateSync(conv.windowEvents, statSync(conv.windowEvents).size - 7);
    const fresh = await freshTurn(agent, "long", "after the cut");
    expect(fresh.files).toBeGreaterThan(3);
    held = lines(conv);
    const files = fromFiles(conv, held[0]![0]);
    expect(held.map(([, e]) => e)).toEqual(files.slice(0, held.length).map((e) => e.event));
  });
});

describe("a window over the file's limit", () => {
  it("writes none, and does not make its lines again at every turn while the window starts where it did", () => {
    const agent = agentWith();
    const conv = paths(agent).conversation("over");
    fill(conv, 12);
    const events = fromFiles(conv, 1);
    const lineOf = (e: Numbered) => Buffer.byteLength(windowLine(e.n, e.event));
    // A limit the window's twelve lines are over, and its first two, or its last two, are within.
    const max = lineOf(events[10]!) + lineOf(events[11]!);
    keepWindowFile(conv, events, max);
    expect(existsSync(conv.windowEvents)).toBe(false);
    // From the same start: left as it was, though these lines alone would fit.
    keepWindowFile(conv, events.slice(0, 2), max);
    expect(existsSync(conv.windowEvents)).toBe(false);
    // The window dropped (a later start): written.
    keepWindowFile(conv, events.slice(10), max);
    expect(lines(conv).map(([n]) => n)).toEqual([11, 12]);
  });
});

describe("a session opened on a conversation new to the process", () => {
  it("finds what its commands chose from the window's events file, and keeps the events for its first turn", async () => {
    const { agent, conv } = await conversation();
    // A model chosen within the window, by a writer that takes no lock, then a turn after it.
    await appendEvent(conv, { v: 1, kind: "command", name: "/model:set", model: "scripted-2", time: new Date().toISOString() });
    await turn(agent, "long", "after the choice");
    forgetProcessState();
    readStats.files = 0;
    const chosen = conversationChoices(conv);
    expect(chosen.model).toBe("scripted-2");
    // The file, and the events it holds first and last: not the window's hundred files.
    expect(readStats.files).toBeLessThanOrEqual(3 + WINDOW_FILE_LAG);
    // The turn reads those after the file's last line only (the open read them, not kept).
    readStats.files = 0;
    const history = await History.load(conv, () => Promise.resolve(readMark(conv)!.budget));
    expect(readStats.files).toBeLessThan(WINDOW_FILE_LAG);
    expect(history.model).toBe("scripted-2");
    // The same as from the events' own files.
    rmSync(conv.windowEvents);
    forgetProcessState();
    expect(conversationChoices(conv)).toEqual(chosen);
  });
});

describe("what is planted there is read as far as it holds, never past the events on disk", () => {
  /** A fresh load's events from `from`, as History reads them (the file first). */
  function freshRead(conv: ConversationPaths, from: number): Numbered[] {
    forgetEvents();
    readWindowFile(conv, from);
    return readEventsFrom(conv, from);
  }

  it("refuses a link, a FIFO, a hard link, a folder and a file of 1 GB, reading the events' files, and replaces the link and the hard link's name", async () => {
    const { agent, conv } = await conversation();
    const good = readFileSync(conv.windowEvents, "utf8");
    const outside = join(agent.dir, "outside.jsonl");
    const plant: Record<string, () => void> = {
      link: () => {
        writeFileSync(outside, good);
        symlinkSync(outside, conv.windowEvents);
      },
      fifo: () => execFileSync("mkfifo", [conv.windowEvents]),
      "hard link": () => {
        writeFileSync(outside, good);
        linkSync(outside, conv.windowEvents);
      },
      folder: () => mkdirSync(conv.windowEvents),
      "1 GB": () => {
        writeFileSync(conv.windowEvents, good);
        truncateSync(conv.windowEvents, 1024 ** 3);
      },
    };
    for (const [what, make] of Object.entries(plant)) {
      rmSync(conv.windowEvents, { recursive: true, force: true });
      rmSync(outside, { force: true });
      make();
      const from = readMark(conv)!.event;
      const truth = fromFiles(conv, from);
      readStats.files = 0;
      expect(freshRead(conv, from), what).toEqual(truth);
      expect(readStats.files, what).toBe(truth.length);
      const { warnings } = await turn(agent, "long", `after the ${what}`);
      if (what === "folder") {
        // Not replaced: the turn says so, as for the copy; its answer is stored all the same.
        expect(warnings.join("\n")).toMatch(/derived files/);
        continue;
      }
      // A file of its own now, and what the link or the other name pointed at as it was.
      const st = statSync(conv.windowEvents);
      expect(st.isFile() && st.nlink === 1).toBe(true);
      if (what === "link" || what === "hard link") expect(readFileSync(outside, "utf8")).toBe(good);
    }
  });

  it("leaves out a file whose first or last event is not its file's (another conversation's, or past the events on disk)", async () => {
    const { conv } = await conversation();
    const from = readMark(conv)!.event;
    const truth = fromFiles(conv, from);
    const good = readFileSync(conv.windowEvents, "utf8");
    const held = lines(conv);
    // One event more than the folder holds.
    const extra = held.at(-1)!;
    writeFileSync(conv.windowEvents, good + windowLine(extra[0] + 1, Event.parse(extra[1])));
    expect(freshRead(conv, from)).toEqual(truth);
    // Another conversation's lines at the same numbers: the same shapes, another text.
    writeFileSync(conv.windowEvents, good.replaceAll('"text":"', '"text":"other '));
    expect(freshRead(conv, from)).toEqual(truth);
  });

  it("fuzzed: any bytes there give events of the schema, numbered on from the load's start; a file cut or with lines added gives the events' own", () => {
    const agent = agentWith();
    const conv = paths(agent).conversation("fuzzed");
    fill(conv, 120);
    const truth = fromFiles(conv, 1);
    const good = truth.map((e) => windowLine(e.n, e.event));
    const bytes = Buffer.from(good.join(""));
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 60 }),
        fc.oneof(
          // Cut anywhere: read as far as it holds.
          fc.record({ kind: fc.constant("cut" as const), at: fc.nat({ max: bytes.length }) }),
          // Lines of garbage, or of events out of their place, put between two lines.
          fc.record({
            kind: fc.constant("lines" as const),
            after: fc.nat({ max: good.length }),
            insert: fc.oneof(fc.string(), fc.constantFrom("\n", "[5,{}]\n", '[61,{"v":1}]\n', "[1,null]\n", "[]\n", "[0001,{}]\n", good[3]!, good[100]! + good[100]!)),
          }),
          // Bytes changed anywhere: events of the schema still, in order, never past the folder's.
          fc.record({ kind: fc.constant("flip" as const), flips: fc.array(fc.tuple(fc.nat({ max: bytes.length - 1 }), fc.integer({ min: 0, max: 255 })), { minLength: 1, maxLength: 8 }) }),
        ),
        (from, change) => {
          let planted: Buffer;
          if (change.kind === "cut") planted = bytes.subarray(0, change.at);
          else if (change.kind === "lines") planted = Buffer.from([...good.slice(0, change.after), change.insert, ...good.slice(change.after)].join(""));
          else {
            planted = Buffer.from(bytes);
            for (const [at, value] of change.flips) planted[at] = value;
          }
          writeFileSync(conv.windowEvents, planted);
          const read = freshRead(conv, from);
          expect(read.map((e) => e.n)).toEqual(truth.slice(from - 1).map((e) => e.n));
          for (const e of read) expect(Event.safeParse(e.event).success).toBe(true);
          if (change.kind !== "flip") expect(read).toEqual(truth.slice(from - 1));
        },
      ),
      { numRuns: 300, ...seed },
    );
  });
});

describe("a daemon new to the conversation at every turn", () => {
  it("sends each request as the one before it and its answer until a drop, reading the window's events file the turn before left", async () => {
    assertBuilt(["dist/daemon/lnk-link-harness.cjs"], ["store", "turn", "acp", "daemon"]);
    const agent = agentWith();
    configure(agent.dir, scriptedSettings(server.url, { window: { max: 3_000, answer: 200, margin: 100 } }));
    const requests: RecordedRequest[] = [];
    const inodes: number[] = [];
    let sessionId: string | undefined;
    for (let i = 0; i < 40; i++) {
      const d = watched(startDaemon(["--agent", agent.dir]), cleanup);
      const c = await openClient(stdioStream(d.child));
      if (sessionId === undefined) sessionId = (await c.agent.request(acp.methods.agent.session.new, { cwd: agent.dir, mcpServers: [] })).sessionId;
      else await c.agent.request(acp.methods.agent.session.load, { sessionId, cwd: agent.dir, mcpServers: [] });
      const asked = server.requests.length;
      const answer = await c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: `question ${i} ${"dolor sit amet ".repeat(8)}` }] });
      expect(answer.stopReason).toBe("end_turn");
      expect(server.requests.length).toBe(asked + 1);
      requests.push(server.requests.at(-1)!);
      c.close();
      // Stopped as Link stops it: the turn's derived files are brought up to date first.
      expect(await d.stop()).toMatchObject({ code: 0 });
      inodes.push(statSync(paths(agent).conversation(sessionId).windowEvents).ino);
    }
    let drops = 0;
    for (let i = 1; i < requests.length; i++) {
      const before = messages(requests[i - 1]!);
      const now = messages(requests[i]!);
      expect(now[0]).toEqual(before[0]);
      if (JSON.stringify(now.slice(0, before.length)) === JSON.stringify(before)) continue;
      drops++;
      // A drop: the window starts at a message the request before held, and holds the rest of it.
      const at = before.findIndex((m) => JSON.stringify(m) === JSON.stringify(now[1]));
      expect(at).toBeGreaterThan(1);
      expect(now.slice(1, 1 + before.length - at)).toEqual(before.slice(at));
    }
    expect(drops).toBeGreaterThanOrEqual(1);
    // Each process read the file the one before it left whole, and added to it: made again only
    // when the window dropped (and once at the first turn, which found none).
    const made = inodes.filter((ino, k) => k === 0 || ino !== inodes[k - 1]).length;
    expect(made).toBeLessThanOrEqual(drops + 1);
    const conv = paths(agent).conversation(sessionId!);
    const held = lines(conv);
    const files = fromFiles(conv, held[0]![0]);
    expect(held.map(([n, e]) => [n, e])).toEqual(files.slice(0, held.length).map((e) => [e.n, e.event]));
  });
});
