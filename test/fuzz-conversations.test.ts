// `conversations move in` and the THREAD arguments of `conversation` and `conversations move out`,
// fuzzed over the built command line: any input is taken whole (every session a new conversation)
// or refused in one line with nothing written; any THREAD names a conversation the agent has or is
// refused in one line.
import { execFileSync, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { lutimesSync, mkdirSync, readFileSync, readdirSync, readlinkSync, symlinkSync, writeFileSync } from "node:fs";
import { hostname } from "node:os";
import { join } from "node:path";
import fc from "fast-check";
import { z } from "zod";
import { describe, expect, it } from "vitest";
import { AspState, SessionForm } from "../protocol/index.js";
import { BIN } from "./fixtures/built.js";
import { cliAgents } from "./fixtures/cli-agents.js";

const seed = process.env.FC_SEED ? { seed: Number(process.env.FC_SEED) } : {};
const agents = cliAgents("lnk-fuzz-conversations-", [BIN, "dist/daemon/conversations-move.js", "dist/daemon/conversation.js"], ["daemon", "asp", "store", "protocol"]);

const time = "2026-01-02T03:04:05.000Z";
const user = { v: 1, time, kind: "message", role: "user", text: "hi", header: "[Fri 2026-01-02 03:04]" };
const answer = { v: 1, time, kind: "message", role: "assistant", text: "Hello.", model: "m", provider: "p", latency_ms: 5, stop: "end_turn" };
let serial = 0;
const command = { v: 1, time, kind: "command", name: "/model:set", model: "big", text: "/model big" };

/** A value of any JSON shape, or one that looks nearly right. */
const anyValue: fc.Arbitrary<unknown> = fc.oneof(fc.jsonValue(), fc.constantFrom(null, "", "../x", -1, 1.5, [], {}, "__proto__"));

/** An event: a good one, or a good one with one field changed to anything, or dropped. */
const event: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 3, arbitrary: fc.constantFrom<Record<string, unknown>>(user, answer, command) },
  {
    weight: 1,
    arbitrary: fc.tuple(fc.constantFrom<Record<string, unknown>>(user, answer, command), fc.string({ maxLength: 12 }), anyValue, fc.boolean()).map(([e, key, value, drop]) => {
      const k = Object.keys(e).includes(key) || key.length === 0 ? key : (Object.keys(e)[key.length % Object.keys(e).length] ?? key);
      const copy: Record<string, unknown> = { ...e };
      if (drop) delete copy[k];
      else copy[k] = value;
      return copy;
    }),
  },
  { weight: 1, arbitrary: anyValue },
);

/** A thread's name: a usual one, a hostile one, or any text. */
const threadName = fc.oneof(fc.constantFrom("t", "chat-1", "../x", "/etc", ".hidden", "a/b", "x\u202Ey", "a~b", "t~main", ""), fc.string({ maxLength: 20, unit: "binary" }));

const session: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 4, arbitrary: fc.record({ thread: threadName, events: fc.array(event, { maxLength: 4 }) }) },
  { weight: 1, arbitrary: fc.record({ thread: threadName, events: anyValue, extra: anyValue }, { requiredKeys: [] }) },
  { weight: 1, arbitrary: anyValue },
);

/** A State of whole sessions, each under a thread name of its own: one move in takes. */
const wholeState: fc.Arbitrary<string> = fc
  .uniqueArray(fc.stringMatching(/^[a-z0-9][a-z0-9-]{0,11}$/), { maxLength: 3 })
  .chain((threads) => fc.tuple(...threads.map((thread) => fc.record({ thread: fc.constant(thread), events: fc.array(fc.constantFrom<Record<string, unknown>>(user, answer, command), { maxLength: 4 }) }))))
  .map((sessions) => JSON.stringify({ sessions }));

/** What move in is given: a State of sessions, one session, or anything at all, as JSON or not. */
const input: fc.Arbitrary<string> = fc.oneof(
  { weight: 2, arbitrary: wholeState },
  { weight: 4, arbitrary: fc.array(session, { maxLength: 4 }).map((sessions) => JSON.stringify({ sessions })) },
  { weight: 1, arbitrary: session.map((s) => JSON.stringify(s) ?? "") },
  { weight: 1, arbitrary: fc.record({ sessions: anyValue, instructions: anyValue, notes: anyValue }, { requiredKeys: [] }).map((s) => JSON.stringify(s)) },
  { weight: 1, arbitrary: fc.string({ maxLength: 40 }) },
);

function listing(dir: string): string[] {
  try {
    return readdirSync(join(dir, "chats"), { recursive: true }).map(String).sort();
  } catch {
    return [];
  }
}

