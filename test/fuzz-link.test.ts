// Fuzzing the inputs of dense deployment: challenges and answers of _link/prove, _link/recover's
// params, SharedAgents files (--agents), requests routed on --agents stdio and Bind lines (--blank).
// Each is answered or refused in one clear line, never with the key, and leaves nothing written and
// the process as it was (an agent's bound of unanswered requests whole).
import { createHmac } from "node:crypto";
import { mkdirSync, readdirSync, statSync, writeFileSync } from "node:fs";
import { connect } from "node:net";
import { join, relative } from "node:path";
import { createInterface } from "node:readline";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { UsageError } from "../daemon/cli.js";
import { PENDING_MAX } from "../daemon/front.js";
import { readAgentsFile } from "../daemon/shared.js";
import { configure, scriptedSettings, startDaemon, tempDir, until, type Daemon } from "./acp-client.js";
import { assertBuilt, BIN } from "./fixtures/built.js";
import { linkFreeEnv } from "./fixtures/env.js";
import { startModelServer, type ModelServer } from "./model-server.js";

const KEY = "fuzz-key-0b7d2e94c1a35f68";
const runs = (n: number) => ({ numRuns: Number(process.env.FUZZ_RUNS ?? n) });
const hmac = (text: string) => createHmac("sha256", KEY).update(text, "utf8").digest("hex");

const Answer = z.union([
  z.object({ jsonrpc: z.literal("2.0"), id: z.union([z.string(), z.number(), z.null()]), result: z.unknown() }).strict(),
  z.object({ jsonrpc: z.literal("2.0"), id: z.union([z.string(), z.number(), z.null()]), error: z.object({ code: z.number(), message: z.string(), data: z.unknown().optional() }).strict() }).strict(),
]);
type Answer = z.infer<typeof Answer>;

let tmp: { path: string; remove(): void };
let server: ModelServer;
let daemon: Daemon;
const answers = new Map<number, (a: Answer) => void>();
let nextId = 1;

function ask(method: string, params: unknown): Promise<Answer> {
  const id = nextId++;
  return new Promise((resolve) => {
    answers.set(id, resolve);
    daemon.child.stdin?.write(`${JSON.stringify({ jsonrpc: "2.0", id, method, params })}\n`);
  });
}

/** Every file under `root`, with its size. */
function listing(root: string): string[] {
  return readdirSync(root, { recursive: true, withFileTypes: true })
    .map((e) => join(e.parentPath, e.name))
    .map((p) => `${relative(root, p)} ${statSync(p).isFile() ? statSync(p).size : "/"}`)
    .sort();
}

beforeAll(async () => {
  assertBuilt([BIN, "dist/acp/link.js", "dist/daemon/blank.js", "dist/daemon/shared.js"], ["acp", "daemon", "turn", "store", "protocol"]);
  tmp = tempDir("lnk-fuzz-link-");
  server = await startModelServer();
  configure(join(tmp.path, "agent"), scriptedSettings(server.url));
  daemon = startDaemon(["--agent", join(tmp.path, "agent")], linkFreeEnv({ LNK_KEY: KEY }));
  createInterface({ input: daemon.child.stdout as NodeJS.ReadableStream }).on("line", (line) => {
    const a = Answer.safeParse(JSON.parse(line));
    if (a.success && typeof a.data.id === "number") answers.get(a.data.id)?.(a.data);
  });
  expect(await ask("initialize", { protocolVersion: 1, clientCapabilities: {} })).toHaveProperty("result");
});

afterAll(async () => {
  await daemon?.stop("SIGKILL");
  await server?.close();
  tmp?.remove();
});

const json = fc.jsonValue({ maxDepth: 3 });
const challenge = fc.oneof(
  fc.string({ minLength: 0, maxLength: 40 }),
  fc.string({ unit: "grapheme", minLength: 4, maxLength: 20 }),
  fc.integer({ min: 1000, max: 1030 }).map((n) => "c".repeat(n)),
  fc.constantFrom("lnk-link-harness client proof 0123456789", "\u0000".repeat(16), "é".repeat(8), "é".repeat(7)),
  json,
);

