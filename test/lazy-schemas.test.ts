// The bundle's ACP schemas made when first used (scripts/lazy-schemas.ts): the rewrite takes each
// schema whole, a schema is made only once asked for, and the SDK's own schema modules rewritten
// answer every value as the modules as written do, schema by schema.
import { createRequire } from "node:module";
import { join } from "node:path";
import { build, type Plugin } from "esbuild";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { ACP_SCHEMA_MODULES, lazyAcpSchemas, lazySchemas } from "../scripts/lazy-schemas.js";
import { ROOT } from "./fixtures/built.js";

type Exports = Record<string, unknown>;

/** Bundles `entry` (or `contents`) as the agent's bundle does, with or without the plugin, and runs it. */
async function load(o: { entry?: string; contents?: string; plugins: Plugin[] }): Promise<Exports> {
  const out = await build({
    ...(o.entry ? { entryPoints: [o.entry] } : { stdin: { contents: o.contents as string, resolveDir: ROOT, loader: "js" } }),
    bundle: true,
    format: "cjs",
    platform: "node",
    target: "node20",
    write: false,
    logLevel: "silent",
    plugins: o.plugins,
  });
  const module = { exports: {} as Exports };
  const run = new Function("module", "exports", "require", out.outputFiles[0]?.text as string) as (m: unknown, e: unknown, r: NodeJS.Require) => void;
  run(module, module.exports, createRequire(join(ROOT, "package.json")));
  return module.exports;
}

interface Schema {
  safeParse(v: unknown): { success: boolean; data?: unknown; error?: { issues: { code: string; path: PropertyKey[]; message: string }[] } };
}
const isSchema = (v: unknown): v is Schema => typeof v === "object" && v !== null && typeof (v as Schema).safeParse === "function";

/** What a schema answers of a value, as comparable data: what it gives, or where and why it refuses. */
function answer(schema: Schema, value: unknown): unknown {
  const r = schema.safeParse(value);
  if (r.success) return { ok: r.data };
  return { issues: r.error?.issues.map((i) => ({ code: i.code, path: i.path.map(String), message: i.message })) };
}

const MODULES = ["zod.gen.js", "guards.gen.js"].map((f) => join(ROOT, "node_modules/@agentclientprotocol/sdk/dist/v1/schema", f));

/** Messages as clients and agents send them, and some no one should. */
const SAMPLES: unknown[] = [
  { protocolVersion: 1, clientCapabilities: { fs: { readTextFile: true, writeTextFile: false }, terminal: true } },
  { protocolVersion: 1, agentCapabilities: { loadSession: true, promptCapabilities: { image: true } }, authMethods: [] },
  { cwd: "/home/a", mcpServers: [{ name: "fs", command: "npx", args: ["-y", "x"], env: [{ name: "K", value: "v" }] }] },
  { cwd: "/home/a", mcpServers: [{ type: "http", name: "h", url: "http://127.0.0.1:1/mcp", headers: [] }], _meta: { link: { thread: "t" } } },
  { sessionId: "s1", prompt: [{ type: "text", text: "hello" }] },
  {
    sessionId: "s1",
    prompt: [
      { type: "image", data: "AAAA", mimeType: "image/png" },
      { type: "resource_link", uri: "file:///a.txt", name: "a.txt" },
      { type: "resource", resource: { uri: "file:///b.txt", text: "b" } },
    ],
  },
  { sessionId: "s1", prompt: [{ type: "text" }] },
  { sessionId: "s1", prompt: [{ type: "mystery", text: "x" }] },
  { sessionId: 7, prompt: "hello" },
  { sessionId: "s1", update: { sessionUpdate: "agent_message_chunk", content: { type: "text", text: "hi" } } },
  { sessionId: "s1", update: { sessionUpdate: "tool_call", toolCallId: "c1", title: "echo", kind: "other", status: "pending" } },
  { sessionId: "s1", update: { sessionUpdate: "tool_call_update", toolCallId: "c1", status: "completed", content: [{ type: "content", content: { type: "text", text: "ok" } }] } },
  { sessionId: "s1", update: { sessionUpdate: "plan", entries: [{ content: "a", priority: "high", status: "pending" }] } },
  { sessionId: "s1", update: { sessionUpdate: "available_commands_update", availableCommands: [{ name: "stop", description: "Stops", input: { hint: "why" } }] } },
  { sessionId: "s1", update: { sessionUpdate: "usage_update", used: 10, size: 100 } },
  { sessionId: "s1", update: { sessionUpdate: "tool_call", toolCallId: "c1" } },
  { stopReason: "end_turn" },
  { stopReason: "sideways" },
  { sessionId: "s1", configId: "model", value: "m" },
  { outcome: { outcome: "selected", optionId: "allow" } },
  { mode: "form", message: "Fill", requestedSchema: { type: "object", properties: { a: { type: "string" } } } },
  { mode: "url", message: "Go", url: "https://example.org", elicitationId: "e" },
  { action: "accept", content: { a: "x" } },
  { action: "decline" },
  { code: -32602, message: "Invalid params" },
  null,
  "text",
  42,
  [],
  {},
];

