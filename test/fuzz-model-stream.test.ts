// The model's streamed answer, fuzzed: an endpoint that sends any chunks at all, well-formed or not
// (calls numbered anywhere from 0 to past four billion, ids, names and arguments of any type, usage
// of any shape, lines that are not JSON, any JSON value), over the real wire to the real client.
// Each time the answer comes back or the turn fails with a ModelError, promptly; never a hang,
// never another error, never an answer over the bounds of one; and the process stays up.
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { nestsWithin, parsedArguments, Settings, THINKING_DEPTH_MAX } from "../protocol/index.js";
import { askModel, ModelError, MODEL_ANSWER_MAX_BYTES, MODEL_ANSWER_MAX_CALLS } from "../turn/model.js";
import { jsonBytes } from "../turn/body.js";
import { ANSWER_EVENT_MAX } from "../turn/http.js";
import { scriptedSettings } from "./acp-client.js";
const seed = process.env.FC_SEED ? { seed: Number(process.env.FC_SEED) } : {};

/** What the endpoint sends for the request being fuzzed: each entry one SSE data line, as it is. */
let lines: string[] = [];
/** Or, when set, these bytes as they are, each a write of its own (framing of any kind). */
let raw: Buffer[] | undefined;
/** How the body ends: [DONE] then its end; no [DONE]; more after [DONE]; [DONE] and no end at all. */
let ending: "done" | "none" | "done-more" | "done-open" = "done";
/** The answer's content type; left out when undefined. */
let contentType: string | undefined = "text/event-stream";
let server: Server;
let url = "";

beforeAll(async () => {
  server = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      res.writeHead(200, contentType === undefined ? {} : { "content-type": contentType });
      if (raw) {
        for (const part of raw) res.write(part);
        return void res.end();
      }
      for (const line of lines) res.write(`data: ${line}\n\n`);
      if (ending === "none") return void res.end();
      if (ending === "done-open") return void res.write("data: [DONE]\n\n");
      res.end(ending === "done-more" ? `data: [DONE]\n\n${lines.map((l) => `data: ${l}\n\n`).join("")}` : "data: [DONE]\n\n");
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
});

/** Anything where a field is expected: its type, or another. */
const any = fc.oneof(fc.string({ maxLength: 40 }), fc.integer(), fc.double(), fc.boolean(), fc.constant(null), fc.jsonValue({ maxDepth: 2 }));
/** A call's number: the small ones a model sends, the bound's edge, and far past it. */
const index = fc.oneof(
  { weight: 6, arbitrary: fc.nat({ max: 8 }) },
  { weight: 2, arbitrary: fc.constantFrom(MODEL_ANSWER_MAX_CALLS - 1, MODEL_ANSWER_MAX_CALLS, 3_000_000_000, 2 ** 32, Number.MAX_SAFE_INTEGER) },
  { weight: 1, arbitrary: any },
);
const toolCall = fc.record(
  { index, id: fc.oneof(fc.string({ maxLength: 12 }), any), type: fc.constant("function"), function: fc.record({ name: fc.oneof(fc.string({ maxLength: 12 }), any), arguments: fc.oneof(fc.string({ maxLength: 40 }), any) }, { requiredKeys: [] }) },
  { requiredKeys: ["index"] },
);
const delta = fc.record(
  {
    role: fc.constant("assistant"),
    content: fc.oneof(fc.string({ maxLength: 200 }), any),
    reasoning_content: fc.oneof(fc.string({ maxLength: 50 }), any),
    reasoning: fc.oneof(fc.string({ maxLength: 50 }), any),
    reasoning_details: fc.oneof(fc.array(fc.jsonValue({ maxDepth: 2 }), { maxLength: 3 }), any),
    tool_calls: fc.oneof(fc.array(toolCall, { maxLength: 3 }), any),
  },
  { requiredKeys: [] },
);
const chunk = fc.oneof(
  { weight: 6, arbitrary: fc.record({ id: fc.oneof(fc.string({ maxLength: 12 }), any), choices: fc.array(fc.record({ index: fc.nat({ max: 2 }), delta, finish_reason: fc.oneof(fc.constantFrom("stop", "tool_calls", "length"), any) }, { requiredKeys: [] }), { maxLength: 2 }) }, { requiredKeys: ["choices"] }).map((c) => JSON.stringify(c)) },
  { weight: 1, arbitrary: fc.record({ choices: fc.constant([]), usage: fc.oneof(fc.record({ prompt_tokens: any, completion_tokens: any, prompt_tokens_details: any, cost: any }, { requiredKeys: [] }), any) }).map((c) => JSON.stringify(c)) },
  { weight: 1, arbitrary: fc.jsonValue({ maxDepth: 3 }).map((v) => JSON.stringify(v)) },
  { weight: 1, arbitrary: fc.string({ maxLength: 30 }).map((s) => s.replace(/[\r\n]/g, " ")) },
);

