// quickEvent, the store's check of the plainest messages it reads, against the events' schema:
// whatever it takes, the schema takes too (it never lets through what the schema refuses), over
// messages made valid and then changed at random, each as an object and as JSON read back; and
// it does take the events turns write, so reading a long conversation afresh uses it.
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { Event, quickEvent, quickEventText, SECTION_NAMES, STOP_REASONS } from "../protocol/index.js";
import { paths, writeSettings } from "../store/index.js";
import { runTurn } from "../turn/turn.js";
import { prefillEvent } from "./bench/agent.js";
import { scratch } from "./fixtures/scratch.js";

const hex12 = fc.stringMatching(/^[0-9a-f]{12}$/);
const time = fc.oneof(
  fc.date({ min: new Date("1970-01-01T00:00:00Z"), max: new Date("2999-12-31T23:59:59Z"), noInvalidDate: true }).map((d) => d.toISOString()),
  fc.constantFrom("2026-12-01T10:00:00+01:00", "2026-02-29T00:00:00Z", "2024-02-29T00:00:00Z", "2026-12-01T10:00:00", "2026-12-01 10:00:00Z", "2026-13-01T00:00:00Z", "2026-12-01T24:00:00Z", "2026-12-01T10:00:00.5-23:59", ""),
  fc.string(),
);
/** Numbers the schema's checks tell apart: whole, not, negative, not finite, past the safe integers. */
const number = fc.oneof(fc.nat(), fc.integer(), fc.double(), fc.constantFrom(0, -0, -1, 1.5, 2 ** 53, 2 ** 53 - 1, Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY));
const anything = fc.oneof(fc.jsonValue(), number, fc.constant(undefined), fc.constant(null), fc.string());

const user = fc.record(
  {
    v: fc.constant(1),
    time,
    kind: fc.constant("message"),
    role: fc.constant("user"),
    text: fc.string(),
    header: fc.string(),
    channel: fc.string(),
    cwd: fc.string(),
  },
  { requiredKeys: ["v", "time", "kind", "role", "text", "header"] },
);
const prints = fc.record({
  sections: fc.dictionary(fc.oneof(fc.constantFrom(...SECTION_NAMES), fc.string()), fc.oneof(hex12, fc.string()), { maxKeys: 4 }),
  window: fc.oneof(hex12, fc.string()),
});
const assistant = fc.record(
  {
    v: fc.constant(1),
    time,
    kind: fc.constant("message"),
    role: fc.constant("assistant"),
    text: fc.string(),
    model: fc.string(),
    provider: fc.string(),
    response_id: fc.string(),
    usage: fc.oneof(fc.record({ in: fc.nat(), out: fc.nat(), cached: fc.nat() }), fc.record({ in: number, out: number, cached: number }, { requiredKeys: [] })),
    latency_ms: number,
    cost: number,
    stop: fc.oneof(fc.constantFrom(...STOP_REASONS), fc.string()),
    prompt: prints,
  },
  { requiredKeys: ["v", "time", "kind", "role", "text", "model", "provider", "latency_ms", "stop"] },
);

/** The object with its keys, and its objects' keys, in an order of `seed`'s (as a writer may build them). */
function shuffled(v: unknown, seed: number): unknown {
  if (typeof v !== "object" || v === null || Array.isArray(v)) return v;
  let state = seed >>> 0 || 1;
  const keys = Object.keys(v).map((k) => {
    state = (Math.imul(state, 1_103_515_245) + 12_345) >>> 0;
    return [state, k] as const;
  });
  const out: Record<string, unknown> = {};
  for (const [, k] of keys.sort((a, b) => a[0] - b[0])) out[k] = shuffled((v as Record<string, unknown>)[k], state + k.length);
  return out;
}

/** A message changed at random: a key dropped, one added, one given any value, or none; its keys in any order. */
const changed = fc
  .tuple(fc.oneof(user, assistant), fc.constantFrom("none", "drop", "add", "set", "nest"), fc.string(), anything, fc.nat(), fc.integer())
  .map(([m, how, key, value, at, seed]) => {
    const o: Record<string, unknown> = { ...m };
    const keys = Object.keys(o);
    const some = keys[at % keys.length] as string;
    if (how === "drop") delete o[some];
    else if (how === "add") o[key] = value;
    else if (how === "set") o[some] = value;
    else if (how === "nest" && typeof o.usage === "object") o.usage = { ...(o.usage as object), [key]: value };
    else if (how === "nest" && typeof o.prompt === "object") o.prompt = { ...(o.prompt as object), [key]: value };
    const out = shuffled(o, seed);
    // Half of them with what a turn keeps on an event it counted (a symbol key, as turn/derived.ts sets).
    if (seed % 2 !== 0) Object.defineProperty(out, Symbol("counted"), { value: seed });
    return out;
  });

