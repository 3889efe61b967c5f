// The rough count: four ASCII characters a token, one for any other character (a surrogate pair is
// one character). The quick path for ASCII text must count as the rule does, whatever the text.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { Event, nestsWithin, THINKING_DEPTH_MAX } from "../protocol/index.js";
import { eventsToMessages } from "../turn/prompt.js";
import { eventChars, eventTokens, roughTokens } from "../turn/window.js";

const seed = process.env.FC_SEED ? { seed: Number(process.env.FC_SEED) } : {};

/** The rule, character by character. */
function byRule(text: string): number {
  let ascii = 0;
  let other = 0;
  for (const ch of text) {
    if (ch.length === 1 && ch.charCodeAt(0) < 0x80) ascii++;
    else other++;
  }
  return Math.ceil(ascii / 4) + other;
}

describe("the rough count", () => {
  it("counts any text as the rule does", () => {
    const unit = fc.oneof(fc.constantFrom("a", " ", "\n", "\u0000", "\u007f", "é", "日", "😀", "\ud800", "\udc00"), fc.string({ maxLength: 3 }));
    fc.assert(
      fc.property(fc.array(unit, { maxLength: 60 }).map((parts) => parts.join("")), (text) => {
        expect(roughTokens(text)).toBe(byRule(text));
      }),
      { numRuns: 2_000, ...seed },
    );
  });

  it("counts ASCII text a token each four characters, rounded up", () => {
    expect(roughTokens("")).toBe(0);
    expect(roughTokens("abcd")).toBe(1);
    expect(roughTokens("abcde")).toBe(2);
    expect(roughTokens("é")).toBe(1);
    expect(roughTokens("abcdé😀")).toBe(3);
  });
});

describe("an event's count and size", () => {
  const part = fc.oneof(
    fc.record({ type: fc.constant("image_url"), image_url: fc.record({ url: fc.oneof(fc.string(), fc.nat({ max: 300_000 }).map((n) => `data:image/png;base64,${"Q".repeat(n)}`)) }) }),
    fc.record({ type: fc.constant("file"), file: fc.record({ file_data: fc.string(), filename: fc.string() }, { requiredKeys: [] }) }),
    fc.record({ type: fc.constant("text"), text: fc.string() }),
  );
  const user = fc.record({ text: fc.string(), header: fc.string(), parts: fc.array(part, { maxLength: 8 }) });

  /** The characters of every string in a value: what a process holds of it at least. */
  function stringChars(value: unknown): number {
    if (typeof value === "string") return value.length;
    if (value !== null && typeof value === "object") return Object.entries(value).reduce((sum, [k, v]) => sum + k.length + stringChars(v), 0);
    return 0;
  }

  it("counts each part 1,000 tokens, or one a KiB of its data when that is more, and sizes the event at least by its strings", () => {
    fc.assert(
      fc.property(user, ({ text, header, parts }) => {
        const event = Event.parse({ v: 1, kind: "message", role: "user", time: "2026-12-02T00:00:00Z", text, header, parts });
        const data = (p: (typeof parts)[number]) => (p.type === "image_url" ? p.image_url.url : p.type === "file" ? (p.file.file_data ?? "") : p.text);
        const partsTokens = parts.reduce((sum, p) => sum + Math.max(1_000, Math.ceil(data(p).length / 1024)), 0);
        expect(eventTokens(event)).toBe(roughTokens(header) + 1 + roughTokens(text) + partsTokens);
        expect(eventChars(event)).toBeGreaterThanOrEqual(stringChars(event));
        expect(eventChars(event)).toBeLessThanOrEqual(JSON.stringify(event).length * 3 + 400);
      }),
      { numRuns: 300, ...seed },
    );
  });

  it("sizes a model's thinking of any depth, and any JSON it holds, without running out of stack", () => {
    fc.assert(
      fc.property(fc.jsonValue(), fc.nat({ max: 200_000 }), (json, depth) => {
        let nested: unknown = json;
        for (let i = 0; i < depth; i++) nested = i % 2 ? [nested] : { d: nested };
        const event = { v: 1, kind: "message", role: "assistant", time: "2026-12-02T00:00:00Z", text: "", model: "m", provider: "p", latency_ms: 1, stop: "tool_calls", thinking: { reasoning_details: [nested] } } as Event;
        expect(eventChars(event)).toBeGreaterThanOrEqual(depth * 2);
      }),
      { numRuns: 20, ...seed },
    );
  });
});

