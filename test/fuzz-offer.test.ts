// The calls a turn offers the model, fuzzed from any lists tools could send: names of any length and
// any characters (two alike but for characters made `_`, two alike in their first 60), descriptions
// of any size, schemas of any size, hundreds of calls. What is offered is always what OpenAI's API
// takes (at most 128, each named in 64 characters of its pattern, once), each description at most
// 8,192 characters never cut inside a character, each schema at most 64 KiB; memory's calls are kept
// first; every call listed is offered, named as a duplicate, or left out with why; and the same lists
// give the same offer, whatever order a tool lists its calls in.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { CALL_NAME_MAX, DESCRIPTION_MAX, OFFERED_MAX, PARAMETERS_DEPTH_MAX, PARAMETERS_MAX, listedCall as keptCall, offerCalls, offeredName, unfitWithSecrets, type ListedTool } from "../daemon/tools/offer.js";
import { nestsWithin } from "../protocol/index.js";
import { redactor } from "../turn/redact.js";
import type { ListedCall } from "../daemon/tools/session.js";

const PROVIDER_NAME = /^[A-Za-z0-9_-]{1,64}$/;

const callName = fc.oneof(
  { weight: 4, arbitrary: fc.stringMatching(/^[a-z_]{1,20}$/) },
  { weight: 2, arbitrary: fc.string({ maxLength: 120 }) },
  { weight: 1, arbitrary: fc.string({ unit: "grapheme", maxLength: 40 }) },
  // Alike in their first sixty characters, past the bound with any tool's name before them.
  { weight: 2, arbitrary: fc.nat({ max: 40 }).map((n) => `${"a_call_alike_in_its_first_sixty_characters_with_the_others".padEnd(60, "_")}${n}`) },
  // Alike but for a character made `_`.
  { weight: 1, arbitrary: fc.constantFrom("get.thing", "get thing", "get_thing", "get-thing", "get✓thing") },
);
const description = fc.oneof(
  { weight: 6, arbitrary: fc.string({ maxLength: 200 }) },
  { weight: 1, arbitrary: fc.tuple(fc.string({ maxLength: 3 }), fc.integer({ min: 8000, max: 9000 })).map(([s, n]) => `${"é".repeat(n - 1)}${s}`) },
  // A character of two UTF-16 units across the cut.
  { weight: 1, arbitrary: fc.integer({ min: DESCRIPTION_MAX - 3, max: DESCRIPTION_MAX + 3 }).map((n) => "😀".repeat(n)) },
  // Lone halves of a pair, and text that reads as one's escape after a backslash.
  { weight: 1, arbitrary: fc.string({ unit: fc.constantFrom("a", "\ud800", "\udfff", "\ud83d", "\ude00", "\\", "ud800"), maxLength: 30 }) },
);
/** A schema of `levels` objects each with one property: twice as many levels of arrays and objects, and one. */
function nested(levels: number): Record<string, unknown> {
  let schema: Record<string, unknown> = { type: "string" };
  for (let i = 0; i < levels; i++) schema = { type: "object", properties: { a: schema } };
  return schema;
}
const parameters = fc.oneof(
  { weight: 6, arbitrary: fc.constant({ type: "object", properties: {} }) },
  { weight: 1, arbitrary: fc.integer({ min: PARAMETERS_MAX - 100, max: PARAMETERS_MAX + 100 }).map((n) => ({ type: "object", description: "x".repeat(n) })) },
  // Nested near the bound, or thousands deep (past what JSON.stringify can write).
  { weight: 1, arbitrary: fc.constantFrom(...[PARAMETERS_DEPTH_MAX / 2 - 1, PARAMETERS_DEPTH_MAX / 2, PARAMETERS_DEPTH_MAX / 2 + 1, 3_000].map(nested)) },
  // Lone halves of a pair in its descriptions and names.
  { weight: 1, arbitrary: fc.tuple(fc.constantFrom("\ud800", "\udc00", "\\ud800", "😀"), fc.constantFrom("k\udbff", "k")).map(([d, k]) => ({ type: "object", properties: { [k]: { type: "string", description: `a ${d}` } } })) },
);
// As a tool lists it, kept as the host keeps it.
const listedCall: fc.Arbitrary<ListedCall> = fc.record({ call: callName, description, parameters }).map((c) => keptCall(c.call, c.description, c.parameters).listed);
const tools: fc.Arbitrary<ListedTool<number>[]> = fc
  .uniqueArray(fc.constantFrom("memory", "everything", "fs", "a_tool_named_at_the_longest_32ch"), { minLength: 1, maxLength: 4 })
  .chain((names) =>
    fc.tuple(...names.map((name) => fc.array(listedCall, { maxLength: name === "memory" ? 12 : 150, size: "max" }).map((calls) => ({ name, calls })))),
  )
  // In the order of their names, as the host gives them; `with`, each tool's place.
  .map((list) => [...list].sort((a, b) => (a.name < b.name ? -1 : 1)).map((t, i) => ({ ...t, with: i })));

const isMemory = (tool: string) => tool === "memory";
/** Every string of a value, its keys too. */
const strings = (value: unknown): string[] =>
  typeof value === "string" ? [value] : value !== null && typeof value === "object" ? Object.entries(value).flatMap(([k, v]) => [k, ...strings(v)]) : [];

