// What a model's facts are read from, fuzzed: a runtime's answers (any status, any JSON or none, at
// each runtime's path), the endpoint's list of models, your facts file, and a message's parts. Each is
// either taken, within its bounds, or left out with a reason: never a crash, never half a value.
import { createServer, type Server } from "node:http";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MODEL_INPUTS, type Part, type Settings } from "../protocol/index.js";
import { FactsError, forgetFacts, layeredFacts } from "../turn/facts.js";
import { partsFor, PARTS_MAX } from "../turn/parts.js";
import { forgetRuntimeAnswers, listedModels, runtimeWindow } from "../turn/runtime.js";

/** FC_SEED=N reruns a failure with the seed fast-check printed for it. */
const seed = process.env.FC_SEED ? { seed: Number(process.env.FC_SEED) } : {};

interface Answer {
  status: number;
  body: string;
}
const PATHS = ["/api/show", "/api/ps", "/props", "/v1/models", "/api/v0/models"] as const;
let answers: Partial<Record<(typeof PATHS)[number], Answer>> = {};
let http: Server;
let base: string;
let tmp: string;

beforeAll(async () => {
  tmp = mkdtempSync(join(tmpdir(), "lnk-fuzz-facts-"));
  http = createServer((req, res) => {
    const path = new URL(req.url ?? "/", "http://x").pathname as (typeof PATHS)[number];
    const a = answers[path] ?? { status: 404, body: "" };
    req.resume();
    res.writeHead(a.status, { "content-type": "application/json" });
    res.end(a.body);
  });
  await new Promise<void>((resolve) => http.listen(0, "127.0.0.1", resolve));
  base = `http://127.0.0.1:${(http.address() as AddressInfo).port}/v1`;
});
afterAll(async () => {
  http.closeAllConnections();
  await new Promise<void>((resolve) => http.close(() => resolve()));
  rmSync(tmp, { recursive: true, force: true });
});

const number = fc.oneof(fc.integer(), fc.double(), fc.constantFrom(0, -1, 1e12, Number.MAX_SAFE_INTEGER, 4096), fc.string({ maxLength: 6 }));
/** Bodies shaped like each runtime's answer, with odd values, and bodies that are nothing like it. */
const shaped = fc.oneof(
  fc.record({ model_info: fc.dictionary(fc.constantFrom("llama.context_length", "x.context_length", "general.architecture"), number), parameters: fc.oneof(fc.string(), fc.constantFrom("num_ctx 8192", "num_ctx -5", "num_ctx 99999999999")) }, { requiredKeys: [] }),
  fc.record({ models: fc.array(fc.record({ name: fc.constantFrom("m", "other"), model: fc.string(), context_length: number }, { requiredKeys: [] }), { maxLength: 3 }) }),
  fc.record({ default_generation_settings: fc.record({ n_ctx: number }, { requiredKeys: [] }), n_ctx: number }, { requiredKeys: [] }),
  fc.record({
    data: fc.array(
      fc.record({ id: fc.oneof(fc.constant("m"), fc.string({ maxLength: 300 })), root: fc.string(), max_model_len: number, state: fc.constantFrom("loaded", "not-loaded", "x"), loaded_context_length: number, max_context_length: number }, { requiredKeys: ["id"] }),
      { maxLength: 4 },
    ),
  }),
  fc.jsonValue({ maxDepth: 3 }),
);
const body = fc.oneof({ weight: 5, arbitrary: shaped.map((v) => JSON.stringify(v) ?? "null") }, { weight: 1, arbitrary: fc.string({ maxLength: 40 }) });
const answer = fc.record({ status: fc.constantFrom(200, 200, 200, 404, 500, 401), body });
const answerSet = fc.record(Object.fromEntries(PATHS.map((p) => [p, answer])) as Record<(typeof PATHS)[number], fc.Arbitrary<Answer>>, { requiredKeys: [] });

const settings = (trained: boolean): Settings => ({ model: { provider: "local", name: "m", base_url: base }, window: { trained } });

describe("a runtime's answers, fuzzed", () => {
  it("give a whole positive window or none, never a throw", async () => {
    await fc.assert(
      fc.asyncProperty(answerSet, fc.boolean(), async (set, trained) => {
        answers = set;
        forgetRuntimeAnswers();
        const found = await runtimeWindow(settings(trained), "m", { env: {} });
        if (found.answer) {
          expect(Number.isSafeInteger(found.answer.window) && found.answer.window > 0 && found.answer.window <= 1e9).toBe(true);
          expect(found.answer.at.startsWith("http://127.0.0.1:")).toBe(true);
        } else expect(found.none).toEqual(expect.any(String));
      }),
      { numRuns: 150, ...seed },
    );
  });

  it("the endpoint's list of models is names or nothing", async () => {
    await fc.assert(
      fc.asyncProperty(answer, async (a) => {
        answers = { "/v1/models": a };
        forgetRuntimeAnswers();
        const listed = await listedModels(settings(false));
        if (listed !== undefined) {
          expect(listed.length).toBeLessThanOrEqual(500);
          for (const id of listed) expect(typeof id === "string" && id.length > 0 && id.length <= 256).toBe(true);
        }
      }),
      { numRuns: 100, ...seed },
    );
  });
});