describe("ACP schemas made when first used", () => {
  it("takes each schema's statement whole, past semicolons in strings and comments", async () => {
    const source = [
      'import * as z from "zod/v4";',
      'export const zA = z.string().max(3, { error: "no; not this (or that" });',
      "/** a note; with ( brackets */",
      "export const zB = z.object({",
      "  a: zA, // a part; of it",
      "  n: z.number().nullish(),",
      "});",
      'export const zMade = (globalThis.__lazyMade = (globalThis.__lazyMade ?? 0) + 1, z.union([zB, z.literal("x")]));',
      "export const other = 1;",
    ].join("\n");
    const { text, count } = lazySchemas(source);
    expect(count).toBe(3);
    // The statements after the last schema, and before the first, are left as they were.
    expect(text).toContain("export const other = 1;");
    const g = globalThis as { __lazyMade?: number };
    delete g.__lazyMade;
    const m = await load({ contents: text, plugins: [] });
    // Loaded, and not yet made.
    expect(g.__lazyMade).toBeUndefined();
    const zMade = m.zMade as Schema;
    expect(answer(zMade, { a: "abc" })).toEqual({ ok: { a: "abc" } });
    expect(answer(zMade, "x")).toEqual({ ok: "x" });
    expect((answer(zMade, { a: "abcd" }) as { issues: unknown[] }).issues.length).toBeGreaterThan(0);
    // Made once, whatever is asked of it after.
    expect(g.__lazyMade).toBe(1);
    // What stands for a schema is asked as the schema: its prototype, its keys, `in`, its parts.
    expect(Object.getPrototypeOf(m.zB)).not.toBe(Object.prototype);
    expect(Object.keys(m.zB as object).length).toBeGreaterThan(0);
    expect("_zod" in (m.zB as object)).toBe(true);
    expect((m.zB as { shape: Record<string, unknown> }).shape.a).toBe(m.zA);
    delete g.__lazyMade;
  });

  it("refuses what it cannot read rather than cut a statement in the wrong place", () => {
    expect(() => lazySchemas("export const zA = z.string().regex(/a;b/);")).toThrow(/regular expression/);
    expect(() => lazySchemas("export const zA = z.string(")).toThrow(/does not end/);
    expect(() => lazySchemas('export const zA = z.literal("a);')).toThrow(/not closed/);
    expect(lazySchemas("export const a = 1;\n").count).toBe(0);
  });

  it("is the plugin the bundle uses, for the SDK's two generated modules", () => {
    for (const path of MODULES) expect(ACP_SCHEMA_MODULES.test(path)).toBe(true);
    expect(ACP_SCHEMA_MODULES.test(join(ROOT, "node_modules/@agentclientprotocol/sdk/dist/v1/acp.js"))).toBe(false);
  });

  it("the SDK's schemas, rewritten, answer every value as the SDK's own do, schema by schema", async () => {
    let compared = 0;
    for (const entry of MODULES) {
      const eager = await load({ entry, plugins: [] });
      const lazy = await load({ entry, plugins: [lazyAcpSchemas] });
      expect(Object.keys(lazy).sort()).toEqual(Object.keys(eager).sort());
      const schemas = Object.keys(eager).filter((k) => isSchema(eager[k]));
      const guards = Object.keys(eager).filter((k) => typeof eager[k] === "object" && !isSchema(eager[k]));
      expect(schemas.length + guards.length).toBeGreaterThan(0);
      compared += schemas.length + guards.length;
      const same = (value: unknown) => {
        for (const k of schemas) expect(answer(lazy[k] as Schema, value), `${k}`).toEqual(answer(eager[k] as Schema, value));
        for (const k of guards) {
          for (const [name, f] of Object.entries(eager[k] as Record<string, unknown>)) {
            if (typeof f !== "function") continue;
            const g = (lazy[k] as Record<string, (v: unknown) => unknown>)[name] as (v: unknown) => unknown;
            expect(g(value), `${k}.${name}`).toEqual((f as (v: unknown) => unknown)(value));
          }
        }
      };
      for (const value of SAMPLES) same(value);
      // And values no one wrote: any JSON, and objects shaped like the messages above.
      fc.assert(
        fc.property(fc.oneof(fc.jsonValue(), fc.record({ sessionId: fc.string(), prompt: fc.array(fc.record({ type: fc.constantFrom("text", "image", "resource"), text: fc.string() })) })), (value) => {
          same(value);
        }),
        { numRuns: 60 },
      );
    }
    // The SDK's some two hundred schemas and its guards, not a few of them.
    expect(compared).toBeGreaterThan(150);
  });
});
