// The request's body, built by reusing the previous request's bytes: whatever the sequence of requests
// (windows that grow, drop, change model or tools, messages that are new objects with the same JSON),
// each body is exactly the bytes JSON.stringify makes of the same object, each lone half of a UTF-16
// pair in it made U+FFFD (a provider refuses a body with one).
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type { Event } from "../protocol/index.js";
import { encodeBody, forgetBodies, jsonBytes } from "../turn/body.js";
import { wellFormedJson, WellFormedPieces } from "../turn/wellformed.js";
import { eventsToMessages, type ChatMessage } from "../turn/prompt.js";

const seed = process.env.FC_SEED ? { seed: Number(process.env.FC_SEED) } : {};
const decoder = new TextDecoder();

/**
 * Text with what JSON escapes and what UTF-8 takes several bytes for; lone halves of a pair (which
 * may meet their other half), and text that reads as one's escape after a backslash.
 */
const text = fc.string({ unit: fc.constantFrom("a", "é", "日", "😀", '"', "\\", "\n", "\u0000", "\u2028", " ", "\ud83d", "\ude00", "\udbff", "ud800", "\\ud800"), maxLength: 12 });

/** A value with each of its strings (its keys too) made well-formed, as a provider takes it. */
function wellFormedValue(value: unknown): unknown {
  if (typeof value === "string") return value.toWellFormed();
  if (Array.isArray(value)) return value.map(wellFormedValue);
  if (value !== null && typeof value === "object") return Object.fromEntries(Object.entries(value).map(([k, v]) => [k.toWellFormed(), wellFormedValue(v)]));
  return value;
}

const message: fc.Arbitrary<ChatMessage> = fc.oneof(
  fc.record({ role: fc.constant("user" as const), content: text }),
  fc.record({ role: fc.constant("assistant" as const), content: fc.option(text, { nil: null }) }),
  fc.record({ role: fc.constant("tool" as const), tool_call_id: text, content: text }),
);

/** One request: how many of the previous request's messages it keeps, then new ones, some as copies. */
const step = fc.record({
  key: fc.constantFrom("a", "b", undefined),
  model: fc.constantFrom("m1", "m2"),
  system: fc.constantFrom("system one", "system two"),
  keep: fc.nat({ max: 12 }),
  drop: fc.nat({ max: 3 }),
  added: fc.array(fc.record({ m: message, frozen: fc.boolean() }), { maxLength: 4 }),
  copies: fc.boolean(),
  tools: fc.boolean(),
  params: fc.dictionary(fc.constantFrom("temperature", "top_p", "seed"), fc.jsonValue({ maxDepth: 1 }), { maxKeys: 2 }),
});

/** The body JSON.stringify makes, each lone half of a pair made U+FFFD. */
function expected(head: Record<string, unknown>, messages: readonly ChatMessage[], tail: Record<string, unknown>): string {
  return JSON.stringify(wellFormedValue({ ...head, messages, ...tail }));
}

