// A streamed answer's chunk read (turn/chunk.ts): the check made by hand takes only what the schema
// takes, as the schema gives it, and reading a chunk gives what the schema alone would, whatever
// the endpoint sent; what it refuses is taken in an unambiguous other form, skipped when it carries
// no text and no call, or else refused in words of the harness's own.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { Chunk, type ChunkData, CHUNK_CALLS_MAX, CHUNK_CHOICES_MAX, plainChunk, readChunk, Refused } from "../turn/chunk.js";

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

/** Whether a chunk holds a delta with content or calls (not empty). */
function carries(raw: unknown): boolean {
  const choices = (raw as { choices?: unknown } | null)?.choices;
  if (!Array.isArray(choices)) return false;
  return choices.some((c: unknown) => {
    const d = (c as { delta?: unknown } | null)?.delta;
    if (typeof d !== "object" || d === null || Array.isArray(d)) return false;
    const any = (v: unknown) => v != null && v !== "" && !(Array.isArray(v) && v.length === 0);
    const { content, tool_calls: calls, reasoning_content: thought, reasoning, reasoning_details: details } = d as Record<string, unknown>;
    return [content, calls, thought, reasoning, details].some(any);
  });
}

/** A refusal's words: where in the chunk, and what it should be; nothing the endpoint sent. */
const SAID = /^the model sent a chunk with text, thinking or calls that can't be read: (?:the chunk|[a-z_]+(?:\[\d+\]|\.[a-z_]+)*) is (?:not an? [a-z ]+|out of range|not of a chunk's shape)$/;

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
          // Changing nothing the schema reads.
          expect(Chunk.parse(quick)).toEqual(schema.data);
        }
        if (!schema.success) refused++;
        const read = readChunk(raw);
        if (schema.success) expect(Chunk.parse(read)).toEqual(schema.data);
        else if (read instanceof Refused) {
          expect(carries(raw)).toBe(true);
          expect(read.why).toMatch(SAID);
        } else if (read !== undefined) expect(Chunk.safeParse(read).success).toBe(true);
        else expect(carries(raw)).toBe(false);
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
    for (const s of sent) {
      const w = wire(s);
      expect(plainChunk(w)).toBe(w);
      expect(Chunk.safeParse(w).success).toBe(true);
    }
  });

  it("that only the schema can judge goes to it: an odd usage is dropped, a call numbered oddly refuses the chunk", () => {
    const oddUsage = wire({ id: "c", choices: [{ delta: { content: "a" } }], usage: "lots" });
    expect(plainChunk(oddUsage)).toBeUndefined();
    expect(readChunk(oddUsage)).toEqual({ id: "c", choices: [{ delta: { content: "a" } }], usage: undefined });
    const oddDetails = wire({ choices: [], usage: { prompt_tokens: 3, prompt_tokens_details: 7 } });
    expect((readChunk(oddDetails) as ChunkData | undefined)?.usage).toEqual({ prompt_tokens: 3, prompt_tokens_details: undefined });
    expect(readChunk(wire({ choices: [{ delta: { tool_calls: [{ index: -1 }] } }] }))).toEqual(new Refused("the model sent a chunk with text, thinking or calls that can't be read: choices[0].delta.tool_calls[0].index is out of range"));
    expect(readChunk(wire({ choices: [{ delta: { tool_calls: [{ index: 1.5 }] } }] }))).toEqual(
      new Refused("the model sent a chunk with text, thinking or calls that can't be read: choices[0].delta.tool_calls[0].index is not a whole number"),
    );
    // Thinking the schema can't read is refused too: a provider is sent its model's thinking back.
    expect(readChunk(wire({ choices: [{ delta: { reasoning_content: "Let me think." }, finish_reason: 0 }] }))).toEqual(
      new Refused("the model sent a chunk with text, thinking or calls that can't be read: choices[0].finish_reason is not a string"),
    );
    expect(readChunk(wire({ choices: [{ delta: { reasoning_details: [{ type: "reasoning.text", text: "hm" }], refusal: 5 } }] }))).toBeInstanceOf(Refused);
    // Nothing in it that the answer would lose: skipped.
    expect(readChunk(wire({ id: 7, choices: [] }))).toBeUndefined();
    expect(readChunk(wire({ choices: [{ delta: { content: "" }, finish_reason: 0 }] }))).toBeUndefined();
  });

  it("in an unambiguous other form is taken as it means: a call numbered by a string of digits, content as parts of text", () => {
    expect(readChunk(wire({ choices: [{ delta: { tool_calls: [{ index: "0", id: "c1", function: { name: "fs__read", arguments: "{}" } }] } }] }))).toEqual({
      choices: [{ delta: { tool_calls: [{ index: 0, id: "c1", function: { name: "fs__read", arguments: "{}" } }] } }],
    });
    expect(readChunk(wire({ choices: [{ delta: { content: [{ type: "text", text: "Answer " }, { type: "text", text: "in parts." }] } }] }))).toEqual({
      choices: [{ delta: { content: "Answer in parts." } }],
    });
    // Anything else is no text or call it can be sure of: refused, naming where, quoting nothing.
    const secret = "sk-echoed-0123456789";
    const refusals = [
      { choices: [{ delta: { content: "Hello there, the answer is 42." }, finish_reason: 0 }] },
      { choices: [{ delta: { tool_calls: [{ index: "first", id: secret }] } }] },
      { choices: [{ delta: { content: [{ type: "image_url", image_url: { url: secret } }] } }] },
      { choices: [{ delta: { content: { text: secret } } }] },
    ].map((c) => readChunk(wire(c)));
    expect(refusals.map((r) => (r instanceof Refused ? r.why.replace(/^.*: /, "") : r))).toEqual([
      "choices[0].finish_reason is not a string",
      "choices[0].delta.tool_calls[0].index is not a number",
      "choices[0].delta.content is not a string",
      "choices[0].delta.content is not a string",
    ]);
  });

  it("of more choices or calls than any answer's is refused before anything walks them, promptly", () => {
    // 2 MiB of choices the schema refuses.
    const many: unknown = JSON.parse(`{"choices":[${Array(175_000).fill('{"delta":5}').join(",")}]}`);
    const began = performance.now();
    expect(readChunk(many)).toEqual(new Refused(`the model sent a chunk of 175000 choices, where one holds at most ${CHUNK_CHOICES_MAX}`));
    expect(readChunk(wire({ choices: [{ delta: { tool_calls: Array.from({ length: CHUNK_CALLS_MAX + 1 }, () => ({ index: "x" })) } }] }))).toEqual(
      new Refused(`the model sent a chunk of ${CHUNK_CALLS_MAX + 1} calls, where one answer makes at most ${CHUNK_CALLS_MAX}`),
    );
    // The schema's walk of the choices took a third of a second, its memory 125 MiB.
    expect(performance.now() - began).toBeLessThan(150);
    // Keys of no chunk's, as many, are not walked either.
    const keys: unknown = JSON.parse(`{"id":7,${Array.from({ length: 175_000 }, (_, i) => `"k${i}":1`).join(",")},"choices":[{"delta":{"content":"a"}}]}`);
    const walked = performance.now();
    expect(readChunk(keys)).toBeInstanceOf(Refused);
    expect(performance.now() - walked).toBeLessThan(50);
    // At the bounds, read as ever.
    expect(readChunk(wire({ choices: Array.from({ length: CHUNK_CHOICES_MAX }, () => ({ delta: { content: "a" } })) }))).not.toBeInstanceOf(Refused);
  });
});
