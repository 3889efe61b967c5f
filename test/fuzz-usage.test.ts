// A conversation's events, fuzzed, as `usage` reads them: answers with and without counts, costs and
// fingerprints, questions, tool results, and hostile files among them (not JSON, an answer's head on
// a body that fails its schema, a question's head on anything, links, FIFOs, folders). Each time the
// figures are the sums of the answers, or the read fails with one line naming the first bad file,
// never quoting it; the built command says the same in one line and exits 1.
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AgentUsage, StoreError, UsageCountState, type AssistantMessage, type Event } from "../protocol/index.js";
import { paths } from "../store/index.js";
import { conversationUsage, totalUsage, UsageCount } from "../turn/usage.js";
import { assertBuilt, BIN, MAIN } from "./fixtures/built.js";

const SECRET = `SECRET-${Math.random().toString(36).slice(2)}`;

type Entry =
  | { kind: "answer"; usage?: { in: number; out: number; cached: number }; cost?: number; prints: boolean; latency: number; text: string }
  | { kind: "question"; text: string }
  | { kind: "tool_result"; text: string }
  | { kind: "garbage" }
  | { kind: "bad answer" }
  | { kind: "odd question" }
  | { kind: "reordered answer"; usage: { in: number; out: number; cached: number } }
  | { kind: "link" }
  | { kind: "fifo" }
  | { kind: "folder" };

const count = fc.nat({ max: 2_000_000 });
const entry: fc.Arbitrary<Entry> = fc.oneof(
  { weight: 6, arbitrary: fc.record({ kind: fc.constant("answer" as const), usage: fc.option(fc.record({ in: count, out: count, cached: count }), { nil: undefined }), cost: fc.option(fc.double({ min: 0, max: 10, noNaN: true }), { nil: undefined }), prints: fc.boolean(), latency: fc.nat({ max: 100_000 }), text: fc.string({ maxLength: 5_000 }) }, { requiredKeys: ["kind", "prints", "latency", "text"] }) },
  { weight: 4, arbitrary: fc.record({ kind: fc.constant("question" as const), text: fc.string({ maxLength: 6_000 }) }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant("tool_result" as const), text: fc.string({ maxLength: 6_000 }) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("reordered answer" as const), usage: fc.record({ in: count, out: count, cached: count }) }) },
  { weight: 1, arbitrary: fc.constantFrom<Entry>({ kind: "garbage" }, { kind: "bad answer" }, { kind: "odd question" }, { kind: "link" }, { kind: "fifo" }, { kind: "folder" }) },
);

const TIME = "2026-11-30T12:00:00.000Z";
const print = "0123456789ab";

function answer(e: Extract<Entry, { kind: "answer" }>): AssistantMessage {
  return {
    v: 1,
    time: TIME,
    kind: "message",
    role: "assistant",
    text: e.text,
    model: "m",
    provider: "p",
    ...(e.usage ? { usage: e.usage } : {}),
    latency_ms: e.latency,
    ...(e.cost !== undefined ? { cost: e.cost } : {}),
    ...(e.prints ? { prompt: { sections: { base: print }, window: print } } : {}),
    stop: "end_turn",
  };
}