describe("the calls a turn offers, fuzzed", () => {
  it("are what a provider takes, each listed call accounted for, the same for the same lists", () => {
    fc.assert(
      fc.property(tools, (listed) => {
        const { offered, leftOut } = offerCalls(listed, undefined, isMemory);
        expect(offered.length).toBeLessThanOrEqual(OFFERED_MAX);
        expect(new Set(offered.map((o) => o.name)).size).toBe(offered.length);
        for (const o of offered) {
          expect(o.name).toMatch(PROVIDER_NAME);
          expect(o.name.length).toBeLessThanOrEqual(CALL_NAME_MAX);
          expect(o.name).toBe(offeredName(o.tool, o.call));
          expect(o.description.length).toBeLessThanOrEqual(DESCRIPTION_MAX);
          // Never cut inside a character, and no lone half of a pair from the tool: a provider refuses a body with one.
          expect(o.description.isWellFormed()).toBe(true);
          expect(JSON.stringify(o.parameters).length).toBeLessThanOrEqual(PARAMETERS_MAX);
          expect(nestsWithin(o.parameters, PARAMETERS_DEPTH_MAX)).toBe(true);
          expect(strings(o.parameters).every((t) => t.isWellFormed())).toBe(true);
          expect(listed[o.with]?.name).toBe(o.tool);
        }
        // Each tool's calls in the order of their names, the tools in the order given.
        const order = offered.map((o) => [o.with, o.name] as const);
        expect(order).toEqual([...order].sort((a, b) => a[0] - b[0] || (a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0)));
        // Every call listed is offered, named as one of its tool's before it, or left out with why.
        for (const tool of listed) {
          const seen = new Set<string>();
          for (const c of tool.calls) {
            const name = offeredName(tool.name, c.call);
            const duplicate = seen.has(name);
            seen.add(name);
            if (duplicate) continue;
            const isOffered = offered.some((o) => o.tool === tool.name && o.name === name && o.call === c.call);
            const isLeft = leftOut.some((l) => l.tool === tool.name && l.call === c.call && l.why.length > 0);
            expect(isOffered !== isLeft, `${tool.name} ${JSON.stringify(c.call)}`).toBe(true);
          }
        }
        // Memory's calls are kept before any other's.
        const memoryLeft = leftOut.filter((l) => isMemory(l.tool) && l.why.startsWith("past the"));
        if (memoryLeft.length > 0) expect(offered.every((o) => isMemory(o.tool))).toBe(true);
        if (leftOut.some((l) => l.why.startsWith("past the"))) expect(offered).toHaveLength(OFFERED_MAX);
        // The same lists, the same offer: again, and with each tool's calls listed the other way round.
        expect(offerCalls(listed, undefined, isMemory)).toEqual({ offered, leftOut });
        const distinct = listed.every((t) => new Set(t.calls.map((c) => offeredName(t.name, c.call))).size === t.calls.length);
        if (distinct) {
          const reversed = listed.map((t) => ({ ...t, calls: [...t.calls].reverse() }));
          expect(offerCalls(reversed, undefined, isMemory).offered).toEqual(offered);
        }
      }),
      // Hundreds of calls a run: shrinking one that fails would take minutes, so it is shown as found.
      { numRuns: 150, endOnFailure: true },
    );
  });

  it("narrowed by a subagent's list: only the tools and calls it names, by the names offered", () => {
    fc.assert(
      fc.property(tools, fc.nat(), (listed, pick) => {
        const all = offerCalls(listed, undefined, isMemory).offered;
        const chosen = all.length > 0 ? [all[pick % all.length]?.name as string, listed[0]?.name as string] : [];
        const narrowed = offerCalls(listed, chosen, isMemory).offered;
        for (const o of narrowed) expect(chosen.includes(o.name) || chosen.includes(o.tool)).toBe(true);
        if (all.length > 0) expect(narrowed.map((o) => o.name)).toContain(chosen[0]);
      }),
      { numRuns: 100, endOnFailure: true },
    );
  });

  it("a call whose name, description or schema holds a secret, anywhere and however long around it, is never offered, and no other is left out for one", () => {
    const secret = "sk-fuzz-0123456789abcdef";
    const secrets = redactor([secret]);
    const around = fc.tuple(fc.string({ maxLength: 30 }), fc.string({ maxLength: 30 }));
    const holding = fc.oneof(
      { weight: 2, arbitrary: listedCall },
      { weight: 1, arbitrary: fc.tuple(listedCall, around).map(([c, [a, b]]) => keptCall(`${a}${secret}${b}`, c.description, c.parameters).listed) },
      { weight: 1, arbitrary: fc.tuple(listedCall, around).map(([c, [a, b]]) => keptCall(c.call, `${a}${secret}${b}`, c.parameters).listed) },
      {
        weight: 1,
        arbitrary: fc.tuple(listedCall, around).map(([c, [a, b]]) => keptCall(c.call, c.description, { type: "object", properties: { key: { type: "string", description: `${a}${secret}${b}`, default: secret } } }).listed),
      },
    );
    fc.assert(
      fc.property(fc.array(holding, { maxLength: 60 }), (calls) => {
        const marked = unfitWithSecrets(calls, secrets);
        const { offered } = offerCalls([{ name: "t", calls: marked, with: 0 }], undefined, () => false);
        for (const o of offered) expect(`${o.name} ${o.call} ${o.description} ${JSON.stringify(o.parameters)}`).not.toContain(secret);
        // Each call that holds it is marked, and no other.
        calls.forEach((c, i) => {
          const holds = c.call.includes(secret) || c.description.includes(secret) || JSON.stringify(c.parameters).includes(secret);
          expect(marked[i]?.unfit === "its name, description or schema holds a secret").toBe(holds && c.unfit === undefined);
        });
      }),
      { numRuns: 200 },
    );
  });
});