describe("_link/prove and _link/recover, fuzzed", () => {
  it("a challenge is answered with its HMAC once, or refused -32602; an answer proves nothing it shouldn't; the key is never said", async () => {
    const answered = new Set<string>();
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(
          fc.record({ challenge }, { requiredKeys: [] }),
          fc.record({ challenge, answer: fc.oneof(fc.stringMatching(/^[0-9a-f]{64}$/), fc.string()) }, { requiredKeys: [] }),
          json,
        ),
        async (params) => {
          const a = await ask("_link/prove", params);
          expect(JSON.stringify(a)).not.toContain(KEY);
          if ("error" in a) {
            expect([-32602, -32000, -32600], a.error.message).toContain(a.error.code);
            expect(a.error.message).not.toMatch(/\n/);
            return;
          }
          const p = params as { challenge: string; answer?: string };
          const r = z.object({ hmac: z.string().optional(), nonce: z.string().optional(), proved: z.boolean() }).strict().parse(a.result);
          // Stdio is never gated: a random answer never matches a nonce, so a result means none was given.
          expect(p.answer).toBeUndefined();
          expect(typeof p.challenge).toBe("string");
          expect(Buffer.byteLength(p.challenge)).toBeGreaterThanOrEqual(16);
          expect(Buffer.byteLength(p.challenge)).toBeLessThanOrEqual(1024);
          expect(answered.has(p.challenge)).toBe(false);
          answered.add(p.challenge);
          expect(r.hmac).toBe(hmac(p.challenge));
          // Each challenge answered is refused the next time.
          const again = await ask("_link/prove", { challenge: p.challenge });
          expect(again).toMatchObject({ error: { code: -32602 } });
        },
      ),
      runs(200),
    );
  });

  it("_link/recover with any params: answers, or refuses -32602, and hands over nothing here", async () => {
    await fc.assert(
      fc.asyncProperty(json, async (params) => {
        const a = await ask("_link/recover", params);
        if ("error" in a) expect([-32602, -32600]).toContain(a.error.code);
        else expect(a.result).toEqual({ answers: [] });
      }),
      runs(100),
    );
  });
});

/** A valid SharedAgents list of two agents, with their folders made and configured. */
function sharedAgents(root: string, model = "http://127.0.0.1:9/v1") {
  return ["a", "b"].map((name) => {
    const own = join(root, name, "own");
    mkdirSync(join(root, name, "files"), { recursive: true });
    configure(own, scriptedSettings(model));
    return { name, id: `${name}-id`, owner: "o", home: join(root, name), files: join(root, name, "files"), agent: own, port: 0, env: {} };
  });
}

describe("--agents files, fuzzed", () => {
  it("any file is a list of agents that holds, or one line of UsageError, and nothing is written", () => {
    const root = join(tmp.path, "shared");
    mkdirSync(root);
    const valid = sharedAgents(root);
    const before = listing(root);
    const field = fc.constantFrom("name", "id", "owner", "home", "files", "agent", "port", "env", "extra");
    const value = fc.oneof(
      json,
      fc.constantFrom("", "relative/path", "~/agent", root, join(root, "a", "own"), join(root, "a", "own", "inside"), join(root, "nowhere"), "/", -1, 65536, 0, 80, "a", "b-id"),
    );
    const mutated = fc.tuple(fc.nat({ max: 1 }), field, value, fc.boolean()).map(([at, key, v, drop]) => {
      const list: Record<string, unknown>[] = valid.map((a) => ({ ...a }));
      const target = list[at] as Record<string, unknown>;
      if (drop) delete target[key];
      else target[key] = v;
      return JSON.stringify(list);
    });
    const text = fc.oneof({ weight: 4, arbitrary: mutated }, { weight: 1, arbitrary: json.map((j) => JSON.stringify(j)) }, { weight: 1, arbitrary: fc.string() });
    let n = 0;
    fc.assert(
      fc.property(text, (content) => {
        const file = join(tmp.path, `agents-${n++}.json`);
        writeFileSync(file, content);
        try {
          const agents = readAgentsFile(file);
          // What holds: each agent's own folder is configured, names, ports and folders its own.
          expect(new Set(agents.flatMap((a) => [a.name, a.id])).size).toBe(agents.flatMap((a) => [...new Set([a.name, a.id])]).length);
          for (const a of agents) expect(statSync(join(a.agent ?? a.files, "config.json")).isFile()).toBe(true);
        } catch (e) {
          expect(e).toBeInstanceOf(UsageError);
          expect((e as Error).message).not.toMatch(/\n/);
        }
        expect(listing(root)).toEqual(before);
      }),
      runs(300),
    );
  });
});