/** Writes the entry as event `n`; says whether reading it must fail. */
function plant(file: string, e: Entry, outside: string): boolean {
  const json = (event: Event | Record<string, unknown>) => writeFileSync(file, `${JSON.stringify(event)}\n`);
  switch (e.kind) {
    case "answer":
      json(answer(e));
      return false;
    case "question":
      json({ v: 1, time: TIME, kind: "message", role: "user", text: e.text, header: "[h]" });
      return false;
    case "tool_result":
      json({ v: 1, time: TIME, kind: "tool_result", call_id: "c", tool: "t__x", text: e.text, error: false });
      return false;
    case "reordered answer":
      // Keys in another order than the store writes them: read whole and checked by its schema.
      json({ role: "assistant", kind: "message", v: 1, time: TIME, text: "", model: "m", provider: "p", usage: e.usage, latency_ms: 1, stop: "end_turn" });
      return false;
    case "garbage":
      writeFileSync(file, `{"v":1,"time":"${TIME}","kind":"message","role":"assistant", ${SECRET}`);
      return true;
    case "bad answer":
      json({ v: 1, time: TIME, kind: "message", role: "assistant", text: SECRET, usage: { in: -1 } });
      return true;
    case "odd question":
      // Only an answer is read whole: a question's head is all the figures need of it.
      writeFileSync(file, `{"v":1,"time":"${TIME}","kind":"message","role":"user" ${SECRET}`);
      return false;
    case "link":
      symlinkSync(outside, file);
      return true;
    case "fifo":
      spawnSync("mkfifo", [file]);
      return true;
    case "folder":
      mkdirSync(file);
      return true;
    default: {
      const never: never = e;
      return never;
    }
  }
}

let root: string;
beforeAll(() => {
  assertBuilt([BIN, "dist/daemon/usage.js", "dist/turn/usage.js", "dist/store/answers.js"], ["daemon", "turn", "store", "protocol"]);
  root = mkdtempSync(join(tmpdir(), "lnk-fuzz-usage-"));
});
afterAll(() => {
  if (root) rmSync(root, { recursive: true, force: true });
});

describe("usage over fuzzed events", () => {
  it("sums the answers, or fails in one line naming the first bad file, never quoting it", { timeout: 120_000 }, () => {
    const outside = join(root, "outside.json");
    writeFileSync(outside, JSON.stringify({ v: 1, time: TIME, kind: "message", role: "assistant", text: SECRET, model: "m", provider: "p", latency_ms: 1, stop: "end_turn" }));
    let runs = 0;
    fc.assert(
      fc.property(fc.array(entry, { maxLength: 30 }), fc.constantFrom("none", "garbage", "stale", "fifo", "link"), (entries, left) => {
        runs++;
        const dir = join(root, `agent-${runs}`);
        const conv = paths({ dir }).conversation("t");
        mkdirSync(conv.dir, { recursive: true });
        let bad: number | undefined;
        entries.forEach((e, i) => {
          if (plant(conv.event(i + 1), e, outside) && bad === undefined) bad = i + 1;
        });
        // What an earlier count left, or something planted in its place: never believed unless it is of these events.
        if (left === "garbage") writeFileSync(conv.usage, `{"v":1,"through":1, ${SECRET}`);
        if (left === "fifo") spawnSync("mkfifo", [conv.usage]);
        // A link is refused, as everywhere in the folder, even where the file is derived.
        if (left === "link") symlinkSync(outside, conv.usage);
        if (left === "stale") {
          const count = { turns: 9, requests: 9, tokens: { in: 9, out: 9, cached: 9 }, turns_without_cost: 9, requests_without_cost: 9, model_ms: 9, slowest: [], falls: [] };
          writeFileSync(conv.usage, JSON.stringify({ v: 1, through: 1, time: "2001-01-01T00:00:00.000Z", count }));
        }
        const good = (bad === undefined ? entries : entries.slice(0, bad - 1)).filter((e) => e.kind === "answer" || e.kind === "reordered answer");
        let first: ReturnType<typeof conversationUsage> | undefined;
        try {
          const u = conversationUsage(conv);
          first = u;
          expect(bad).toBeUndefined();
          expect(left).not.toBe("link");
          expect(u.requests).toBe(good.length);
          const sum = (f: (e: (typeof good)[number]) => number) => good.reduce((s, e) => s + f(e), 0);
          expect(u.tokens).toEqual({ in: sum((e) => e.usage?.in ?? 0), out: sum((e) => e.usage?.out ?? 0), cached: sum((e) => e.usage?.cached ?? 0) });
          const costs = good.filter((e): e is Extract<Entry, { kind: "answer" }> => e.kind === "answer" && e.cost !== undefined);
          if (costs.length === 0) expect(u).not.toHaveProperty("cost");
          else expect(u.cost).toBeCloseTo(costs.reduce((s, e) => s + (e.cost ?? 0), 0), 9);
          expect(u.requests_without_cost).toBe(good.length - costs.length);
          for (const f of u.falls) expect(f.share).toBeLessThan(f.previous);
        } catch (e) {
          if (!(e instanceof StoreError)) throw e;
          const at = left === "link" ? conv.usage : conv.event(bad ?? 0);
          if (left !== "link") expect(bad, e.message).toBeDefined();
          expect(e.message).toContain(at);
          expect(e.message).not.toMatch(/\n/);
          expect(e.message).not.toContain(SECRET);
        }
        // Counted again from what it kept: the same figures.
        if (first) expect(conversationUsage(conv)).toEqual(first);
        // The command says the same, in one line, a few times over.
        if (runs % 25 === 0) {
          const r = spawnSync(process.execPath, [MAIN, "usage", "--agent", dir, "t", "--json"], { encoding: "utf8", timeout: 30_000 });
          if (bad === undefined && left !== "link") {
            expect(r.status, r.stderr).toBe(0);
            expect(AgentUsage.parse(JSON.parse(r.stdout)).conversations[0]).toEqual(conversationUsage(conv));
          }
          else {
            expect(r.status).toBe(1);
            expect(r.stderr).toMatch(/^lnk-link-harness: [^\n]+\n$/);
            expect(r.stderr).not.toContain(SECRET);
          }
        }
      }),
      { numRuns: 150 },
    );
  });
});