describe("the request's body", () => {
  it("is the bytes JSON.stringify makes, however much of the previous request it reuses", () => {
    fc.assert(
      fc.property(fc.array(step, { minLength: 1, maxLength: 25 }), (steps) => {
        forgetBodies();
        const windows = new Map<string | undefined, ChatMessage[]>();
        for (const s of steps) {
          const before = windows.get(s.key) ?? [];
          // Keep a prefix (as the same objects, or as equal copies), drop the oldest, add new ones.
          let kept = before.slice(1, 1 + s.keep).slice(s.drop);
          if (s.copies) kept = kept.map((m) => (Object.isFrozen(m) ? m : { ...m }));
          const added = s.added.map(({ m, frozen }) => (frozen ? Object.freeze({ ...m }) : { ...m }));
          const messages: ChatMessage[] = [{ role: "system", content: s.system }, ...kept, ...added];
          windows.set(s.key, messages);
          const head = { ...s.params, model: s.model };
          const tail = { stream: true, ...(s.tools ? { tools: [{ type: "function" }] } : {}) };
          const bytes = encodeBody(head, messages, tail, s.key);
          expect(decoder.decode(bytes)).toBe(expected(head, messages, tail));
        }
      }),
      { numRuns: 300, ...seed },
    );
  });

  it("holds for the messages a conversation's events make, as the window grows and drops", () => {
    forgetBodies();
    const events: Event[] = [];
    const time = "2026-11-29T10:00:00.000Z";
    for (let turn = 0; turn < 40; turn++) {
      events.push({ v: 1, kind: "message", role: "user", time, text: `question ${turn} — «${"é".repeat(turn % 5)}»`, header: `[Sun 29 Nov 2026 10:${String(turn).padStart(2, "0")}]` });
      const call = turn % 3 === 0;
      events.push({
        v: 1,
        kind: "message",
        role: "assistant",
        time,
        text: call ? "" : `answer ${turn} 😀`,
        model: "m",
        provider: "p",
        latency_ms: 1,
        stop: call ? "tool_calls" : "end_turn",
        ...(call ? { tool_calls: [{ id: `c${turn}`, name: "t__echo", arguments: `{"n":${turn}}` }], thinking: { reasoning_content: "think" } } : {}),
      });
      if (call && turn % 2 === 0) events.push({ v: 1, kind: "tool_result", time, call_id: `c${turn}`, tool: "t__echo", text: `echo ${turn}`, error: false });
      // A window that drops its oldest turns every ten turns.
      const start = Math.floor(turn / 10) * 10 * 2;
      const numbered = events.slice(start).map((event, i) => ({ n: start + i + 1, event }));
      for (const tools of [true, false]) {
        const messages: ChatMessage[] = [{ role: "system", content: "You are a test." }, ...eventsToMessages(numbered, { tools })];
        const bytes = encodeBody({ model: "m" }, messages, { stream: true }, `conversation-${tools}`);
        expect(decoder.decode(bytes)).toBe(expected({ model: "m" }, messages, { stream: true }));
      }
    }
  });
});

describe("JSON made well-formed", () => {
  /** Text made of what reads as a surrogate's escape once JSON.stringify has written it: backslashes, `u`, `d`, hex digits, halves of pairs. */
  const tricky = fc.string({ unit: fc.constantFrom("\\", "u", "d", "8", "c", "f", "0", "a", "\ud800", "\udfff", "\ud83d", "\ude00", "😀", '"'), maxLength: 24 });

  it("is JSON.stringify's of the value with each lone half made U+FFFD, whatever backslashes come before", () => {
    fc.assert(
      // Objects of one key each: two keys made alike would be one in the expected value.
      fc.property(fc.array(fc.tuple(tricky, fc.array(tricky, { maxLength: 3 })).map(([k, v]) => ({ [k]: v })), { maxLength: 4 }), (value) => {
        expect(wellFormedJson(JSON.stringify(value))).toBe(JSON.stringify(wellFormedValue(value)));
      }),
      { numRuns: 500, ...seed },
    );
  });

  it("handed on in pieces, cut anywhere (a pair's halves in two pieces too), is the whole text made well-formed, each piece well-formed", () => {
    const halves = fc.string({ unit: fc.constantFrom("a", " ", "\ud800", "\udfff", "\ud83d", "\ude00", "😀"), maxLength: 40 });
    fc.assert(
      fc.property(halves, fc.array(fc.nat(40), { maxLength: 8 }), (text, cuts) => {
        const out: string[] = [];
        const pieces = new WellFormedPieces((piece) => out.push(piece));
        let from = 0;
        for (const cut of [...cuts.map((c) => Math.min(c, text.length))].sort((a, b) => a - b)) {
          pieces.push(text.slice(from, cut));
          from = cut;
        }
        pieces.push(text.slice(from));
        pieces.flush();
        expect(out.join("")).toBe(text.toWellFormed());
        expect(out.every((piece) => piece.length > 0 && piece.isWellFormed())).toBe(true);
      }),
      { numRuns: 1000, ...seed },
    );
  });

  it("tells an escape from a backslash written before text that reads as one", () => {
    expect(wellFormedJson(JSON.stringify("\\ud800"))).toBe(JSON.stringify("\\ud800"));
    expect(wellFormedJson(JSON.stringify("\\\ud800"))).toBe(JSON.stringify("\\\ufffd"));
    expect(wellFormedJson(JSON.stringify("C:\\udata\\udfff"))).toBe(JSON.stringify("C:\\udata\\udfff"));
    const plain = JSON.stringify({ a: "no halves 😀" });
    expect(wellFormedJson(plain)).toBe(plain);
  });
});