describe("--agents on stdio, fuzzed", () => {
  let shared: Daemon;
  const got: Answer[] = [];

  beforeAll(async () => {
    const root = join(tmp.path, "shared-stdio");
    mkdirSync(root);
    const file = join(root, "agents.json");
    writeFileSync(file, JSON.stringify(sharedAgents(root, server.url)));
    shared = startDaemon(["--agents", file], linkFreeEnv());
    // Answers alone: a prompt's turn sends its updates too.
    createInterface({ input: shared.child.stdout as NodeJS.ReadableStream }).on("line", (line) => {
      const message: unknown = JSON.parse(line);
      if (typeof message === "object" && message !== null && "method" in message) return;
      got.push(Answer.parse(message));
    });
    shared.child.stdin?.write(`${JSON.stringify({ jsonrpc: "2.0", id: 0, method: "initialize", params: { protocolVersion: 1, clientCapabilities: {} } })}\n`);
    await until(() => got.length === 1, "initialized");
  });
  afterAll(() => shared?.stop("SIGKILL"));

  it("a request of any id and any method that is no name, or an initialize, is answered once, by one agent; an initialize without an id not at all", async () => {
    const id = fc.oneof(json.filter((v) => !(typeof v === "string" && v.startsWith("after-"))), fc.constant(undefined));
    const method = fc.oneof(json.filter((v) => typeof v !== "string"), fc.constant("initialize"));
    const params = fc.oneof(fc.constant({ protocolVersion: 1, clientCapabilities: {} }), json);
    let k = 0;
    await fc.assert(
      fc.asyncProperty(id, method, params, async (i, m, p) => {
        const before = got.length;
        const after = [`after-${k}-a`, `after-${k}-b`];
        k++;
        shared.child.stdin?.write(`${JSON.stringify({ jsonrpc: "2.0", ...(i !== undefined ? { id: i } : {}), method: m, params: p })}\n`);
        // A request of each agent after it: once both are answered, so is the line before them, by each agent that took it.
        for (const [n, agent] of after.entries()) shared.child.stdin?.write(`${JSON.stringify({ jsonrpc: "2.0", id: agent, method: "session/list", params: { _meta: { link: { agent: n === 0 ? "a" : "b" } } } })}\n`);
        await until(() => got.slice(before).filter((a) => after.includes(a.id as string)).length === 2, "answered after");
        const answers = got.slice(before).filter((a) => !after.includes(a.id as string));
        expect(answers).toHaveLength(m === "initialize" && i === undefined ? 0 : 1);
      }),
      runs(100),
    );
  });

  it("requests to one agent under any id, any version, sent twice or once, leave its bound of unanswered requests whole once answered", async () => {
    const id = fc.oneof(json.filter((v) => !(typeof v === "string" && v.startsWith("after-"))), fc.integer(), fc.constant(undefined));
    const version = fc.constantFrom("2.0", "1.0", 2, null, undefined);
    const method = fc.constantFrom("session/list", "session/load", "session/cancel", "session/set_mode", "_link/recover", "no/such");
    const params = fc.dictionary(fc.string({ maxLength: 8 }), json, { maxKeys: 3 }).map((extra) => ({ ...extra, _meta: { link: { agent: "a" } } }));
    let k = 0;
    await fc.assert(
      fc.asyncProperty(id, version, method, params, fc.integer({ min: 1, max: 3 }), async (i, v, m, p, times) => {
        const after = `after-held-${k++}`;
        const line = `${JSON.stringify({ ...(v !== undefined ? { jsonrpc: v } : {}), ...(i !== undefined ? { id: i } : {}), method: m, params: p })}\n`;
        for (let n = 0; n < times; n++) shared.child.stdin?.write(line);
        shared.child.stdin?.write(`${JSON.stringify({ jsonrpc: "2.0", id: after, method: "session/list", params: { _meta: { link: { agent: "a" } } } })}\n`);
        await until(() => got.some((a) => a.id === after), "answered after");
      }),
      runs(100),
    );
    // Then, its model stalled, the agent holds as many prompts as ever: the bound's worth, and refuses the next.
    const from = got.length;
    const send = (msg: object) => shared.child.stdin?.write(`${JSON.stringify({ jsonrpc: "2.0", ...msg })}\n`);
    send({ id: "held-session", method: "session/new", params: { cwd: "/", mcpServers: [], _meta: { link: { agent: "a", thread: "held" } } } });
    await until(() => got.some((a) => a.id === "held-session"), "a session");
    let letGo!: () => void;
    const stalled = new Promise<void>((resolve) => (letGo = resolve));
    server.fallback = async () => {
      await stalled;
      return { text: "at last" };
    };
    for (let n = 0; n <= PENDING_MAX; n++) send({ id: `held-${n}`, method: "session/prompt", params: { sessionId: "held", prompt: [{ type: "text", text: `${n}` }], _meta: { link: { agent: "a" } } } });
    await until(() => got.slice(from).some((a) => a.id === `held-${PENDING_MAX}`), "the one past the bound refused");
    expect(got.slice(from).filter((a) => typeof a.id === "string" && a.id.startsWith("held-") && a.id !== "held-session").map((a) => [a.id, "error" in a ? a.error.code : "answered"])).toEqual([[`held-${PENDING_MAX}`, -32603]]);
    letGo();
    await until(() => got.slice(from).filter((a) => typeof a.id === "string" && /^held-\d+$/.test(a.id)).length === PENDING_MAX + 1, "every prompt answered", 30_000);
  });
});