describe("the model's streamed answer, fuzzed", { timeout: 120_000 }, () => {
  it("comes back within its bounds, or fails with a ModelError, promptly", async () => {
    const settings = Settings.parse(scriptedSettings(url, { timeouts: { model: 5, model_idle: 2, retry_wait: 0 } }));
    await fc.assert(
      fc.asyncProperty(fc.array(chunk, { maxLength: 12 }), async (sent) => {
        lines = sent;
        const began = performance.now();
        try {
          const answer = await askModel({ settings, model: "scripted-model", messages: [{ role: "user", content: "hi" }], calls: [] });
          expect(answer.toolCalls.length).toBeLessThanOrEqual(MODEL_ANSWER_MAX_CALLS);
          expect(jsonBytes(answer.text)).toBeLessThanOrEqual(MODEL_ANSWER_MAX_BYTES);
          expect(typeof answer.text).toBe("string");
          for (const call of answer.toolCalls) expect([typeof call.id, typeof call.name, typeof call.arguments]).toEqual(["string", "string", "string"]);
        } catch (e) {
          expect(e).toBeInstanceOf(ModelError);
        }
        expect(performance.now() - began).toBeLessThan(4_000);
      }),
      { numRuns: 150 },
    );
  });

  it("ends however it ends ([DONE] or not, more after it, its body left open) with any content type: an answer only when said whole, each call under an id of its own", async () => {
    const settings = Settings.parse(scriptedSettings(url, { timeouts: { model: 5, model_idle: 2, retry_wait: 0 } }));
    const endings = ["done", "none", "done-more", "done-open"] as const;
    const types = ["text/event-stream", "text/event-stream; charset=utf-8", "TEXT/EVENT-STREAM", "application/json", "text/html", "text/plain", undefined];
    try {
      await fc.assert(
        fc.asyncProperty(fc.array(chunk, { maxLength: 8 }), fc.constantFrom(...endings), fc.constantFrom(...types), async (sent, end, type) => {
          lines = sent;
          ending = end;
          contentType = type;
          const began = performance.now();
          try {
            const answer = await askModel({ settings, model: "scripted-model", messages: [{ role: "user", content: "hi" }], calls: [] });
            expect(type === undefined || /^text\/event-stream/i.test(type), `an answer of ${type}`).toBe(true);
            if (end === "none") expect(answer.finishReason, "an answer that was never said whole").toBeDefined();
            expect(new Set(answer.toolCalls.map((c) => c.id)).size).toBe(answer.toolCalls.length);
          } catch (e) {
            expect(e).toBeInstanceOf(ModelError);
          }
          expect(performance.now() - began).toBeLessThan(4_000);
        }),
        { numRuns: 120 },
      );
    } finally {
      ending = "done";
      contentType = "text/event-stream";
    }
  });

  it("an event that says an error fails the answer with the endpoint's words, its key left out; nothing after it is taken", async () => {
    const key = "sk-stream-secret-0123456789";
    const settings = Settings.parse({ model: { provider: "scripted", name: "scripted-model", base_url: url, key }, timeouts: { model: 5, model_idle: 2, retry_wait: 0 } });
    const texts: string[] = [];
    lines = [
      JSON.stringify({ choices: [{ index: 0, delta: { content: "partial" } }] }),
      JSON.stringify({ error: { message: `overloaded, try again (key ${key})`, type: "server_error" } }),
      JSON.stringify({ choices: [{ index: 0, delta: { content: "never taken" } }] }),
    ];
    const failed = await askModel({ settings, model: "scripted-model", messages: [{ role: "user", content: "hi" }], calls: [], onText: (t) => texts.push(t) }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(failed).toBeInstanceOf(ModelError);
    expect((failed as ModelError).message).toContain("the model answered an error: overloaded, try again");
    expect((failed as ModelError).message).not.toContain(key);
    expect(texts).toEqual(["partial"]);
  });

  it("says nothing of the key the endpoint puts in its content type or in an event that is not JSON", async () => {
    const key = "sk-fuzz-secret-0123456789abcdef";
    const settings = Settings.parse({ model: { provider: "scripted", name: "scripted-model", base_url: url, key }, timeouts: { model: 5, model_idle: 2, retry_wait: 0 } });
    // What a header may hold: printable ASCII, the key somewhere in it or in part.
    const printable = fc.string({ unit: fc.integer({ min: 0x20, max: 0x7e }).map((c) => String.fromCharCode(c)), maxLength: 40 });
    const withKey = (...forms: string[]) => fc.tuple(printable, fc.constantFrom(...forms, ""), printable).map(([a, k, b]) => `${a}${k}${b}`);
    // A content type of a media type's characters is named, the key taken out: a part of it is no secret to find.
    const type = withKey(key, `Bearer ${key}`, `Bearer_${key}`);
    // An event's text is never quoted: no part of the key is.
    const line = withKey(key, `Bearer ${key}`, key.slice(3, 20), key.slice(0, 10));
    const pieces = Array.from({ length: key.length - 7 }, (_, i) => key.slice(i, i + 8));
    try {
      await fc.assert(
        fc.asyncProperty(fc.oneof(type, type.map((t) => `text/${t}`), fc.constant("text/event-stream")), line, async (sentType, sent) => {
          contentType = sentType.trim() === "" ? undefined : sentType;
          lines = [sent];
          const failed = await askModel({ settings, model: "scripted-model", messages: [{ role: "user", content: "hi" }], calls: [] }).then(
            () => undefined,
            (e: unknown) => e,
          );
          if (failed === undefined) return;
          expect(failed).toBeInstanceOf(ModelError);
          const message = (failed as ModelError).message;
          for (const piece of pieces) expect(message).not.toContain(piece);
          expect(message).not.toMatch(/Unexpected token|is not valid JSON/);
        }),
        { numRuns: 150, ...seed },
      );
    } finally {
      contentType = "text/event-stream";
      lines = [];
    }
  });

  it("takes text sent as parts and calls numbered by strings of digits as they mean; a chunk of anything else with text or calls fails the answer", async () => {
    const settings = Settings.parse(scriptedSettings(url, { timeouts: { model: 5, model_idle: 2, retry_wait: 0 } }));
    const piece = fc.string({ maxLength: 12 });
    // Text as a string, or as parts of text, or (now and then) with a part of another kind.
    const content = fc.oneof(
      piece.map((t) => ({ sent: t as unknown, text: t, odd: false })),
      fc.array(piece, { maxLength: 3 }).map((ts) => ({ sent: ts.map((t) => ({ type: "text", text: t })) as unknown, text: ts.join(""), odd: false })),
      piece.map((t) => ({ sent: [{ type: "text", text: t }, { type: "image_url", image_url: { url: "x" } }] as unknown, text: "", odd: true })),
    );
    const call = fc.tuple(fc.nat({ max: 3 }), fc.boolean(), fc.constantFrom("", "0", "x")).map(([index, asText, pad]) => ({
      sent: { index: asText ? `${pad}${index}` : index, id: `c${index}`, type: "function", function: { name: `f${index}`, arguments: "{}" } },
      index,
      odd: asText && pad === "x",
    }));
    const chunk = fc.oneof(content.map((c) => ({ delta: { content: c.sent }, text: c.text, calls: [] as number[], odd: c.odd })), call.map((c) => ({ delta: { tool_calls: [c.sent] }, text: "", calls: [c.index], odd: c.odd })));
    await fc.assert(
      fc.asyncProperty(fc.array(chunk, { minLength: 1, maxLength: 8 }), async (sent) => {
        lines = sent.map((c) => JSON.stringify({ id: "r", choices: [{ index: 0, delta: c.delta }] }));
        const texts: string[] = [];
        const got = await askModel({ settings, model: "scripted-model", messages: [{ role: "user", content: "hi" }], calls: [], onText: (t) => texts.push(t) }).then(
          (answer) => answer,
          (e: unknown) => e,
        );
        if (sent.some((c) => c.odd)) {
          expect(got).toBeInstanceOf(ModelError);
          expect((got as ModelError).reason).toBe("model_error");
          expect((got as ModelError).message).toMatch(/a chunk with text, thinking or calls that can't be read: choices\[0\]\.delta\.(?:content|tool_calls\[0\]\.index) is not an? (?:string|number)$/);
          return;
        }
        if (got instanceof Error) throw got;
        const answer = got as Awaited<ReturnType<typeof askModel>>;
        expect(answer.text).toBe(sent.map((c) => c.text).join(""));
        expect(texts.join("")).toBe(answer.text);
        expect(answer.toolCalls.map((c) => c.name)).toEqual([...new Set(sent.flatMap((c) => c.calls))].sort().map((i) => `f${i}`.repeat(sent.filter((c) => c.calls[0] === i).length)));
      }),
      { numRuns: 100, ...seed },
    );
  });

  it("takes SSE framed any way, blank lines of \\n, \\r or \\r\\n split anywhere across reads: an answer or a ModelError, promptly", async () => {
    const settings = Settings.parse(scriptedSettings(url, { timeouts: { model: 5, model_idle: 2, retry_wait: 0 } }));
    const piece = fc.oneof(
      fc.constantFrom("\n", "\r", "\r\n", "\n\n", "\r\r", "\r\n\r\n", "data: ", ": comment", "event: x", "data: [DONE]", 'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}'),
      fc.string({ maxLength: 20 }),
    );
    try {
      await fc.assert(
        fc.asyncProperty(fc.array(fc.array(piece, { maxLength: 6 }), { maxLength: 8 }), async (writes) => {
          raw = writes.map((w) => Buffer.from(w.join("")));
          const began = performance.now();
          try {
            const answer = await askModel({ settings, model: "scripted-model", messages: [{ role: "user", content: "hi" }], calls: [] });
            expect(typeof answer.text).toBe("string");
          } catch (e) {
            expect(e).toBeInstanceOf(ModelError);
          }
          expect(performance.now() - began).toBeLessThan(4_000);
        }),
        { numRuns: 150 },
      );
    } finally {
      raw = undefined;
    }
  });

  it("a long answer of many events, ended by blank lines of any kind and split anywhere, is never cut by the bound of one event", async () => {
    const settings = Settings.parse(scriptedSettings(url));
    const ends = ["\n\n", "\r\r", "\r\n\r\n"];
    try {
      await fc.assert(
        fc.asyncProperty(fc.array(fc.nat({ max: 2 }), { minLength: 64, maxLength: 64 }), fc.array(fc.nat(), { minLength: 40, maxLength: 40 }), async (kinds, cuts) => {
          // Some 3 MiB in all, past ANSWER_EVENT_MAX, in events of 48 KiB.
          const piece = "z".repeat(48 * 1024);
          const body = Buffer.from(kinds.map((k) => `data: ${JSON.stringify({ choices: [{ index: 0, delta: { content: piece } }] })}${ends[k] ?? "\n\n"}`).join("") + "data: [DONE]\n\n");
          expect(body.length).toBeGreaterThan(ANSWER_EVENT_MAX);
          const at = [...new Set(cuts.map((c) => c % body.length))].sort((a, b) => a - b);
          raw = [0, ...at].map((from, i) => body.subarray(from, at[i] ?? body.length)).filter((b) => b.length > 0);
          const answer = await askModel({ settings, model: "scripted-model", messages: [{ role: "user", content: "hi" }], calls: [] });
          expect(answer.text.length).toBe(piece.length * kinds.length);
        }),
        { numRuns: 12 },
      );
    } finally {
      raw = undefined;
    }
  });

  it("many small chunks (thinking's details, text) are taken in time that grows with their number, not its square", async () => {
    const settings = Settings.parse(scriptedSettings(url));
    try {
      const n = 60_000;
      const one = Buffer.from(`data: ${JSON.stringify({ choices: [{ index: 0, delta: { content: "a", reasoning_details: [{ type: "reasoning.text", text: "t" }] } }] })}\n\n`);
      raw = [Buffer.concat(Array.from({ length: n }, () => one)), Buffer.from("data: [DONE]\n\n")];
      const began = performance.now();
      const answer = await askModel({ settings, model: "scripted-model", messages: [{ role: "user", content: "hi" }], calls: [] });
      expect(answer.text.length).toBe(n);
      expect(answer.thinking?.reasoning_details).toHaveLength(n);
      // The square of 60,000 copies of the details kept so far took minutes; this takes a second or two.
      expect(performance.now() - began).toBeLessThan(20_000);
    } finally {
      raw = undefined;
    }
  });

  it("a call numbered past the bound, anywhere among well-formed chunks, cuts the answer saying so", async () => {
    const settings = Settings.parse(scriptedSettings(url));
    await fc.assert(
      fc.asyncProperty(fc.nat({ max: 5 }), fc.integer({ min: MODEL_ANSWER_MAX_CALLS, max: Number.MAX_SAFE_INTEGER }), async (before, past) => {
        const text = (s: string) => JSON.stringify({ choices: [{ index: 0, delta: { content: s } }] });
        lines = [...Array.from({ length: before }, (_, i) => text(`part ${i} `)), JSON.stringify({ choices: [{ index: 0, delta: { tool_calls: [{ index: past, id: "c", type: "function", function: { name: "f", arguments: "{}" } }] } }] }), text("after")];
        const failed = await askModel({ settings, model: "scripted-model", messages: [{ role: "user", content: "hi" }], calls: [] }).then(
          () => undefined,
          (e: unknown) => e,
        );
        expect(failed).toBeInstanceOf(ModelError);
        expect((failed as ModelError).reason).toBe("model_error");
        expect((failed as ModelError).message).toContain(`made a call numbered ${past}`);
      }),
      { numRuns: 40 },
    );
  });
});

describe("a call's arguments as the model sent them, fuzzed", () => {
  it("are parsed only when JSON within the depth JSON is written back at; whatever is given can be written as JSON", () => {
    const nested = fc.tuple(fc.nat({ max: 3000 }), fc.constantFrom("[", '{"a":')).map(([depth, open]) => `${open.repeat(depth)}1${(open === "[" ? "]" : "}").repeat(depth)}`);
    fc.assert(
      fc.property(fc.oneof(fc.json(), fc.string(), nested), (text) => {
        const given = parsedArguments(text);
        expect(() => JSON.stringify(given)).not.toThrow();
        if (typeof given !== "string" || given !== text) expect(nestsWithin(given, THINKING_DEPTH_MAX)).toBe(true);
        let json = true;
        try {
          JSON.parse(text);
        } catch {
          json = false;
        }
        if (!json) expect(given).toBe(text);
      }),
      { numRuns: 2_000, ...seed },
    );
  });
});