describe("quickEvent never takes what the events' schema refuses, and writes what it takes as the schema would", () => {
  it("over valid messages changed at random, their keys in any order, as objects and as JSON read back", () => {
    let taken = 0;
    fc.assert(
      fc.property(changed, (o) => {
        const forms: unknown[] = [o];
        try {
          forms.push(JSON.parse(JSON.stringify(o)));
        } catch {
          // Not JSON (a number it can't hold is written as null): the object alone.
        }
        for (const form of forms) {
          if (!quickEvent(form)) {
            expect(quickEventText(form)).toBeUndefined();
            continue;
          }
          taken++;
          const parsed = Event.safeParse(form);
          expect(parsed.success, JSON.stringify(form)).toBe(true);
          // And written as the schema's parse would write it, byte for byte, whatever its keys' order.
          expect(quickEventText(form)).toBe(JSON.stringify(parsed.data));
        }
      }),
      { numRuns: 3000 },
    );
    // It took a good share of them: the property is about something.
    expect(taken).toBeGreaterThan(300);
  });

  it("writes an answer built in its own order as the schema's parse does: the keys of it, its usage and its prints", () => {
    const answer = {
      stop: "end_turn",
      prompt: { window: "0123456789ab", sections: { notes: "0123456789ab", base: "0123456789ab" } },
      usage: { cached: 0, out: 2, in: 10 },
      latency_ms: 12,
      provider: "p",
      model: "m",
      text: "Hi.",
      role: "assistant",
      kind: "message",
      time: "2026-12-01T10:00:00.000Z",
      v: 1,
    };
    expect(quickEventText(answer)).toBe(JSON.stringify(Event.parse(answer)));
    expect(quickEventText(answer)).toBe(
      '{"v":1,"time":"2026-12-01T10:00:00.000Z","kind":"message","role":"assistant","text":"Hi.","model":"m","provider":"p","usage":{"in":10,"out":2,"cached":0},"latency_ms":12,"prompt":{"sections":{"notes":"0123456789ab","base":"0123456789ab"},"window":"0123456789ab"},"stop":"end_turn"}',
    );
  });

  it("refuses what is not a plain message, whatever the schema says of it: the schema decides", () => {
    for (const v of [null, 1, "x", [], [{ v: 1 }], Object.create(null), new Date()]) expect(quickEvent(v)).toBe(false);
    const m = prefillEvent(1, Date.UTC(2026, 0, 1));
    expect(quickEvent(m)).toBe(true);
    // A key it does not check itself: the schema's to judge, valid or not.
    expect(quickEvent({ ...m, parts: [{ type: "text", text: "x" }] })).toBe(false);
    expect(quickEvent({ ...m, __proto__: { v: 1 } })).toBe(false);
    expect(quickEvent(JSON.parse(`{"__proto__":1,${JSON.stringify(m).slice(1)}`))).toBe(false);
  });
});

describe("quickEvent takes the events turns write", () => {
  const { server, folder } = scratch("lh-quick-");

  it("each user message and answer of a conversation, as read from its files, and the bench's", async () => {
    const dir = folder();
    const agent = { dir };
    writeSettings(agent, { model: { provider: "test", name: "scripted-1", base_url: server().url } });
    for (const text of ["hello", "and again", "a third"]) {
      const outcome = await runTurn({ agent, thread: "t", message: { text, channel: "telegram" } }, () => undefined);
      expect(outcome.stop).toBe("end_turn");
    }
    const conv = paths(agent).conversation("t");
    const events = readdirSync(conv.dir)
      .filter((f) => /^\d{12}\.json$/.test(f))
      .map((f) => z.record(z.string(), z.unknown()).parse(JSON.parse(readFileSync(join(conv.dir, f), "utf8"))));
    expect(events.filter((e) => e.kind === "message").length).toBe(6);
    for (const e of events) if (e.kind === "message") expect(quickEvent(e), JSON.stringify(e)).toBe(true);
    for (let n = 1; n <= 20; n++) expect(quickEvent(JSON.parse(JSON.stringify(prefillEvent(n, Date.UTC(2026, 0, 1)))))).toBe(true);
  });

  it("a turn's question and answer are written without the schema, as the turn holds them (what it counted of them kept on them)", async () => {
    const agent = { dir: folder() };
    writeSettings(agent, { model: { provider: "test", name: "scripted-1", base_url: server().url } });
    await runTurn({ agent, thread: "t", message: { text: "first", cwd: agent.dir } }, () => undefined);
    const parse = Event.safeParse.bind(Event);
    const asked: unknown[] = [];
    Event.safeParse = ((data: unknown, params?: Parameters<typeof parse>[1]) => {
      asked.push(data);
      return parse(data, params);
    }) as typeof Event.safeParse;
    try {
      expect((await runTurn({ agent, thread: "t", message: { text: "again", cwd: agent.dir } }, () => undefined)).stop).toBe("end_turn");
    } finally {
      Event.safeParse = parse;
    }
    // Read back from the cache, written through quickEventText: the schema asked of nothing.
    expect(asked.map((e) => JSON.stringify(e))).toEqual([]);
  });
});
