// A streamed answer's chunk read (turn/chunk.ts): the check made by hand takes only what the schema
// takes, as the schema gives it, and reading a chunk gives what the schema alone would, whatever
// the endpoint sent.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { Chunk, plainChunk, readChunk } from "../turn/chunk.js";

/** What JSON.parse could give: a value whose objects have no prototype tricks, as the wire does. */
function wire(v: unknown): unknown {
  const parsed: unknown = JSON.parse(JSON.stringify(v));
  return parsed;
}

/** An odd value an endpoint may send where another is due. */
const odd = fc.oneof({ weight: 1, arbitrary: fc.jsonValue({ maxDepth: 2 }) }, { weight: 4, arbitrary: fc.constantFrom(null, -1, -0, 1.5, 2 ** 53, 2 ** 60, "", "x", "0", [], {}, true) });
const text = fc.oneof(fc.string({ maxLength: 8 }), fc.constant(null));
const some = <T>(a: fc.Arbitrary<T>) => fc.option(a, { nil: undefined, freq: 3 });

const call = fc.record(
  { index: fc.nat({ max: 200 }), id: some(text), function: some(fc.oneof(fc.constant(null), fc.record({ name: some(text), arguments: some(text) }, { requiredKeys: [] }))), type: some(fc.constant("function")) },
  { requiredKeys: ["index"] },
);
const delta = fc.record(
  {
    role: some(fc.constant("assistant")),
    content: some(text),
    reasoning_content: some(text),
    reasoning: some(text),
    reasoning_details: some(fc.oneof(fc.constant(null), fc.array(odd, { maxLength: 3 }))),
    refusal: some(text),
    tool_calls: some(fc.oneof(fc.constant(null), fc.array(call, { maxLength: 3 }))),
  },
  { requiredKeys: [] },
);
const usage = fc.record(
  {
    prompt_tokens: some(fc.nat()),
    completion_tokens: some(fc.nat()),
    prompt_tokens_details: some(fc.oneof(fc.constant(null), fc.record({ cached_tokens: some(fc.nat()) }, { requiredKeys: [] }))),
    prompt_cache_hit_tokens: some(fc.nat()),
    cost: some(fc.double({ noNaN: true, noDefaultInfinity: true })),
  },
  { requiredKeys: [] },
);
/** A chunk of the shapes endpoints send, every field of its own kind. */
const wellFormed = fc.record(
  {
    id: some(text),
    object: some(fc.constant("chat.completion.chunk")),
    choices: some(fc.oneof(fc.constant(null), fc.array(fc.record({ index: some(fc.nat()), delta: some(fc.oneof(fc.constant(null), delta)), finish_reason: some(text) }, { requiredKeys: [] }), { maxLength: 3 }))),
    usage: some(fc.oneof(fc.constant(null), usage)),
  },
  { requiredKeys: [] },
);

/** Every place in a JSON value a value sits at: its holder and its key. */
type Place = [Record<string | number, unknown>, string | number];
function places(v: unknown, out: Place[] = []): Place[] {
  if (typeof v !== "object" || v === null) return out;
  for (const [k, x] of Object.entries(v)) {
    out.push([v as Record<string, unknown>, Array.isArray(v) ? Number(k) : k]);
    places(x, out);
  }
  return out;
}

/** A well-formed chunk with one value anywhere in it made odd, or left as it is, or anything at all. */
const chunk = fc.oneof(
  { weight: 2, arbitrary: wellFormed },
  {
    weight: 6,
    arbitrary: fc.tuple(wellFormed, fc.nat(), odd).map(([c, at, v]) => {
      const w = wire(c);
      const all = places(w);
      if (all.length) {
        const [holder, key] = all[at % all.length]!;
        holder[key] = v;
      }
      return w;
    }),
  },
  { weight: 1, arbitrary: odd },
);

describe("a streamed answer's chunk", () => {
  it("is taken by the plain check only as the schema takes it, and read as the schema reads it", () => {
    let plain = 0;
    let refused = 0;
    fc.assert(
      fc.property(chunk, (sent) => {
        const raw = wire(sent);
        const schema = Chunk.safeParse(raw);
        const quick = plainChunk(raw);
        if (quick !== undefined) {
          plain++;
          expect(schema.success).toBe(true);
          expect(quick).toEqual(schema.data);
        }
        if (!schema.success) refused++;
        expect(readChunk(raw)).toEqual(schema.success ? schema.data : undefined);
      }),
      { numRuns: 10_000 },
    );
    // Both sides of the check were reached: chunks taken by hand, and chunks the schema refused.
    expect(plain).toBeGreaterThan(300);
    expect(refused).toBeGreaterThan(100);
  });

  it("with an own __proto__ anywhere (JSON.parse makes one) is left to the schema, which reads it without", () => {
    for (const text of ['{"__proto__":[],"choices":[]}', '{"id":"a","choices":[{"__proto__":[],"delta":{"content":"x"}}]}', '{"choices":[{"delta":{"__proto__":{},"content":"x"}}]}']) {
      const raw: unknown = JSON.parse(text);
      expect(plainChunk(raw), text).toBeUndefined();
      expect(readChunk(raw), text).toEqual(Chunk.parse(raw));
    }
  });

  it("of each kind an endpoint sends is taken by the plain check", () => {
    const sent = [
      { id: "c1", object: "chat.completion.chunk", choices: [{ index: 0, delta: { role: "assistant", content: "" }, finish_reason: null }] },
      { id: "c1", choices: [{ index: 0, delta: { content: "Hello" }, finish_reason: null }] },
      { id: "c1", choices: [{ index: 0, delta: { reasoning_content: "hm", reasoning_details: [{ type: "reasoning.text", text: "hm" }] } }] },
      { id: "c1", choices: [{ index: 0, delta: { tool_calls: [{ index: 0, id: "call_1", type: "function", function: { name: "echo", arguments: '{"a":' } }] } }] },
      { id: "c1", choices: [{ index: 0, delta: {}, finish_reason: "stop" }] },
      { id: "c1", choices: [], usage: { prompt_tokens: 10, completion_tokens: 2, prompt_tokens_details: { cached_tokens: 8 }, cost: 0.001 } },
    ];
    for (const s of sent) expect(plainChunk(wire(s))).toEqual(Chunk.parse(wire(s)));
  });

  it("that only the schema can judge goes to it: an odd usage is dropped, a call numbered oddly refuses the chunk", () => {
    const oddUsage = wire({ id: "c", choices: [{ delta: { content: "a" } }], usage: "lots" });
    expect(plainChunk(oddUsage)).toBeUndefined();
    expect(readChunk(oddUsage)).toEqual({ id: "c", choices: [{ delta: { content: "a" } }], usage: undefined });
    const oddDetails = wire({ choices: [], usage: { prompt_tokens: 3, prompt_tokens_details: 7 } });
    expect(readChunk(oddDetails)?.usage).toEqual({ prompt_tokens: 3, prompt_tokens_details: undefined });
    expect(readChunk(wire({ choices: [{ delta: { tool_calls: [{ index: -1 }] } }] }))).toBeUndefined();
    expect(readChunk(wire({ choices: [{ delta: { tool_calls: [{ index: 1.5 }] } }] }))).toBeUndefined();
    expect(readChunk(wire({ id: 7, choices: [] }))).toBeUndefined();
  });
});