describe("your facts file, fuzzed", () => {
  const entry = fc.record(
    { window: fc.oneof(number, fc.integer({ min: 1, max: 2_000_000 })), answer: fc.oneof(number, fc.integer({ min: 1, max: 200_000 })), inputs: fc.array(fc.oneof(fc.constantFrom(...MODEL_INPUTS), fc.string({ maxLength: 5 })), { maxLength: 4 }) },
    { requiredKeys: [] },
  );
  const toml = (name: string, e: Record<string, unknown>) =>
    `[models.${JSON.stringify(name)}]\n${Object.entries(e)
      .map(([k, v]) => `${k} = ${typeof v === "string" ? JSON.stringify(v) : Array.isArray(v) ? `[${v.map((x) => JSON.stringify(x)).join(", ")}]` : Number.isFinite(v) ? String(v) : "nan"}`)
      .join("\n")}\n`;
  const file = fc.oneof(
    { weight: 4, arbitrary: fc.array(fc.tuple(fc.oneof(fc.constantFrom("qwen3", "gpt-4o", "m", "__proto__", "constructor"), fc.string({ maxLength: 12 })), entry), { maxLength: 4 }).map((es) => es.map(([n, e]) => toml(n, e)).join("")) },
    { weight: 1, arbitrary: fc.string({ maxLength: 80 }) },
  );

  it("is taken field by field within its schema, or refused naming the file", () => {
    let n = 0;
    fc.assert(
      fc.property(file, fc.constantFrom("qwen3:8b", "gpt-4o-mini", "m", "constructor", "x/y"), (text, model) => {
        const config = join(tmp, `c${n++}`);
        mkdirSync(join(config, "lnk"), { recursive: true });
        const path = join(config, "lnk", "model-facts.toml");
        writeFileSync(path, text);
        forgetFacts();
        try {
          const got = layeredFacts(model, { XDG_CONFIG_HOME: config });
          for (const f of [got.window, got.answer]) if (f) expect(Number.isSafeInteger(f.value) && f.value > 0).toBe(true);
          if (got.inputs) for (const i of got.inputs.value) expect(MODEL_INPUTS).toContain(i);
        } catch (e) {
          expect(e).toBeInstanceOf(FactsError);
          expect((e as Error).message).toContain(path);
        }
      }),
      { numRuns: 200, ...seed },
    );
  });
});

describe("a message's parts, fuzzed", () => {
  const mime = fc.oneof(fc.constantFrom("image/png", "image/jpeg", "image/gif", "image/webp", "image/bmp", "application/pdf", "text/plain", "text/markdown", "application/zip", ""), fc.string({ maxLength: 12 }));
  const url = fc.oneof(
    fc.tuple(mime, fc.base64String({ maxLength: 40 })).map(([m, b]) => `data:${m};base64,${b}`),
    fc.constantFrom("https://example.com/a.png", "data:,plain", "file:///etc/passwd"),
    fc.string({ maxLength: 30 }),
  );
  const part: fc.Arbitrary<Part> = fc.oneof(
    url.map((u) => ({ type: "image_url" as const, image_url: { url: u } })),
    fc.record({ file_data: url, filename: fc.oneof(fc.string({ maxLength: 20 }), fc.constantFrom("a\nb.pdf", "x\r\n[left out]")) }, { requiredKeys: [] }).map((file) => ({ type: "file" as const, file })),
    fc.string({ maxLength: 10 }).map((text) => ({ type: "text" as const, text })),
  );
  const inputs = fc.subarray([...MODEL_INPUTS], { minLength: 1 });

  it("sends at most eight, each of a kind the model reads, and names every other in one line", () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 20 }), fc.array(part, { maxLength: 12 }), inputs, (text, parts, reads) => {
        const got = partsFor(text, parts, reads);
        const media = (ps: readonly Part[]) => ps.filter((p) => p.type !== "text");
        expect(media(got.parts).length).toBeLessThanOrEqual(PARTS_MAX);
        expect(media(got.parts).length + got.leftOut.length).toBe(media(parts).length);
        for (const p of got.parts) {
          if (p.type === "image_url") expect(reads).toContain("image");
          if (p.type === "file") expect(reads).toContain("document");
        }
        if (got.leftOut.length === 0) expect(got.text).toBe(text);
        else {
          expect(got.text.startsWith(text)).toBe(true);
          // The note is one line: a part's name can't break it.
          expect(got.text.slice(text.length).replace(/^\n/, "")).not.toMatch(/[\r\n]/);
        }
      }),
      { numRuns: 300, ...seed },
    );
  });
});