describe("Bind lines, fuzzed", () => {
  let blank: Daemon;
  let control: string;
  let bind: Record<string, unknown>;
  let store: string;

  beforeAll(async () => {
    const root = join(tmp.path, "blank");
    store = join(root, "store");
    mkdirSync(store, { recursive: true });
    control = join(root, "c.sock");
    bind = { agent: { name: "fz", id: "fz-1", owner: "o" }, key: KEY, settings: scriptedSettings(server.url, { model: { provider: "s", name: "m", base_url: server.url, key: "$LNK_KEY" } }), store };
    blank = startDaemon(["--blank", control], linkFreeEnv());
    await blank.waitForLog(/"blank: waiting for a Bind"/);
  });
  afterAll(() => blank?.stop("SIGKILL"));

  /** Sends a line and reads its answer; `ended`: without its newline, the client's side ended after it. */
  const send = (line: string, ended = false) =>
    new Promise<string>((resolve, reject) => {
      const s = connect(control);
      let got = "";
      s.setEncoding("utf8").on("data", (d: string) => (got += d));
      s.once("error", reject);
      s.once("close", () => resolve(got));
      if (ended) s.end(line);
      else s.write(`${line}\n`);
    });

  it("a malformed, mistyped or impossible Bind gets one line of {\"error\"}, without the key, and the process stays blank and able to be bound", async () => {
    // Each field made wrong in a way that can't still be right: a key that is not a string, empty or
    // holds the placeholder; a folder that is relative, missing or not a folder; an agent or settings
    // of the wrong shape; a field Bind doesn't have.
    const notPath = json.filter((v) => typeof v !== "string" || !v.startsWith("/"));
    const wrong: Record<string, fc.Arbitrary<unknown>> = {
      agent: fc.oneof(json, fc.constant({ name: "x" }), fc.constant({ name: "", id: "i", owner: "o" })),
      key: fc.oneof(json.filter((v) => typeof v !== "string"), fc.constantFrom("", "holds $LNK_KEY", "$LNK_KEY")),
      settings: fc.oneof(json, fc.constant({ model: { provider: "p", name: "n", base_url: "ftp://x" } }), fc.constant({ model: { provider: "p", name: "n", base_url: "$LNK_KEY" } })),
      store: fc.oneof(notPath, fc.constantFrom("", "relative", "/nowhere/at/all", `${control}`)),
      files: fc.oneof(notPath, fc.constantFrom("relative", "/nowhere/at/all", `${control}`)),
      extra: json,
    };
    const broken = fc.constantFrom(...Object.keys(wrong)).chain((k) =>
      fc.tuple(fc.constant(k), wrong[k] as fc.Arbitrary<unknown>, fc.boolean()).map(([key, v, drop]) => {
        const b: Record<string, unknown> = { ...bind };
        // Left out, files is the store's: still a Bind; the others can't be left out.
        if (drop && key !== "files" && key !== "extra") delete b[key];
        else b[key] = v;
        return JSON.stringify(b);
      }),
    );
    const line = fc.oneof(broken, json.map((j) => JSON.stringify(j)), fc.string().filter((s) => !s.includes("\n")));
    const before = listing(store);
    await fc.assert(
      // Sent with its newline, or without one and the side ended (a line of nothing is no line then).
      fc.asyncProperty(line, fc.boolean(), async (l, ended) => {
        if (ended && l === "") return;
        const got = await send(l, ended);
        expect(got.endsWith("\n") && got.indexOf("\n") === got.length - 1, got).toBe(true);
        const answer = z.object({ error: z.string() }).strict().parse(JSON.parse(got));
        expect(answer.error).not.toContain(KEY);
        expect(listing(store)).toEqual(before);
      }),
      runs(150),
    );
    expect(blank.stderr()).not.toMatch(/"bound"/);
    expect(blank.stderr()).not.toContain(KEY);
    expect(JSON.parse(await send(JSON.stringify(bind)))).toEqual({});
    expect(JSON.parse(await send(JSON.stringify(bind)))).toEqual({ error: expect.stringContaining("bound already") });
  });
});