describe("calls that use one id in two rounds", () => {
  const time = "2026-12-02T00:00:00.000Z";
  const events: Event[] = [
    { v: 1, time, kind: "message", role: "user", text: "go", header: "[h]" },
    { v: 1, time, kind: "message", role: "assistant", text: "", model: "m", provider: "p", latency_ms: 1, stop: "tool_calls", tool_calls: [{ id: "call_0", name: "t__a", arguments: "{}" }] },
    { v: 1, time, kind: "tool_result", call_id: "call_0", tool: "t__a", text: "first answer", error: false },
    { v: 1, time, kind: "message", role: "assistant", text: "", model: "m", provider: "p", latency_ms: 1, stop: "tool_calls", tool_calls: [{ id: "call_0", name: "t__b", arguments: "{}" }] },
    { v: 1, time, kind: "tool_result", call_id: "call_0", tool: "t__b", text: "second answer", error: false },
    { v: 1, time, kind: "message", role: "assistant", text: "done", model: "m", provider: "p", latency_ms: 1, stop: "end_turn" },
  ];
  const numbered = events.map((event, i) => ({ n: i + 1, event }));

  it("each go to the model with their own answer, as messages and as text", () => {
    const asText = eventsToMessages(numbered, { tools: false }).filter((m) => m.role === "assistant").map((m) => String(m.content));
    expect(asText[0]).toContain("first answer");
    expect(asText[0]).not.toContain("second answer");
    expect(asText[1]).toContain("second answer");
    const withTools = eventsToMessages(numbered, { tools: true }).filter((m) => m.role === "tool");
    expect(withTools.map((m) => m.content)).toEqual(["first answer", "second answer"]);
  });

  it("are shown to the client as two calls, the second as <id>#2, each with its own result", async () => {
    const { TurnUpdates } = await import("../acp/updates.js");
    const u = new TurnUpdates("all");
    const shown = [
      ...u.map({ type: "tool_call", id: "call_0", name: "t__a", arguments: {} }),
      ...u.map({ type: "tool_result", id: "call_0", name: "t__a", status: "completed", text: "first answer" }),
      ...u.map({ type: "tool_call", id: "call_0", name: "t__b", arguments: {} }),
      ...u.map({ type: "tool_result", id: "call_0", name: "t__b", status: "completed", text: "second answer" }),
    ];
    expect(shown.map((s) => [s.sessionUpdate, "toolCallId" in s ? s.toolCallId : undefined])).toEqual([
      ["tool_call", "call_0"],
      ["tool_call_update", "call_0"],
      ["tool_call", "call_0#2"],
      ["tool_call_update", "call_0#2"],
    ]);
    expect(u.finish("ended")).toEqual([]);
  });
});

describe("a string's bytes in a body", () => {
  it("are those JSON.stringify writes of it, escapes and all", () => {
    const any = fc.string({ unit: fc.oneof(fc.constantFrom("\u0001", "\u001f", "\b", "\t", "\f", "\r", "\u007f"), fc.constantFrom("a", "é", "日", "😀", '"', "\\", "\n", "\u0000", "\u2028", " ")), maxLength: 40 });
    fc.assert(
      fc.property(fc.oneof(any, fc.string(), fc.string({ unit: "binary" })), (s) => {
        expect(jsonBytes(s)).toBe(Buffer.byteLength(JSON.stringify(s)) - 2);
      }),
      { numRuns: 5_000, ...seed },
    );
  });
});