describe("conversations, fuzzed", { timeout: 180_000 }, () => {
  it("move in takes every session whole, or refuses in one line and writes nothing", async () => {
    const seen = { taken: 0, refused: 0 };
    await fc.assert(
      fc.asyncProperty(input, async (text) => {
        const dir = agents.folder();
        const r = await agents.cli(["conversations", "move", "in", "--agent", dir], text);
        if (r.code === 0) {
          seen.taken += 1;
          const raw: unknown = JSON.parse(text);
          const sessions = SessionForm.array().parse(SessionForm.safeParse(raw).success ? [raw] : (AspState.parse(raw).sessions ?? []));
          const answer = z.object({ imported: z.array(z.object({ as: z.string(), events: z.number() }).loose()) }).loose().parse(JSON.parse(r.stdout));
          expect(answer.imported.map((i) => i.events)).toEqual(sessions.map((s) => s.events.length));
          // Each written whole, and the same sessions come out again under the threads they were given.
          const out = await agents.cli(["conversations", "move", "out", "--agent", dir, ...answer.imported.map((i) => i.as)]);
          expect(out.code, out.stderr).toBe(0);
          expect((AspState.parse(JSON.parse(out.stdout)).sessions ?? []).map((s) => s.events)).toEqual(sessions.map((s) => s.events));
        } else {
          seen.refused += 1;
          expect(r.code, r.stderr).toBe(2);
          expect(r.stdout).toBe("");
          expect(r.stderr).toMatch(/^lnk-link-harness: [^\n]+\n$/);
          expect(listing(dir)).toEqual([]);
        }
      }),
      { numRuns: 40, ...seed },
    );
    // Both ways were tried.
    expect(seen.taken).toBeGreaterThan(0);
    expect(seen.refused).toBeGreaterThan(0);
  });

  it("move in takes every State of whole sessions, each under a thread of its own", async () => {
    await fc.assert(
      fc.asyncProperty(wholeState, async (text) => {
        const r = await agents.cli(["conversations", "move", "in", "--agent", agents.folder()], text);
        expect(r.code, r.stderr).toBe(0);
      }),
      { numRuns: 15, ...seed },
    );
  });

  it("move in gives sessions of the same threads each a name of its own, never one that is there, and leaves what is there as it was", async () => {
    // Long names are cut to take their -<k>: two threads may then share their names past the first.
    const long = "l".repeat(126);
    const thread = fc.constantFrom("t", "t-2", "t-3", long, `${long}x`, `${long}-2`);
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.record({ thread, events: fc.array(fc.constantFrom<Record<string, unknown>>(user, answer, command), { maxLength: 2 }) }), { minLength: 1, maxLength: 12 }),
        fc.uniqueArray(fc.tuple(thread, fc.integer({ min: 1, max: 6 })).map(([t, k]) => (k === 1 ? t : `${t.slice(0, 124)}-${k}`)), { maxLength: 5 }),
        async (sessions, there) => {
          const dir = agents.folder();
          for (const name of there) {
            mkdirSync(join(dir, "chats", name), { recursive: true });
            writeFileSync(join(dir, "chats", name, "000000000001.json"), `${JSON.stringify({ ...user, text: `there: ${name}` })}\n`);
          }
          const r = await agents.cli(["conversations", "move", "in", "--agent", dir], JSON.stringify({ sessions }));
          expect(r.code, r.stderr).toBe(0);
          const as = z.object({ imported: z.array(z.object({ as: z.string() }).loose()) }).loose().parse(JSON.parse(r.stdout)).imported.map((i) => i.as);
          expect(new Set(as).size).toBe(sessions.length);
          expect(as.filter((name) => there.includes(name))).toEqual([]);
          for (const name of there) expect(readFileSync(join(dir, "chats", name, "000000000001.json"), "utf8")).toBe(`${JSON.stringify({ ...user, text: `there: ${name}` })}\n`);
          const out = await agents.cli(["conversations", "move", "out", "--agent", dir, ...as]);
          expect(out.code, out.stderr).toBe(0);
          expect((AspState.parse(JSON.parse(out.stdout)).sessions ?? []).map((s) => s.events)).toEqual(sessions.map((s) => s.events));
        },
      ),
      { numRuns: 25, ...seed },
    );
  });

  it("two move ins at once, of sessions with and without events, each name their own conversations, never one the other or anything there holds", async () => {
    const thread = fc.constantFrom("t", "t-2", "u");
    const sessions = fc.array(fc.record({ thread, events: fc.array(fc.constantFrom<Record<string, unknown>>(user, answer), { maxLength: 2 }) }), { minLength: 1, maxLength: 30 });
    await fc.assert(
      fc.asyncProperty(
        fc.tuple(sessions, sessions),
        // What is there already: an empty conversation (one of no events an import made), one with an event, a file.
        fc.uniqueArray(fc.tuple(fc.constantFrom("t", "t-2", "t-3", "t-2-2", "u-2"), fc.constantFrom("empty", "event", "file")), { maxLength: 4, selector: ([name]) => name }),
        async (both, there) => {
          const dir = agents.folder();
          mkdirSync(join(dir, "chats"), { recursive: true });
          for (const [name, kind] of there) {
            if (kind === "file") writeFileSync(join(dir, "chats", name), "not a conversation");
            else mkdirSync(join(dir, "chats", name));
            if (kind === "event") writeFileSync(join(dir, "chats", name, "000000000001.json"), `${JSON.stringify({ ...user, text: `there: ${name}` })}\n`);
          }
          // Each event's text says whose session it is, so each conversation can be told from the rest.
          const mark = (who: number) => ({ sessions: both[who]?.map((s, i) => ({ ...s, events: s.events.map((e) => ({ ...e, text: `${who} ${i}` })) })) ?? [] });
          const runs = await Promise.all([0, 1].map((who) => agents.cli(["conversations", "move", "in", "--agent", dir], JSON.stringify(mark(who)))));
          const said = new Map<string, { who: number; i: number }>();
          runs.forEach((r, who) => {
            expect(r.code, r.stderr).toBe(0);
            z.object({ imported: z.array(z.object({ as: z.string() }).loose()) })
              .loose()
              .parse(JSON.parse(r.stdout))
              .imported.forEach(({ as }, i) => {
                expect(said.has(as), `chats/${as}/ said twice`).toBe(false);
                said.set(as, { who, i });
              });
          });
          expect(said.size).toBe((both[0]?.length ?? 0) + (both[1]?.length ?? 0));
          for (const [name] of there) expect(said.has(name)).toBe(false);
          for (const [as, { who, i }] of said) {
            const events = readdirSync(join(dir, "chats", as)).sort();
            const count = both[who]?.[i]?.events.length ?? 0;
            expect(events).toEqual(Array.from({ length: count }, (_, n) => `${String(n + 1).padStart(12, "0")}.json`));
            for (const e of events) expect(readFileSync(join(dir, "chats", as, e), "utf8")).toContain(`"text":"${who} ${i}"`);
          }
        },
      ),
      { numRuns: 15, ...seed },
    );
  });

  it("move in refuses a State holding a key __proto__ at any depth of an event's loose fields, naming where, and writes nothing", async () => {
    /** A value nesting a key "__proto__" `depth` objects and arrays down, as JSON text (JSON.parse makes it an own key). */
    const nested = (depth: number, inArray: boolean[]): string =>
      Array.from({ length: depth }, (_, i) => (inArray[i] ? "[" : '{"k":')).join("") + '{"__proto__":{"x":1}}' + Array.from({ length: depth }, (_, i) => (inArray[depth - 1 - i] ? "]" : "}")).join("");
    const place = fc.constantFrom("part", "url", "details");
    await fc.assert(
      fc.asyncProperty(fc.nat({ max: 3 }), fc.nat({ max: 6 }), place, fc.array(fc.boolean(), { minLength: 6, maxLength: 6 }), fc.boolean(), async (before, depth, where, inArray, one) => {
        const value = nested(depth, inArray);
        const bad =
          where === "details"
            ? `{"v":1,"time":"${time}","kind":"message","role":"assistant","text":"yo","model":"m","provider":"p","latency_ms":0,"stop":"end_turn","thinking":{"reasoning_details":[${value}]}}`
            : where === "url"
              ? `{"v":1,"time":"${time}","kind":"message","role":"user","text":"hi","header":"h","parts":[{"type":"image_url","image_url":{"url":"data:,","more":${value}}}]}`
              : `{"v":1,"time":"${time}","kind":"message","role":"user","text":"hi","header":"h","parts":[{"type":"text","text":"x","more":${value}}]}`;
        const events = `[${[...Array.from({ length: before }, () => JSON.stringify(user)), bad].join(",")}]`;
        const text = one ? `{"thread":"t","events":${events}}` : `{"sessions":[{"thread":"a","events":[${JSON.stringify(user)}]},{"thread":"t","events":${events}}]}`;
        const dir = agents.folder();
        const r = await agents.cli(["conversations", "move", "in", "--agent", dir], text);
        expect(r.code, r.stderr).toBe(2);
        expect(r.stdout).toBe("");
        expect(r.stderr).toMatch(/^lnk-link-harness: [^\n]+: the key "__proto__" is not allowed\n$/);
        expect(r.stderr).toContain(`${one ? "" : "sessions.1."}events.${before}.`);
        expect(listing(dir)).toEqual([]);
      }),
      { numRuns: 25, ...seed },
    );
  });

  it("any THREAD names a conversation the agent has, or is refused in one line", async () => {
    const dir = agents.folder();
    mkdirSync(join(dir, "chats", "real"), { recursive: true });
    writeFileSync(join(dir, "chats", "real", "000000000001.json"), `${JSON.stringify(user)}\n`);
    const before = listing(dir);
    const named = fc.oneof(fc.constantFrom("real", "real~main", "real~x", "real~", "~main", "real~../x", "..", "real/..", "/etc/passwd", "x\u202Ey"), fc.string({ minLength: 1, maxLength: 20, unit: "binary" }));
    await fc.assert(
      fc.asyncProperty(named.filter((t) => !t.includes("\0")), fc.constantFrom("conversation", "json", "out"), async (thread, how) => {
        const args = how === "out" ? ["conversations", "move", "out", "--agent", dir, "--", thread] : ["conversation", "--agent", dir, ...(how === "json" ? ["--json"] : []), "--", thread];
        const r = await agents.cli(args);
        if (r.code === 0) {
          expect(["real", "real~main"]).toContain(thread);
          expect(r.stdout).toContain("hi");
        } else {
          expect(r.code, r.stderr).toBe(2);
          expect(r.stdout).toBe("");
          expect(r.stderr).toMatch(/^lnk-link-harness: [^\n]+\n$/);
        }
        expect(listing(dir)).toEqual(before);
      }),
      { numRuns: 40, ...seed },
    );
  });

  it("move in removes what imports killed on this machine left in chats/, and nothing else there, never through a link", async () => {
    // What the process's pids are of (lnk-link-harness-session(5)): the machine's name, its boot, the PID namespace.
    const read = (f: () => string) => {
      try {
        return f();
      } catch {
        return "";
      }
    };
    const boot = read(() => readFileSync("/proc/sys/kernel/random/boot_id", "latin1").trim());
    const host = createHash("sha256")
      .update(`${hostname()}\n${boot}\n${read(() => readlinkSync("/proc/self/ns/pid"))}`)
      .digest("hex")
      .slice(0, 8);
    const gone = spawnSync(process.execPath, ["-e", "0"]).pid as number;
    const hex = fc.stringMatching(/^[0-9a-f]{16}$/);
    /** An entry named as an import's staging folder, or nearly: whose process, and what it is. */
    const entry = fc.record({
      host: fc.constantFrom(host, "0badf00d", host.slice(0, 7)),
      pid: fc.constantFrom(gone, process.pid, 1, 0),
      hex,
      kind: fc.constantFrom("folder", "empty", "file", "link", "fifo", "nested-link"),
      // Untouched for two hours: left by an import that is surely over, whoever's.
      old: fc.boolean(),
    });
    await fc.assert(
      fc.asyncProperty(fc.uniqueArray(entry, { maxLength: 6, selector: (e) => `${e.host}-${e.pid}-${e.hex}` }), async (entries) => {
        const dir = agents.folder();
        const chats = join(dir, "chats");
        const outside = join(agents.root(), `outside-${serial++}`);
        mkdirSync(join(outside, "kept"), { recursive: true });
        writeFileSync(join(outside, "kept", "canary"), "kept");
        mkdirSync(chats, { recursive: true });
        const names = entries.map((e) => `.import-${e.host}-${e.pid}-${e.hex}`);
        entries.forEach((e, i) => {
          const at = join(chats, names[i] as string);
          if (e.kind === "folder") {
            mkdirSync(at);
            writeFileSync(join(at, "000000000001.json"), `${JSON.stringify(user)}\n`);
          } else if (e.kind === "empty") mkdirSync(at);
          else if (e.kind === "file") writeFileSync(at, "not a folder");
          else if (e.kind === "link") symlinkSync(join(outside, "kept"), at);
          else if (e.kind === "fifo") execFileSync("mkfifo", [at]);
          else {
            mkdirSync(at);
            symlinkSync(join(outside, "kept"), join(at, "000000000001.json"));
          }
          if (e.old) lutimesSync(at, new Date(Date.now() - 2 * 3600_000), new Date(Date.now() - 2 * 3600_000));
        });
        const r = await agents.cli(["conversations", "move", "in", "--agent", dir], JSON.stringify({ sessions: [{ thread: "t", events: [user, answer] }] }));
        expect(r.code, r.stderr).toBe(0);
        // Of this machine's, those of a process that is gone; any, untouched for an hour.
        const removed = (e: (typeof entries)[number]) => e.host.length === 8 && ((e.host === host && e.pid === gone) || e.old);
        expect(readdirSync(chats).sort()).toEqual(["t", ...names.filter((_, i) => !removed(entries[i] as (typeof entries)[number]))].sort());
        expect(readFileSync(join(outside, "kept", "canary"), "utf8")).toBe("kept");
        const out = await agents.cli(["conversations", "move", "out", "--agent", dir, "t"]);
        expect((AspState.parse(JSON.parse(out.stdout)).sessions ?? []).map((s) => s.events)).toEqual([[user, answer]]);
      }),
      { numRuns: 15, ...seed },
    );
  });
});
