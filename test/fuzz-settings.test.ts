// Settings, fuzzed: valid ones, valid ones broken in one place (a key missing, a wrong type, an unknown
// key, a huge string, deep nesting), and text that is not settings at all, through the parser many
// times and through `configure` a few. Each is either accepted and written exactly as given (readSettings
// reads back what was sent), or refused with one line that never quotes the key, writing nothing.
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PARAMS_DEPTH_MAX, SECTION_NAMES, VERBOSITIES } from "../protocol/index.js";
import { parseSettings, readSettings, SettingsError, writeSettings } from "../store/index.js";
import { assertBuilt, BIN, MAIN } from "./fixtures/built.js";
import { run } from "./fixtures/child.js";

const SECRET = "sk-SECRET-fuzz";
/** FC_SEED=N reruns a failure with the seed fast-check printed for it. */
const seed = process.env.FC_SEED ? { seed: Number(process.env.FC_SEED) } : {};
let tmp: string;

beforeAll(() => {
  tmp = mkdtempSync(join(tmpdir(), "lnk-fuzz-settings-"));
});
afterAll(() => {
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

// ---- what is sent ---------------------------------------------------------------------------------

const text = fc.string({ maxLength: 30 });
const name = fc.string({ minLength: 1, maxLength: 30 });
const tokens = fc.integer({ min: 1, max: 2_000_000 });
/** A bound in seconds: more than nothing, at most a day. */
const seconds = fc.double({ min: 0.001, max: 86_400, noNaN: true });
/** Keys JSON objects may hold that a JavaScript object treats specially. */
const odd = fc.constantFrom("__proto__", "constructor", "prototype", "toString", "hasOwnProperty");
const noteWord = fc.stringMatching(/^[a-z0-9][a-z0-9._-]{0,10}$/);
/** A skill's or a tool's name. */
const word = fc.stringMatching(/^[a-z0-9][a-z0-9_-]{0,10}$/);
const hostilePath = fc.constantFrom("../../etc/passwd", "/etc/shadow", "a/../../b", "notes\u0000.md", ".hidden", "C:\\x");

/**
 * Settings as a user writes them. With `hostile`, now and then a key a JavaScript object treats
 * specially or a path that leads out of the folder, which may be refused; without, each is accepted.
 */
function settingsOf(hostile: boolean) {
  const sometimes = <T, U>(usual: fc.Arbitrary<T>, weight: number, odd: fc.Arbitrary<U>): fc.Arbitrary<T | U> =>
    hostile ? fc.oneof({ weight, arbitrary: usual }, { weight: 1, arbitrary: odd }) : usual;
  return fc.record(
    {
      model: fc.record(
        {
          provider: name,
          name,
          base_url: fc.webUrl({ validSchemes: ["http", "https"] }),
          key: fc.string({ maxLength: 8 }).map((s) => `${SECRET}-${s}`),
          answer: tokens,
          params: fc.dictionary(sometimes(fc.string({ maxLength: 12 }), 1, odd), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 3 }),
        },
        { requiredKeys: ["provider", "name", "base_url", "key"] },
      ),
      window: fc.record({ max: tokens, link_max: tokens, answer: tokens, margin: fc.nat(), unknown: tokens, trained: fc.boolean() }, { requiredKeys: [] }),
      instructions: fc.dictionary(
        sometimes(fc.constantFrom(...SECTION_NAMES), 6, odd),
        fc.record({ text, max: fc.nat(), owner: text }, { requiredKeys: [] }),
        { maxKeys: 3 },
      ),
      identity: fc.record({ persona: text, owner: text, standing: text, skills: fc.array(sometimes(word, 1, fc.oneof(text, hostilePath)), { maxLength: 3 }) }, { requiredKeys: [] }),
      // A note's path and source are words (man lnk-link-harness(1), "remembered"): a hostile one, sometimes.
      remembered: fc.array(
        fc.record({
          path: sometimes(fc.array(noteWord, { minLength: 1, maxLength: 3 }).map((p) => p.join("/")), 4, hostilePath),
          text,
          source: sometimes(noteWord, 6, name),
        }),
        { maxLength: 3 },
      ),
      tools: fc.dictionary(sometimes(word, 6, odd), name, { maxKeys: 3 }),
      environment: fc.record({ files: sometimes(text, 1, hostilePath), channels: fc.array(text, { maxLength: 3 }) }, { requiredKeys: [] }),
      verbosity: fc.constantFrom(...VERBOSITIES),
      timeouts: fc.record(
        { model: seconds, model_idle: seconds, retry_wait: fc.oneof(fc.constant(0), seconds), tool_call: seconds, tool_idle: seconds },
        { requiredKeys: [] },
      ),
    },
    { requiredKeys: ["model"] },
  );
}
const validSettings = settingsOf(true);
/** Settings with nothing hostile in them, not even a key `__proto__` that fast-check makes on its own: each one is accepted. */
const cleanSettings = settingsOf(false).filter((v) => !places(v).some((at) => at.at(-1) === "__proto__"));

/** Every place in a JSON value, as a path of keys. */
function places(v: unknown, at: (string | number)[] = []): (string | number)[][] {
  const out = [at];
  if (Array.isArray(v)) v.forEach((x, i) => out.push(...places(x, [...at, i])));
  else if (v !== null && typeof v === "object") for (const [k, x] of Object.entries(v)) out.push(...places(x, [...at, k]));
  return out;
}

const deep = (depth: number): unknown => {
  let v: unknown = 1;
  for (let i = 0; i < depth; i++) v = depth % 2 ? [v] : { d: v };
  return v;
};

type Op = "delete" | "replace" | "unknown key" | "huge" | "deep" | "null";

/** The settings with one place broken. */
function mutate(settings: unknown, pick: number, op: Op, value: unknown): unknown {
  const copy: unknown = JSON.parse(JSON.stringify(settings));
  const all = places(copy);
  const path = all[pick % all.length] ?? [];
  const replacement = op === "huge" ? "u".repeat(300_000) : op === "deep" ? deep(2000) : op === "null" ? null : value;
  if (path.length === 0) return op === "unknown key" && copy && typeof copy === "object" ? { ...copy, bogus: value } : replacement;
  let parent: unknown = copy;
  for (const k of path.slice(0, -1)) parent = (parent as Record<string | number, unknown>)[k];
  const last = path.at(-1) as string | number;
  const p = parent as Record<string | number, unknown>;
  if (op === "delete") {
    if (Array.isArray(p)) p.splice(Number(last), 1);
    else delete p[last];
  } else if (op === "unknown key") {
    const node = p[last];
    if (node && typeof node === "object" && !Array.isArray(node)) (node as Record<string, unknown>)["x-unknown"] = value;
    else p[last] = value;
  } else p[last] = replacement;
  return copy;
}

/** Text to give `configure`: printed short in a counterexample. */
interface Input {
  text: string;
}
const input = (t: string, what: string): Input => ({ text: t, [fc.toStringMethod]: () => `${what}: ${t.length > 200 ? `${t.slice(0, 200)}… (${t.length})` : t}` }) as Input;

const inputs: fc.Arbitrary<Input> = fc.oneof(
  { weight: 3, arbitrary: validSettings.map((s) => input(JSON.stringify(s), "valid")) },
  {
    weight: 5,
    arbitrary: fc
      .tuple(validSettings, fc.nat(), fc.constantFrom<Op>("delete", "replace", "unknown key", "huge", "deep", "null"), fc.jsonValue({ maxDepth: 2 }))
      .map(([s, pick, op, value]) => input(JSON.stringify(mutate(s, pick, op, value)), `broken (${op})`)),
  },
  { weight: 1, arbitrary: fc.jsonValue({ maxDepth: 3 }).map((v) => input(JSON.stringify(v), "any JSON")) },
  {
    weight: 1,
    arbitrary: fc
      .tuple(validSettings, fc.nat(), fc.constantFrom("cut", "bom", "trailing", "comment", "single quotes"))
      .map(([s, at, how]) => {
        const t = JSON.stringify(s, null, 2);
        const broken =
          how === "cut" ? t.slice(0, at % t.length) : how === "bom" ? `\uFEFF${t}` : how === "trailing" ? `${t} x` : how === "comment" ? `// mine\n${t}` : t.replace(/"/g, "'");
        return input(broken, `not JSON (${how})`);
      }),
  },
  { weight: 1, arbitrary: fc.string({ maxLength: 100 }).map((t) => input(t, "any text")) },
);

/** What parseSettings is expected to have kept: the JSON as sent, as a JSON round trip writes it. */
const asSent = (t: string): unknown => JSON.parse(JSON.stringify(JSON.parse(t)));

/** Checks one input in-process; returns whether it was accepted. */
function parsedAsPromised(i: Input, agent: string): boolean {
  let settings;
  try {
    settings = parseSettings(i.text);
  } catch (e) {
    expect(e).toBeInstanceOf(SettingsError);
    const message = (e as Error).message;
    expect(message).not.toMatch(/\n/);
    expect(message).not.toContain(SECRET);
    expect(message.length).toBeLessThan(4000);
    return false;
  }
  // Accepted: exactly what was sent, nothing dropped or changed, and it reads back the same.
  expect(settings).toEqual(asSent(i.text));
  writeSettings({ dir: agent }, settings);
  expect(readSettings({ dir: agent })).toEqual(settings);
  expect(statSync(join(agent, "config.json")).mode & 0o777).toBe(0o600);
  return true;
}

describe("settings, fuzzed", () => {
  it("a key named __proto__, which zod's records pass over, is refused rather than dropped", () => {
    const model = { provider: "p", name: "m", base_url: "http://127.0.0.1:9/v1" };
    for (const [settings, where] of [
      [{ model: { ...model, params: JSON.parse('{"__proto__": {"temperature": 0}}') } }, "model.params"],
      [{ model, instructions: JSON.parse('{"__proto__": {"text": "x"}}') }, "instructions"],
      [{ model, tools: JSON.parse('{"__proto__": "node tool.js"}') }, "tools"],
    ] as const) {
      expect(() => parseSettings(JSON.stringify(settings))).toThrow(new SettingsError(`invalid settings: ${where}: the key "__proto__" is not allowed`));
    }
  });

  it(`a model parameter nesting deeper than ${PARAMS_DEPTH_MAX} arrays and objects is refused, naming it; one as deep is taken`, async () => {
    const model = { provider: "p", name: "m", base_url: "http://127.0.0.1:9/v1", key: SECRET };
    /** `depth` arrays, one in another (as JSON.parse makes them, without recursion). */
    const nested = (depth: number): string => `${"[".repeat(depth)}${"]".repeat(depth)}`;
    fc.assert(
      fc.property(word, fc.integer({ min: 1, max: 2 * PARAMS_DEPTH_MAX }), (key, depth) => {
        const text = `{"model": ${JSON.stringify({ ...model, params: { temperature: 0.2 } }).slice(0, -2)}, ${JSON.stringify(key)}: ${nested(depth)}}}}`;
        if (depth <= PARAMS_DEPTH_MAX) expect(JSON.stringify(parseSettings(text).model.params?.[key])).toBe(nested(depth));
        else expect(() => parseSettings(text)).toThrow(new SettingsError(`invalid settings: model.params.${key}: nests deeper than ${PARAMS_DEPTH_MAX} arrays and objects`));
      }),
      { numRuns: 200, ...seed },
    );
    // 400,000 deep, within config.json's 1 MiB: read by the command, refused in one line naming it.
    const agent = join(tmp, "deep-params");
    writeSettings({ dir: agent }, parseSettings(JSON.stringify({ model })));
    const config = join(agent, "config.json");
    writeFileSync(config, readFileSync(config, "utf8").replace(/"key":/, `"params": {"x": ${nested(400_000)}}, "key":`));
    const r = await run(process.execPath, [MAIN, "instructions", "--agent", agent], { ms: 30_000 });
    expect([r.code, r.stderr]).toEqual([1, `lnk-link-harness: ${config}: invalid settings: model.params.x: nests deeper than ${PARAMS_DEPTH_MAX} arrays and objects\n`]);
  });

  it("a timeout that is not a number of seconds a timer can hold is refused, naming it", () => {
    const model = { provider: "p", name: "m", base_url: "http://127.0.0.1:9/v1", key: SECRET };
    const bad: [string, string][] = [
      ["model", "0"],
      ["model", "-1"],
      ["model_idle", "86401"],
      ["model_idle", "1e999"],
      ["tool_call", "1e308"],
      ["tool_call", "-1e-9"],
      ["tool_idle", '"60"'],
      ["tool_idle", "null"],
      ["retry_wait", "-0.5"],
      ["retry_wait", "true"],
      ["model", "[]"],
      ["model", "{}"],
      ["__proto__", "1"],
      ["total", "1"],
    ];
    for (const [key, value] of bad) {
      const text = `{"model": ${JSON.stringify(model)}, "timeouts": {"${key}": ${value}}}`;
      expect(() => parseSettings(text), `${key}: ${value}`).toThrow(SettingsError);
      try {
        parseSettings(text);
      } catch (e) {
        expect((e as Error).message).toMatch(/timeouts/);
        expect((e as Error).message).not.toContain(SECRET);
      }
    }
    const bounds = { model: 0.5, model_idle: 86_400, retry_wait: 0, tool_call: 1, tool_idle: 0.001 };
    expect(parseSettings(JSON.stringify({ model, timeouts: bounds })).timeouts).toEqual(bounds);
  });

  it("the parser: each is accepted and reads back as sent, or refused with one line that never quotes the key", () => {
    const agent = join(tmp, "parser");
    let accepted = 0;
    let refused = 0;
    fc.assert(
      fc.property(inputs, (i) => {
        if (parsedAsPromised(i, agent)) accepted++;
        else refused++;
      }),
      { numRuns: 1500, endOnFailure: true, ...seed },
    );
    // Both ways were taken, often.
    expect(accepted).toBeGreaterThan(100);
    expect(refused).toBeGreaterThan(100);
  });

  it("settings with nothing hostile in them are each accepted, as sent", () => {
    const agent = join(tmp, "clean");
    fc.assert(
      fc.property(cleanSettings, (v) => {
        // A refusal fails with its reason.
        expect(() => parseSettings(JSON.stringify(v))).not.toThrow();
        expect(parsedAsPromised(input(JSON.stringify(v), "clean"), agent)).toBe(true);
      }),
      { numRuns: 300, endOnFailure: true, ...seed },
    );
  });

  it("configure: accepted and written as sent, or refused with exit 2, one line on stderr, config.json and the folder unchanged", async () => {
    assertBuilt([BIN, "dist/daemon/commands.js", "dist/store/settings.js"], ["daemon", "store", "protocol"]);
    const agent = join(tmp, "cli");
    writeSettings({ dir: agent }, parseSettings(JSON.stringify({ model: { provider: "p", name: "m", base_url: "http://127.0.0.1:9/v1", key: SECRET } })));
    let n = 0;
    const outcomes = { accepted: 0, refused: 0 };
    // Half of them settings with nothing hostile in them, which are accepted, so both ways are taken in a few runs.
    const some = fc.oneof(cleanSettings.map((v) => input(JSON.stringify(v), "clean")), inputs);
    await fc.assert(
      fc.asyncProperty(some, fc.boolean(), async (i, fromFile) => {
        const before = readFileSync(join(agent, "config.json"), "utf8");
        const files = readdirSync(agent).sort();
        let args = ["configure", "--agent", agent];
        if (fromFile) {
          const file = join(tmp, `input-${++n}.json`);
          writeFileSync(file, i.text);
          args = [...args, file];
        }
        const r = await run(process.execPath, [MAIN, ...args], { ...(fromFile ? {} : { input: i.text }), ms: 30_000 });
        const lines = r.stderr.split("\n").filter((l) => l !== "");
        expect(lines, r.stderr).toHaveLength(1);
        expect(r.stdout).toBe("");
        outcomes[r.code === 0 ? "accepted" : "refused"]++;
        if (r.code === 0) {
          expect(lines[0]).toMatch(/^lnk-link-harness: settings written to /);
          expect(readSettings({ dir: agent })).toEqual(asSent(i.text));
        } else {
          expect(r.code, r.stderr).toBe(2);
          expect(lines[0]).toMatch(/^lnk-link-harness: /);
          expect(lines[0]).not.toContain(SECRET);
          expect(readFileSync(join(agent, "config.json"), "utf8")).toBe(before);
          expect(readdirSync(agent).sort()).toEqual(files);
        }
        // The parser in-process agrees with the command.
        let parsed = true;
        try {
          parseSettings(i.text);
        } catch {
          parsed = false;
        }
        expect(r.code === 0).toBe(parsed);
      }),
      { numRuns: 20, endOnFailure: true, ...seed },
    );
    expect(outcomes.accepted).toBeGreaterThan(0);
    expect(outcomes.refused).toBeGreaterThan(0);
  });
});