describe("what a turn keeps of an event", () => {
  it("is kept where nothing sees it, and a copy of the event carries none of it", () => {
    const event: Event = { v: 1, kind: "message", role: "user", time: "2026-12-03T10:00:00.000Z", text: "a".repeat(40), header: "[h]" };
    const json = JSON.stringify(event);
    const [first] = eventsToMessages([{ n: 1, event }], { tools: false });
    expect(eventTokens(event)).toBe(10 + 1 + 1);
    // The same event gives the same message object, which the next request's bytes are reused by.
    expect(eventsToMessages([{ n: 1, event }], { tools: false })[0]).toBe(first);
    // Nothing of it shows: not to JSON, not to the event's keys, symbols or a deep equality.
    expect(JSON.stringify(event)).toBe(json);
    expect(Reflect.ownKeys(event)).toEqual(["v", "kind", "role", "time", "text", "header"]);
    expect(event).toStrictEqual(JSON.parse(json));
    // A copy with another text is counted and sent as its own.
    const copy: Event = { ...event, text: "b".repeat(400) };
    expect(eventTokens(copy)).toBe(100 + 1 + 1);
    const [second] = eventsToMessages([{ n: 1, event: copy }], { tools: false });
    expect(second).not.toBe(first);
    expect(second?.content).toBe(`[h]\n${"b".repeat(400)}`);
    expect(eventTokens(event)).toBe(12);
  });
});

describe("how deep a provider's thinking details nest", () => {
  /** The depth by recursion: arrays and objects, a value inside none 0. */
  const depthOf = (v: unknown): number => (v !== null && typeof v === "object" ? 1 + Math.max(0, ...(Array.isArray(v) ? v : Object.values(v)).map(depthOf)) : 0);

  it("nestsWithin says what a recursive walk finds, for any JSON and any bound", () => {
    fc.assert(
      fc.property(fc.jsonValue({ maxDepth: 8 }), fc.nat({ max: 10 }), (json, max) => {
        expect(nestsWithin(json, max)).toBe(depthOf(json) <= max);
      }),
      { numRuns: 2_000, ...seed },
    );
  });

  it("the events' schema takes details 64 deep and refuses 65, by name", () => {
    const wrap = (depth: number) => {
      let v: unknown = 1;
      for (let i = 1; i < depth; i++) v = i % 2 ? { d: v } : [v];
      return [v];
    };
    const answer = (depth: number) => ({ v: 1, kind: "message", role: "assistant", time: "2026-12-02T00:00:00Z", text: "", model: "m", provider: "p", latency_ms: 1, stop: "end_turn", thinking: { reasoning_details: wrap(depth) } });
    expect(Event.safeParse(answer(THINKING_DEPTH_MAX)).success).toBe(true);
    const refused = Event.safeParse(answer(THINKING_DEPTH_MAX + 1));
    expect(refused.success).toBe(false);
    expect(JSON.stringify(refused.error?.issues)).toContain("nests deeper than 64");
  });

  it("the events' schema takes a message's parts 64 deep and refuses 65: a client's part may carry more, never without end", () => {
    const message = (depth: number) => {
      let v: unknown = 1;
      for (let i = 2; i < depth; i++) v = [v];
      return { v: 1, kind: "message", role: "user", time: "2026-12-02T00:00:00Z", text: "", header: "[h]", parts: [{ type: "text", text: "x", extra: v }] };
    };
    expect(Event.safeParse(message(THINKING_DEPTH_MAX)).success).toBe(true);
    const refused = Event.safeParse(message(THINKING_DEPTH_MAX + 1));
    expect(refused.success).toBe(false);
    expect(JSON.stringify(refused.error?.issues)).toContain("nest deeper than 64");
  });
});