describe("usage sums of any numbers an answer event may hold, fuzzed", () => {
  it("stay whole counts and finite amounts, exact while they fit, and a count that can be kept", () => {
    const big = fc.oneof(fc.nat({ max: 1_000 }), fc.constantFrom(Number.MAX_SAFE_INTEGER, Number.MAX_SAFE_INTEGER - 1, 2 ** 52), fc.maxSafeNat());
    const amount = fc.oneof(fc.double({ min: 0, max: 10, noNaN: true }), fc.constantFrom(Number.MAX_VALUE, Number.MAX_VALUE / 2), fc.double({ min: 0, noNaN: true, noDefaultInfinity: true }));
    const answerOf = fc.record({ usage: fc.option(fc.record({ in: big, out: big, cached: big }), { nil: undefined }), cost: fc.option(amount, { nil: undefined }), latency: amount });
    fc.assert(
      fc.property(fc.array(fc.array(answerOf, { minLength: 1, maxLength: 6 }), { minLength: 1, maxLength: 3 }), (conversations) => {
        const figures = conversations.map((sent, c) => {
          const count = new UsageCount(`t${c}`);
          count.add({ n: 1, kind: "turn", time: TIME });
          sent.forEach((a, i) => count.add({ n: i + 2, kind: "answer", answer: answer({ kind: "answer", prints: false, text: "", ...a }) }));
          // What usage.json keeps is of its schema.
          expect(UsageCountState.safeParse(count.state()).success).toBe(true);
          return count.figures();
        });
        const all = conversations.flat();
        for (const f of [...figures, totalUsage(figures)]) {
          for (const n of [f.tokens.in, f.tokens.out, f.tokens.cached]) expect(Number.isSafeInteger(n)).toBe(true);
          for (const n of [f.cost ?? 0, f.model_ms]) expect(Number.isFinite(n)).toBe(true);
          expect(() => AgentUsage.parse({ conversations: figures, total: totalUsage(figures) })).not.toThrow();
        }
        const exact = all.reduce((s, a) => s + (a.usage?.in ?? 0), 0);
        if (exact <= Number.MAX_SAFE_INTEGER) expect(totalUsage(figures).tokens.in).toBe(exact);
        else expect(totalUsage(figures).tokens.in).toBe(Number.MAX_SAFE_INTEGER);
      }),
      { numRuns: 2_000 },
    );
  });
});
