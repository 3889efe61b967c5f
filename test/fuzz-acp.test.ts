// The daemon's wire, fuzzed: every ACP request it serves with random and malformed params (wrong types,
// huge strings, deep nesting, unknown fields, hostile names), unknown methods, and raw lines that are
// not requests at all. Each request is answered, with a result or a JSON-RPC error, under its own id;
// a refused one writes nothing; nothing is ever written outside the agent's folder; the daemon stays up.
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { connect } from "node:net";
import { dirname, join, relative, sep } from "node:path";
import { createInterface } from "node:readline";
import type { Readable } from "node:stream";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { MAX_DEPTH, nestsDeeper } from "../daemon/lines.js";
import { configure, scriptedSettings, startDaemon, until, type Daemon } from "./acp-client.js";
import { assertBuilt, BIN, ROOT } from "./fixtures/built.js";
import { startModelServer, type ModelServer } from "./model-server.js";

/** Lines over this are oversized (LNK_ACP_MAX_BYTES), small enough to send many. */
const MAX_BYTES = 64 * 1024;
const ANSWER_MS = 20_000;
/** The conversation valid requests name, so the fuzz reaches past the session lookup. */
const MAIN = "fz-main";

const Id = z.union([z.string(), z.number(), z.null()]);
const RpcError = z.object({ code: z.number().int(), message: z.string(), data: z.unknown().optional() }).strict();
const Response = z.union([
  z.object({ jsonrpc: z.literal("2.0"), id: Id, result: z.unknown() }).strict(),
  z.object({ jsonrpc: z.literal("2.0"), id: Id, error: RpcError }).strict(),
]);
const Notification = z.object({ jsonrpc: z.literal("2.0"), method: z.string(), params: z.unknown().optional() }).strict();
type Response = z.infer<typeof Response>;

/** Errors that refuse a request: it must have written nothing. */
const REFUSALS = [-32700, -32600, -32601, -32602, -32002];
/** Link's methods this agent serves (fuzzed on their own, in fuzz-link.test.ts), and the port's stand-in, refused -32000. */
const LINK_SERVED = new Set(["_link/prove", "_link/recover", "_link/unproved"]);

/** The daemon on stdio, spoken to line by line. */
class Wire {
  private readonly answers = new Map<string, Response>();
  private readonly waiting = new Map<string, (r: Response) => void>();
  private readonly counts = new Map<string, number>();
  /** Errors answered with `id: null` (to lines whose request couldn't be read). */
  readonly nullErrors: number[] = [];
  private nullWaiters: (() => void)[] = [];
  /** stdout lines that are not JSON-RPC: stdout carries protocol messages only. */
  readonly strays: string[] = [];

  constructor(
    input: Readable,
    private readonly write: (text: string) => void,
  ) {
    // A connection the daemon closes fails what is still being written on it, and readline passes
    // its input's error on: the test sees the close where it looks for it.
    createInterface({ input })
      .on("line", (line) => this.take(line))
      .on("error", () => undefined);
  }

  private take(line: string): void {
    let raw: unknown;
    try {
      raw = JSON.parse(line);
    } catch {
      this.strays.push(line.slice(0, 200));
      return;
    }
    if (Notification.safeParse(raw).success) return;
    const parsed = Response.safeParse(raw);
    if (!parsed.success) {
      this.strays.push(line.slice(0, 200));
      return;
    }
    const r = parsed.data;
    if (r.id === null && "error" in r) {
      this.nullErrors.push(r.error.code);
      for (const w of this.nullWaiters.splice(0)) w();
      return;
    }
    const key = JSON.stringify(r.id);
    this.counts.set(key, (this.counts.get(key) ?? 0) + 1);
    const w = this.waiting.get(key);
    if (w) {
      this.waiting.delete(key);
      w(r);
    } else this.answers.set(key, r);
  }

  send(line: string): void {
    this.write(`${line}\n`);
  }

  /** How many answers came under this id (and are not yet taken). */
  count(id: string | number): number {
    return this.counts.get(JSON.stringify(id)) ?? 0;
  }

  /** The answer to the request with this id. */
  answer(id: string | number): Promise<Response> {
    const key = JSON.stringify(id);
    const got = this.answers.get(key);
    if (got) {
      this.answers.delete(key);
      return Promise.resolve(got);
    }
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiting.delete(key);
        reject(new Error(`no answer to request ${key} after ${ANSWER_MS} ms`));
      }, ANSWER_MS);
      this.waiting.set(key, (r) => {
        clearTimeout(timer);
        resolve(r);
      });
    });
  }

  /** Waits until `count` errors with `id: null` have come. */
  nullErrorCount(count: number): Promise<void> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`${this.nullErrors.length} id-null errors after ${ANSWER_MS} ms, not ${count}`)), ANSWER_MS);
      const check = () => {
        if (this.nullErrors.length >= count) {
          clearTimeout(timer);
          resolve();
        } else this.nullWaiters.push(check);
      };
      check();
    });
  }
}

let outer: string;
let agent: string;
let server: ModelServer;
let daemon: Daemon;
let wire: Wire;
let outside: string[];
let serial = 0;

/** Every file under `root` (but `skip`), with its size and time, and every folder. */
function listing(root: string, skip?: string): string[] {
  const out: string[] = [];
  const walk = (dir: string) => {
    for (const d of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, d.name);
      if (path === skip) continue;
      // A prompt's owed file goes once its answer was written, which may be while the next request is
      // being answered: a prompt's own, never one a refusal writes (it is made once the prompt is taken).
      if (/^owed-\d+-[0-9a-f]+(-\d+)?$/.test(d.name)) continue;
      // The next turn's files, made once a turn's lock is let go, which may be while the next request
      // is being answered: a turn's own, in a conversation's folder, never made for a refusal (the last test counts them).
      if (/^\.tmp-\d+-/.test(d.name) && dirname(dir) === join(agent, "chats") && statSync(path, { throwIfNoEntry: false })?.size === 0) continue;
      if (d.isDirectory()) {
        out.push(`${relative(root, path)}${sep}`);
        walk(path);
      } else {
        const st = statSync(path, { throwIfNoEntry: false });
        out.push(`${relative(root, path)} ${st?.size} ${st?.mtimeMs}`);
      }
    }
  };
  walk(root);
  return out.sort();
}

/** The agent's folder once no turn holds a lock in it: a turn makes its copy and mark after its answer. */
async function snapshot(): Promise<string[]> {
  const chats = join(agent, "chats");
  const held = () => existsSync(chats) && readdirSync(chats).some((t) => existsSync(join(chats, t, ".lock")));
  await until(() => !held(), "every lock let go");
  return listing(agent);
}

/** A request's id: whole numbers, strings and fractions alike, each used once. */
function nextId(kind: number): string | number {
  serial++;
  return kind === 0 ? serial : kind === 1 ? `fz-${serial}` : serial + 0.5;
}

async function request(method: string, params: unknown, idKind = 0): Promise<Response> {
  const id = nextId(idKind);
  wire.send(JSON.stringify({ jsonrpc: "2.0", id, method, ...(params === undefined ? {} : { params }) }));
  return wire.answer(id);
}

beforeAll(async () => {
  assertBuilt([BIN, "dist/acp/app.js", "dist/daemon/lines.js"], ["acp", "daemon", "turn", "store", "protocol"]);
  outer = mkdtempSync(join(tmpdir(), "lnk-fuzz-acp-"));
  // Deep enough that a name with a few `..` in it would still land inside `outer`, where it is seen.
  agent = join(outer, "a", "b", "c", "agent");
  mkdirSync(agent, { recursive: true });
  server = await startModelServer();
  configure(agent, scriptedSettings(server.url));
  outside = listing(outer, agent);
  daemon = startDaemon(["--agent", agent], { LNK_ACP_MAX_BYTES: String(MAX_BYTES) });
  const { stdin, stdout } = daemon.child;
  if (!stdin || !stdout) throw new Error("the daemon has no stdio pipes");
  wire = new Wire(stdout, (text) => stdin.write(text));
  expect(await request("initialize", { protocolVersion: 1, clientCapabilities: {} })).toHaveProperty("result");
  const made = await request("session/new", { cwd: agent, mcpServers: [], _meta: { link: { thread: MAIN } } });
  expect(made).toMatchObject({ result: { sessionId: MAIN } });
});

afterAll(async () => {
  await daemon?.stop("SIGKILL");
  await server?.close();
  if (outer) rmSync(outer, { recursive: true, force: true });
});

// ---- what is sent ---------------------------------------------------------------------------------

const HOSTILE = [
  "../../etc",
  "../../../../../../tmp/fz-escape",
  "a/b",
  "/etc/passwd",
  "a\u0000b",
  "\u0000",
  ".x",
  ".",
  "..",
  "",
  " ",
  "x/../../y",
  "..\\..\\x",
  "a\\b",
  "a\nb",
  "\ud800",
  "x".repeat(300),
  "é".repeat(200),
  "chats",
  "..%2f..%2fetc",
  // Bidirectional controls: a name that reads other than it is.
  "evil\u202Egpj.exe",
  "\u2066x\u2069",
  "a\u200Fb",
  "a\u061Cb",
];
const hostile = fc.constantFrom(...HOSTILE);

/** A value too large to print in a counterexample: sent whole, shown by what it is. */
class Big {
  constructor(
    readonly value: unknown,
    readonly label: string,
  ) {}
  toJSON(): unknown {
    return this.value;
  }
  [fc.toStringMethod](): string {
    return this.label;
  }
}

/** Huge strings: under and over the line limit. */
const huge = fc.constantFrom(MAX_BYTES / 2, MAX_BYTES - 2000, MAX_BYTES + 10).map((n) => new Big("h".repeat(n), `"h" × ${n}`));

/** Times whose form is right but which no event can hold: out of Date's range, or outside years 0000 to 9999. */
const UNHOLDABLE_TIMES = ["+999999-01-01T00:00:00Z", "275760-09-13T00:00:00.001Z", "9999-12-31T23:59:59-23:59", "0000-01-01T00:00:00+23:59"];

/** The agent this daemon serves is named by its folder: any other name is refused. */
const AGENT_NAME = "agent";

/** A value nested `depth` deep, in objects or arrays. */
const deep = fc.tuple(fc.integer({ min: 50, max: 3000 }), fc.boolean()).map(([depth, arrays]) => {
  let v: unknown = "bottom";
  for (let i = 0; i < depth; i++) v = arrays ? [v] : { d: v };
  return new Big(v, `${arrays ? "arrays" : "objects"} ${depth} deep`);
});

const json = fc.jsonValue({ maxDepth: 3 });
/** Anything a malformed param could be. */
const weird = fc.oneof({ weight: 4, arbitrary: json }, { weight: 1, arbitrary: huge }, { weight: 1, arbitrary: deep }, { weight: 2, arbitrary: hostile });

/** A thread or session id: hostile, random, new, or the conversation that exists. */
/** Mostly `valid`, sometimes anything at all: so requests get past one check often enough to meet the next. */
const mostly = (valid: fc.Arbitrary<unknown>) => fc.oneof({ weight: 8, arbitrary: valid }, { weight: 1, arbitrary: weird });

/** A thread or session id: the conversation that exists, a new one, random, or hostile. */
const threadish = fc.oneof(
  { weight: 3, arbitrary: fc.constant(MAIN) },
  { weight: 1, arbitrary: fc.stringMatching(/^[a-z0-9-]{1,24}$/) },
  { weight: 1, arbitrary: fc.string({ maxLength: 40 }) },
  { weight: 2, arbitrary: hostile },
);
const sessionId = mostly(threadish);

/** `_meta`: none, a `link` whose fields are each mostly what they should be, or anything. */
const meta = fc.oneof(
  { weight: 2, arbitrary: fc.constant(undefined) },
  {
    weight: 4,
    arbitrary: fc.record(
      {
        link: mostly(
          fc.record(
            {
              agent: mostly(fc.oneof(fc.constant(AGENT_NAME), fc.string({ minLength: 1, maxLength: 20 }), fc.constantFrom("other-agent", "Agent", "agent ", " agent"))),
              thread: mostly(threadish),
              channel: mostly(fc.oneof(fc.string({ minLength: 1, maxLength: 20 }), hostile)),
              group: mostly(fc.oneof(fc.string({ minLength: 1, maxLength: 20 }), hostile)),
              tools: mostly(fc.array(fc.string({ maxLength: 20 }), { maxLength: 4 })),
              from: mostly(fc.record({ id: fc.string(), name: fc.string(), owner: fc.boolean() }, { requiredKeys: ["id", "owner"] })),
              time: mostly(fc.oneof(fc.date({ noInvalidDate: true }).map((d) => d.toISOString()), fc.string(), fc.constantFrom(...UNHOLDABLE_TIMES))),
              verbosity: mostly(fc.oneof(fc.constantFrom("off", "new", "all", "verbose"), fc.string())),
              unknown: weird,
            },
            { requiredKeys: [] },
          ),
        ),
        other: weird,
      },
      { requiredKeys: [] },
    ),
  },
  { weight: 1, arbitrary: weird },
);

/** The client's own MCP servers: never a command that exists, so no fuzzed session starts a program. */
const servers = fc.oneof(
  fc.constant([]),
  weird,
  fc.array(
    fc.oneof(
      fc.record({ name: fc.string({ maxLength: 10 }), command: fc.constant("/nonexistent/fz-tool"), args: fc.array(fc.string(), { maxLength: 3 }), env: fc.constant([]) }),
      fc.record({ type: fc.constantFrom("http", "sse"), name: fc.string({ maxLength: 10 }), url: fc.constant("http://127.0.0.1:9/mcp"), headers: fc.constant([]) }),
      weird,
    ),
    { maxLength: 3 },
  ),
);
const cwd = fc.oneof({ weight: 3, arbitrary: fc.constant("/tmp") }, { weight: 1, arbitrary: weird });

/** Messages shaped as chat commands: long names, unicode, a slash alone, doubled, arguments where none go. */
const commandText = fc.oneof(
  fc.constantFrom(
    "/",
    "//x",
    "/ new",
    "/new",
    "/new with arguments",
    "/reset now",
    "/model:set",
    "/model:set anthropic/claude",
    "/model:set two words",
    `/model:set ${"m".repeat(300)}`,
    "/model:set --agent",
    "/model:set --agent a b",
    "/chat:create",
    "/chat:create ../up",
    "/chat:create a/b",
    "/chat:create \u202Eevil",
    "/chat:fork main@999999999999",
    "/chat:fork main@0",
    "/chat:fork @",
    "/chat:fork ~",
    "/chat:resume",
    "/chat:resume nowhere",
    "/chat:resume main",
    "/stop",
    "/stop now",
    "/skill:",
    "/skill:../../etc/passwd",
    "/verbosity:set 💥",
    "/help",
    "/status",
    "/Ｎｅｗ",
    "/new\n/new",
  ),
  fc.string({ maxLength: 40 }).map((t) => `/${t}`),
  fc.tuple(fc.string({ unit: "grapheme", minLength: 1, maxLength: 300 }), fc.string({ maxLength: 20 })).map(([name, args]) => `/${name} ${args}`),
  fc.string({ maxLength: 20 }).map((t) => `/skill:${t}`),
);

const block = fc.oneof(
  { weight: 8, arbitrary: fc.record({ type: fc.constant("text"), text: fc.oneof({ weight: 5, arbitrary: fc.string() }, { weight: 1, arbitrary: huge }, { weight: 3, arbitrary: commandText }) }) },
  { weight: 1, arbitrary: fc.record({ type: fc.constant("image"), mimeType: fc.constantFrom("image/png", "x/y", ""), data: fc.base64String({ maxLength: 64 }) }) },
  { weight: 1, arbitrary: fc.record({ type: fc.constant("resource_link"), uri: fc.oneof(fc.webUrl(), hostile), name: fc.string() }) },
  { weight: 1, arbitrary: fc.record({ type: fc.constant("resource"), resource: fc.oneof(fc.record({ uri: hostile, text: fc.string() }), fc.record({ uri: hostile, blob: fc.base64String({ maxLength: 32 }), mimeType: fc.string() }), weird) }) },
  { weight: 1, arbitrary: fc.record({ type: fc.constantFrom("audio", "video", ""), data: fc.string() }) },
  { weight: 1, arbitrary: weird },
);

/** A method's params: mostly its own shape with random values, sometimes anything at all. */
function shaped(fields: Record<string, fc.Arbitrary<unknown>>, required: string[]): fc.Arbitrary<unknown> {
  const record = fc
    .tuple(fc.record(fields, { requiredKeys: required }), fc.option(fc.dictionary(fc.string({ maxLength: 8 }), json, { maxKeys: 2 })))
    .map(([r, extra]) => ({ ...(extra ?? {}), ...r }));
  return fc.oneof({ weight: 10, arbitrary: record }, { weight: 1, arbitrary: weird }, { weight: 1, arbitrary: fc.constant(undefined) });
}

/** An event of the session form: mostly one of each kind that holds, sometimes one a field off. */
const time = fc.oneof({ weight: 6, arbitrary: fc.date({ min: new Date(0), max: new Date(4e12), noInvalidDate: true }).map((d) => d.toISOString()) }, { weight: 1, arbitrary: fc.string({ maxLength: 30 }) });
const formEvent = fc.oneof(
  fc.record({ v: fc.constant(1), time, kind: fc.constant("message"), role: fc.constant("user"), text: fc.string({ maxLength: 40 }), header: fc.string({ maxLength: 20 }) }),
  fc.record(
    {
      v: fc.constant(1),
      time,
      kind: fc.constant("message"),
      role: fc.constant("assistant"),
      text: fc.string({ maxLength: 40 }),
      model: fc.string({ maxLength: 10 }),
      provider: fc.string({ maxLength: 10 }),
      latency_ms: fc.nat(),
      stop: fc.constantFrom("end_turn", "tool_calls", "stopped"),
      thinking: fc.record({ reasoning_content: fc.string({ maxLength: 20 }) }),
      tool_calls: fc.array(fc.record({ id: fc.string({ maxLength: 6 }), name: fc.string({ maxLength: 10 }), arguments: fc.string({ maxLength: 20 }) }), { maxLength: 2 }),
    },
    { requiredKeys: ["v", "time", "kind", "role", "text", "model", "provider", "latency_ms", "stop"] },
  ),
  fc.record({ v: fc.constant(1), time, kind: fc.constant("tool_result"), call_id: fc.string({ maxLength: 6 }), tool: fc.string({ maxLength: 10 }), text: fc.string({ maxLength: 40 }), error: fc.boolean() }),
  fc.record({ v: fc.constant(1), time, kind: fc.constant("command"), name: fc.constantFrom("/model:set", "/chat:create", "/chat:fork", "/new"), conversation: fc.oneof(fc.constant("b"), hostile), event: fc.integer({ min: -1, max: 5 }) }, { requiredKeys: ["v", "time", "kind", "name"] }),
);
const formSession = fc.record({ thread: mostly(fc.oneof({ weight: 3, arbitrary: fc.constantFrom(MAIN, "moved", "moved-2") }, { weight: 1, arbitrary: threadish })), events: mostly(fc.array(mostly(formEvent), { maxLength: 4 })) });

const PARAMS: Record<string, fc.Arbitrary<unknown>> = {
  initialize: shaped({ protocolVersion: fc.oneof(fc.integer({ min: -2, max: 3 }), weird), clientCapabilities: fc.oneof(fc.constant({}), weird), _meta: meta }, ["protocolVersion"]),
  "session/new": shaped({ cwd, mcpServers: servers, _meta: meta }, ["cwd", "mcpServers"]),
  "session/load": shaped({ sessionId, cwd, mcpServers: servers, _meta: meta }, ["sessionId", "cwd", "mcpServers"]),
  "session/resume": shaped({ sessionId, cwd, mcpServers: servers, _meta: meta }, ["sessionId", "cwd"]),
  "session/list": shaped({ cursor: fc.oneof(fc.constant(null), fc.nat({ max: 300 }).map(String), fc.string(), weird), cwd, _meta: meta }, []),
  "session/close": shaped({ sessionId, _meta: meta }, ["sessionId"]),
  "session/set_config_option": shaped(
    // A model's name often enough that some are taken, whatever else a run makes in its time.
    { sessionId, configId: fc.oneof(fc.constant("model"), fc.string(), weird), value: fc.oneof(fc.constantFrom("other-model", "gpt-5"), fc.string({ maxLength: 30 }), fc.constant("  "), weird), _meta: meta },
    ["sessionId", "configId", "value"],
  ),
  "session/prompt": shaped({ sessionId, prompt: mostly(fc.array(block, { maxLength: 3 })), _meta: meta }, ["sessionId", "prompt"]),
  "_asp/import": shaped(
    { sessions: mostly(fc.array(formSession, { maxLength: 3 })), instructions: mostly(fc.string({ maxLength: 20 })), memory: mostly(fc.constant([])), _meta: meta },
    [],
  ),
  "_asp/export": shaped({ kinds: mostly(fc.array(fc.oneof(fc.constantFrom("sessions", "instructions", "skills", "tools", "memory", "settings"), fc.string()), { maxLength: 3 })), _meta: meta }, []),
};

/** How each method's requests were answered: a result, or each error code, and how often. */
const outcomes = new Map<string, Map<string, number>>();

/** Methods that write nothing, even when they succeed. */
const READ_ONLY = new Set(["initialize", "session/load", "session/resume", "session/list", "session/close", "_asp/export"]);

/** Sends one request and holds its answer to what the daemon promises. */
async function check(method: string, params: unknown, idKind: number): Promise<void> {
  const before = await snapshot();
  const answer = await request(method, params, idKind);
  const after = await snapshot();
  const seen = outcomes.get(method) ?? new Map<string, number>();
  const outcome = "error" in answer ? String(answer.error.code) : "result";
  seen.set(outcome, (seen.get(outcome) ?? 0) + 1);
  outcomes.set(method, seen);
  const changed = after.filter((l) => !before.includes(l)).concat(before.filter((l) => !after.includes(l)));
  const what = `${method} ${JSON.stringify(params)?.slice(0, 300)} → ${JSON.stringify(answer).slice(0, 300)}`;
  if ("error" in answer) {
    expect(REFUSALS, what).toContain(answer.error.code);
    expect(answer.error.message, what).not.toMatch(/\n|\s+at .*:\d+:\d+/);
    expect(changed, what).toEqual([]);
    return;
  }
  if (READ_ONLY.has(method)) expect(changed, what).toEqual([]);
  // What a request writes is its own conversation's; an import's, the new conversations it names.
  if (method === "_asp/import") {
    const made = z.object({ imported: z.array(z.object({ as: z.string() }).loose()) }).loose().parse(answer.result).imported.map((i) => `chats${sep}${i.as}`);
    expect(changed.filter((l) => !made.some((m) => l === m || l.startsWith(`${m}${sep}`))), what).toEqual([]);
    // Each is new: nothing of a conversation that was there before changed.
    expect(before.filter((l) => made.some((m) => l === m || l.startsWith(`${m}${sep}`))), what).toEqual([]);
    return;
  }
  const own = z.object({ sessionId: z.string() }).safeParse(method === "session/new" ? answer.result : params);
  // A group's message answered is its group's conversation's, `<channel>-<group>`, whatever session
  // it arrived on (lnk-link-harness-acp(7)): that one, and no other.
  const group = z.object({ _meta: z.object({ link: z.object({ channel: z.string(), group: z.string() }).loose() }).loose() }).loose().safeParse(params);
  const thread = method === "session/prompt" && group.success ? `${group.data._meta.link.channel}-${group.data._meta.link.group}` : own.success ? own.data.sessionId : undefined;
  const prefix = thread !== undefined ? `chats${sep}${thread}${sep}` : "(none)";
  expect(changed.filter((l) => !l.startsWith(prefix)), what).toEqual([]);
}

/** FC_SEED=N reruns a failure with the seed fast-check printed for it. */
const seed = process.env.FC_SEED ? { seed: Number(process.env.FC_SEED) } : {};
const runs = (n: number) => ({ numRuns: n, endOnFailure: true, interruptAfterTimeLimit: 20_000, ...seed });

describe("every request the daemon serves, fuzzed", () => {
  for (const [method, params] of Object.entries(PARAMS)) {
    it(`${method}: answered under its id, a refusal writes nothing`, async () => {
      await fc.assert(
        fc.asyncProperty(params, fc.nat({ max: 2 }), (p, idKind) => check(method, p, idKind)),
        runs(200),
      );
    });
  }

  it("command-shaped messages to a live conversation: each answered, writing only its own conversation", async () => {
    await fc.assert(
      fc.asyncProperty(commandText, fc.option(fc.record({ id: fc.string({ maxLength: 8 }), owner: fc.boolean() })), async (text, from) => {
        await check("session/prompt", { sessionId: MAIN, prompt: [{ type: "text", text }], ...(from ? { _meta: { link: { from } } } : {}) }, 0);
      }),
      runs(150),
    );
  });

  it("session/cancel, a notification: never answered, writes nothing, and the daemon goes on", async () => {
    await fc.assert(
      fc.asyncProperty(shaped({ sessionId, _meta: meta }, ["sessionId"]), async (p) => {
        const before = await snapshot();
        const nulls = wire.nullErrors.length;
        const line = JSON.stringify({ jsonrpc: "2.0", method: "session/cancel", ...(p === undefined ? {} : { params: p }) });
        wire.send(line);
        expect(await request("session/list", {})).toHaveProperty("result");
        // A line over the limits can't be read as a notification: it is refused as one error with `id: null`.
        const unread = Buffer.byteLength(line) > MAX_BYTES || nestsDeeper(Buffer.from(line), MAX_DEPTH);
        if (unread) await wire.nullErrorCount(nulls + 1);
        expect(wire.nullErrors.length).toBe(nulls + (unread ? 1 : 0));
        expect(await snapshot()).toEqual(before);
      }),
      runs(100),
    );
  });

  it("unknown methods, extension methods included: method not found, or refused, and nothing written", async () => {
    const known = new Set([...Object.keys(PARAMS), "session/cancel"]);
    const method = fc.oneof(
      fc.string().filter((m) => !known.has(m)),
      fc.string().map((s) => `_link/${s}`).filter((m) => !LINK_SERVED.has(m)),
      fc.constantFrom("_link/oversized", "session/fork", "session/set_model", "session/delete", "authenticate"),
    );
    await fc.assert(
      fc.asyncProperty(method, fc.oneof(weird, fc.record({ bytes: fc.integer(), max: fc.integer() })), fc.nat({ max: 2 }), async (m, p, idKind) => {
        const before = await snapshot();
        const answer = await request(m, p, idKind);
        expect(answer, m).toHaveProperty("error");
        if ("error" in answer) expect(REFUSALS, `${m} → ${answer.error.message}`).toContain(answer.error.code);
        expect(await snapshot()).toEqual(before);
      }),
      runs(150),
    );
  });
});

const notJson = fc.string({ minLength: 1, maxLength: 200 }).filter((t) => {
  if (t.trim() === "" || /[\n\r]/.test(t)) return false;
  try {
    JSON.parse(t);
    return false;
  } catch {
    return true;
  }
});
const scalar = fc.oneof(fc.integer(), fc.double({ noNaN: true, noDefaultInfinity: true }), fc.string({ maxLength: 30 }), fc.boolean(), fc.constant(null));
const req = (id: unknown, extra: object = {}) => ({ jsonrpc: "2.0", id, method: "initialize", params: { protocolVersion: 1 }, ...extra });

/** JSON nested deeper than the daemon reads, and small enough to be read: arrays up to 30,000 deep, objects up to 9,000. */
const tooDeep = fc.oneof(
  fc.integer({ min: MAX_DEPTH + 1, max: 30_000 }).map((n) => `${"[".repeat(n)}${"]".repeat(n)}`),
  fc.integer({ min: MAX_DEPTH + 1, max: 9_000 }).map((n) => `${'{"d":'.repeat(n)}0${"}".repeat(n)}`),
);

/** A string id as a client may write one that JSON can't read: a bad escape, or a raw control character. */
const unreadableId = fc
  .tuple(fc.stringMatching(/^[a-z0-9]{0,6}$/), fc.constantFrom("\\q", "\\x41", "\\u12g4", "\\'", "\t", "\u0001", "\u001f"), fc.stringMatching(/^[a-z0-9]{0,6}$/))
  .map(([a, bad, b]) => `"${a}${bad}${b}"`);

/** A line and what it must be answered with: one error with `id: null`, an answer under its id, or nothing. */
type Case = { line: string; answer: "null-error" } | { line: string; answer: "id"; id: string | number; code?: number } | { line: string; answer: "none" };
const shown = (c: Case): Case =>
  Object.assign(c, { [fc.toStringMethod]: () => `${c.answer} ${c.line.length > 300 ? `${c.line.slice(0, 120)}… (${c.line.length} characters)` : c.line}` });

/** Lines that are not requests, or too long to read. */
/** Runs of what String.prototype.trim takes from a line's ends, JSON's own whitespace among it. */
const trimmed = fc.array(fc.constantFrom(" ", "\t", "\r", "\f", "\v", "\u00a0", "\ufeff", "\u1680", "\u2000", "\u2028", "\u2029", "\u202f", "\u3000"), { maxLength: 3 }).map((a) => a.join(""));

const rawCases: fc.Arbitrary<Case> = fc
  .oneof<fc.Arbitrary<Case>[]>(
    notJson.map((line): Case => ({ line, answer: "null-error" })),
    scalar.map((v): Case => ({ line: JSON.stringify(v), answer: "null-error" })),
    fc.array(fc.oneof(json, fc.constant(req(1))), { maxLength: 4 }).map((a): Case => ({ line: JSON.stringify(a), answer: "null-error" })),
    fc.oneof(fc.object({ maxDepth: 1 }), fc.array(json, { maxLength: 2 }), fc.boolean()).map((id): Case => ({ line: JSON.stringify(req(id)), answer: "null-error" })),
    fc.constantFrom({ id: 1, method: "initialize" }, { jsonrpc: "1.0", id: 1, method: "initialize" }, { jsonrpc: "2.0" }, { jsonrpc: "2.0", method: 5, id: 1 }).map(
      (o): Case => ({ line: JSON.stringify(o), answer: "null-error" }),
    ),
    // Over the line limit: with a request id to answer under, or none.
    fc.nat({ max: 2 }).map((k): Case => {
      const id = nextId(k);
      return { line: JSON.stringify(req(id, { pad: new Big("p".repeat(MAX_BYTES + 100), "") })), answer: "id", id, code: -32600 };
    }),
    fc.constantFrom("q".repeat(MAX_BYTES + 1), `{"jsonrpc":"2.0","method":"session/cancel","params":{"x":"${"c".repeat(MAX_BYTES)}"}}`).map(
      (line): Case => ({ line, answer: "null-error" }),
    ),
    // Nested deeper than MAX_DEPTH, under the byte limit: with a request id to answer under (before
    // or after what is deep), or none.
    fc.tuple(tooDeep, fc.nat({ max: 2 }), fc.constantFrom("params", "method", "meta, id last")).map(([deep, k, where]): Case => {
      const rid = nextId(k);
      const id = JSON.stringify(rid);
      const line =
        where === "params"
          ? `{"jsonrpc":"2.0","id":${id},"method":"session/list","params":${deep}}`
          : where === "method"
            ? `{"jsonrpc":"2.0","id":${id},"method":${deep}}`
            : `{"jsonrpc":"2.0","method":"session/new","params":{"cwd":"/tmp","mcpServers":[],"_meta":${deep}},"id":${id}}`;
      return { line, answer: "id", id: rid, code: -32600 };
    }),
    tooDeep.map((deep): Case => ({ line: `{"jsonrpc":"2.0","id":${deep},"method":"session/list","params":{}}`, answer: "null-error" })),
    // A request id JSON can't read (a bad escape, a raw control character) in a line the daemon
    // doesn't read whole (over the byte limit, or nested too deep): no id to answer under.
    fc.tuple(unreadableId, fc.boolean(), tooDeep).map(
      ([id, big, deep]): Case => ({
        line: big ? `{"jsonrpc":"2.0","id":${id},"method":"initialize","params":{"pad":"${"p".repeat(MAX_BYTES + 100)}"}}` : `{"jsonrpc":"2.0","id":${id},"method":"session/list","params":${deep}}`,
        answer: "null-error",
      }),
    ),
    tooDeep.map((deep): Case => ({ line: `{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":${deep}}}`, answer: "null-error" })),
  )
  .map(shown);

describe("raw lines that are not requests", () => {
  const cases = rawCases;

  it("each is answered as JSON-RPC says, writes nothing, and the daemon goes on serving", async () => {
    await fc.assert(
      fc.asyncProperty(cases, async (c) => {
        const before = await snapshot();
        const nulls = wire.nullErrors.length;
        wire.send(c.line);
        if (c.answer === "id") {
          const answer = await wire.answer(c.id);
          expect(answer, c.line.slice(0, 200)).toHaveProperty("error");
          if ("error" in answer) expect(answer.error.code).toBe(c.code);
        } else if (c.answer === "null-error") {
          await wire.nullErrorCount(nulls + 1);
          expect(REFUSALS).toContain(wire.nullErrors.at(-1));
        }
        expect(await request("initialize", { protocolVersion: 1 })).toHaveProperty("result");
        expect(wire.nullErrors.length, c.line.slice(0, 200)).toBe(nulls + (c.answer === "null-error" ? 1 : 0));
        expect(await snapshot()).toEqual(before);
      }),
      runs(200),
    );
  });
});

describe("hostile values, each sent once", () => {
  it("bidirectional thread names, times no event can hold and other agents' names are refused -32602 and write nothing", async () => {
    const sent: [string, unknown][] = [
      ...HOSTILE.filter((t) => /[\u202A-\u202E\u2066-\u2069\u200E\u200F\u061C]/.test(t)).flatMap((thread): [string, unknown][] => [
        ["session/new", { cwd: "/tmp", mcpServers: [], _meta: { link: { thread } } }],
        ["session/new", { cwd: "/tmp", mcpServers: [], _meta: { link: { channel: "telegram", group: thread } } }],
      ]),
      ...UNHOLDABLE_TIMES.map((time): [string, unknown] => ["session/prompt", { sessionId: MAIN, prompt: [{ type: "text", text: "when?" }], _meta: { link: { time } } }]),
      ...["other-agent", "Agent", " agent"].flatMap((name): [string, unknown][] => {
        const _meta = { link: { agent: name } };
        return [
          ["session/new", { cwd: "/tmp", mcpServers: [], _meta }],
          ["session/load", { sessionId: MAIN, cwd: "/tmp", mcpServers: [], _meta }],
          ["session/resume", { sessionId: MAIN, cwd: "/tmp", _meta }],
          ["session/list", { _meta }],
          ["session/set_config_option", { sessionId: MAIN, configId: "model", value: "other-model", _meta }],
          ["session/prompt", { sessionId: MAIN, prompt: [{ type: "text", text: "for whom?" }], _meta }],
          ["session/close", { sessionId: MAIN, _meta }],
        ];
      }),
    ];
    for (const [method, params] of sent) {
      const before = await snapshot();
      const answer = await request(method, params);
      expect(answer, `${method} ${JSON.stringify(params)}`).toMatchObject({ error: { code: -32602 } });
      expect(await snapshot()).toEqual(before);
    }
  });
});

describe("a line nested deeper than the daemon reads", () => {
  const arrays = (n: number) => `${"[".repeat(n)}${"]".repeat(n)}`;

  it("is answered -32600 under its id on stdio, and the next request is served; one just within the limit is read", async () => {
    // 30,000 deep: the SDK's own answer to it overflowed the stack and closed the connection.
    for (const line of [
      `{"jsonrpc":"2.0","id":"deep-1","method":"session/list","params":${arrays(30_000)}}`,
      `{"jsonrpc":"2.0","id":"deep-2","method":${arrays(30_000)}}`,
      `{"jsonrpc":"2.0","method":"session/list","params":{"_meta":${arrays(MAX_DEPTH)}},"id":"deep-3"}`,
    ]) {
      wire.send(line);
      const id = /"id":"(deep-\d)"/.exec(line)?.[1] ?? "";
      expect(await wire.answer(id)).toMatchObject({ error: { code: -32600, message: expect.stringMatching(new RegExp(`limit of ${MAX_DEPTH}$`)) } });
      expect(await request("session/list", {})).toHaveProperty("result");
    }
    // The whole line nests MAX_DEPTH deep: the top object, params, then _meta's arrays.
    wire.send(`{"jsonrpc":"2.0","id":"within","method":"session/list","params":{"_meta":{"x":${arrays(MAX_DEPTH - 3)}}}}`);
    expect(await wire.answer("within")).toHaveProperty("result");
  });
});

/**
 * A daemon of the fuzzed agent on a socket of its own, with `env`, started before the describe's
 * tests and stopped after: each connection has its own front. Its socket and the daemon, once started.
 */
function onSocket(env: NodeJS.ProcessEnv): { socket: () => string; served: () => Daemon } {
  let sockets: string | undefined;
  let served: Daemon | undefined;
  beforeAll(async () => {
    sockets = mkdtempSync(join(tmpdir(), "lnk-fuzz-sock-"));
    served = startDaemon(["--agent", agent, "--socket", join(sockets, "fz.sock")], env);
    await served.waitForLog(/"serving ACP"/);
  });
  afterAll(async () => {
    await served?.stop("SIGKILL");
    if (sockets) rmSync(sockets, { recursive: true, force: true });
  });
  return { socket: () => join(sockets as string, "fz.sock"), served: () => served as Daemon };
}

describe("the first lines of a connection, before and around initialize", () => {
  // Each connection has its own front, which reads the first line itself.
  const daemonOf = onSocket({ LNK_ACP_MAX_BYTES: String(MAX_BYTES) });
  let socket: string;
  let served: Daemon;
  beforeAll(() => {
    socket = daemonOf.socket();
    served = daemonOf.served();
  });

  it("a first line nested too deep, initialize too, is answered -32600 under its id, and the connection then serves", async () => {
    // Objects 9,000 deep: under this daemon's byte limit.
    const deep = `${'{"d":'.repeat(9_000)}0${"}".repeat(9_000)}`;
    for (const first of [
      `{"jsonrpc":"2.0","id":"deep-init","method":"initialize","params":{"protocolVersion":1,"_meta":${deep}}}`,
      `{"jsonrpc":"2.0","id":"deep-init","method":${deep}}`,
    ]) {
      const conn = connect(socket);
      await new Promise<void>((resolve, reject) => conn.once("connect", resolve).once("error", reject));
      try {
        const peer = new Wire(conn, (text) => conn.write(text));
        peer.send(first);
        expect(await peer.answer("deep-init")).toMatchObject({ error: { code: -32600 } });
        peer.send(JSON.stringify({ jsonrpc: "2.0", id: "init", method: "initialize", params: { protocolVersion: 1 } }));
        expect(await peer.answer("init")).toHaveProperty("result");
        peer.send(JSON.stringify({ jsonrpc: "2.0", id: "list", method: "session/list", params: {} }));
        expect(await peer.answer("list")).toHaveProperty("result");
        expect(peer.strays).toEqual([]);
      } finally {
        conn.destroy();
      }
    }
  });

  const requestCase = (method: string, params: fc.Arbitrary<unknown>) =>
    fc.tuple(params, fc.nat({ max: 2 })).map(([p, k]): Case => {
      const id = nextId(k);
      return shown({ line: JSON.stringify({ jsonrpc: "2.0", id, method, ...(p === undefined ? {} : { params: p }) }), answer: "id", id });
    });
  const firstLines = fc.oneof(
    { weight: 4, arbitrary: requestCase("initialize", PARAMS.initialize ?? fc.constant({})) },
    { weight: 1, arbitrary: requestCase("session/list", fc.constant({})) },
    { weight: 1, arbitrary: fc.constant(shown({ line: JSON.stringify({ jsonrpc: "2.0", method: "session/cancel", params: { sessionId: MAIN } }), answer: "none" })) },
    { weight: 3, arbitrary: rawCases },
    // A request led and ended by what the SDK trims from a line and JSON does not take as space
    // (a form feed, a no-break space, a byte order mark, U+3000, ...): a request all the same.
    {
      weight: 2,
      arbitrary: fc.tuple(trimmed, trimmed, fc.constantFrom("initialize", "session/list"), fc.nat({ max: 2 })).map(([lead, trail, method, k]): Case => {
        const id = nextId(k);
        return shown({ line: `${lead}${JSON.stringify({ jsonrpc: "2.0", id, method, params: method === "initialize" ? { protocolVersion: 1 } : {} })}${trail}`, answer: "id", id });
      }),
    },
  );

  it("each request is answered once under its id, each unreadable line once with id null, and the connection then serves", async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(firstLines, { minLength: 1, maxLength: 3 }), fc.boolean(), async (lines, oneWrite) => {
        const conn = connect(socket);
        await new Promise<void>((resolve, reject) => conn.once("connect", resolve).once("error", reject));
        try {
          const peer = new Wire(conn, (text) => conn.write(text));
          const text = lines.map((c) => `${c.line}\n`);
          if (oneWrite) conn.write(text.join(""));
          else for (const t of text) conn.write(t);
          const probe = `probe-${++serial}`;
          peer.send(JSON.stringify({ jsonrpc: "2.0", id: `${probe}-init`, method: "initialize", params: { protocolVersion: 1 } }));
          // A request is taken once initialize has been answered: this client waits for it, as clients do.
          await peer.answer(`${probe}-init`);
          peer.send(JSON.stringify({ jsonrpc: "2.0", id: `${probe}-list`, method: "session/list", params: {} }));
          expect(await peer.answer(`${probe}-list`)).toHaveProperty("result");
          const nulls = lines.filter((c) => c.answer === "null-error").length;
          await peer.nullErrorCount(nulls);
          for (const c of lines) if (c.answer === "id") await peer.answer(c.id);
          // Whatever else would come has come once a last request is answered.
          peer.send(JSON.stringify({ jsonrpc: "2.0", id: `${probe}-last`, method: "session/list", params: {} }));
          await peer.answer(`${probe}-last`);
          for (const c of lines) if (c.answer === "id") expect(peer.count(c.id), `answers to ${c.id}`).toBe(1);
          expect(peer.count(`${probe}-init`)).toBe(1);
          expect(peer.nullErrors).toHaveLength(nulls);
          expect(peer.strays).toEqual([]);
        } finally {
          conn.destroy();
        }
      }),
      runs(100),
    );
    expect(served.child.exitCode).toBeNull();
  });
});

describe("after all of it", () => {
  it("the daemon still serves, wrote only protocol messages on stdout, only JSON log lines on stderr, and nothing outside the agent's folder", async () => {
    expect(await request("initialize", { protocolVersion: 1, clientCapabilities: {} })).toHaveProperty("result");
    // The fuzz reached past the checks of every method: each was sometimes answered with a result.
    for (const method of Object.keys(PARAMS)) expect(outcomes.get(method)?.get("result") ?? 0, method).toBeGreaterThan(0);
    const listed = await request("session/list", {});
    expect(listed).toHaveProperty("result");
    expect(daemon.child.exitCode).toBeNull();
    expect(wire.strays).toEqual([]);
    // Whole lines only: the last may still be on its way.
    const notJson = daemon
      .stderr()
      .split("\n")
      .slice(0, -1)
      .filter((line) => line !== "")
      .filter((line) => {
        try {
          return typeof JSON.parse(line) !== "object";
        } catch {
          return true;
        }
      });
    expect(notJson).toEqual([]);
    expect(listing(outer, agent)).toEqual(outside);
    // The temporary files left in the agent's folder are the daemon's spares only: two a conversation at most, empty.
    const chats = join(agent, "chats");
    for (const thread of readdirSync(chats)) {
      const temps = readdirSync(join(chats, thread)).filter((n) => n.startsWith(".tmp-"));
      expect(temps.length, thread).toBeLessThanOrEqual(2);
      for (const n of temps) expect([n, statSync(join(chats, thread, n)).size]).toEqual([expect.stringMatching(new RegExp(`^\\.tmp-${daemon.child.pid}-`)), 0]);
    }
    expect(readdirSync(tmpdir()).filter((n) => n.startsWith("fz-escape"))).toEqual([]);
  });
});

describe("clients that read their output slowly, in stretches, or not at all", () => {
  const UNREAD_MS = 1000;
  const daemonOf = onSocket({ LNK_ACP_UNREAD_MS: String(UNREAD_MS) });
  let socket: string;
  let served: Daemon;
  beforeAll(() => {
    socket = daemonOf.socket();
    served = daemonOf.served();
  });

  /** A connection, its requests sent in one write before any answer is read: initialize, then `count` listings padded by `pad` bytes. */
  async function flood(count: number, pad: number): Promise<{ conn: ReturnType<typeof connect>; peer: Wire; ids: string[]; closed: Promise<void> }> {
    const conn = connect(socket);
    conn.on("error", () => undefined);
    await new Promise<void>((resolve, reject) => conn.once("connect", resolve).once("error", reject));
    const closed = new Promise<void>((resolve) => conn.once("close", () => resolve()));
    conn.pause();
    const peer = new Wire(conn, (text) => conn.write(text));
    const probe = `flood-${++serial}`;
    const ids = Array.from({ length: count }, (_, i) => `${probe}-${i}`);
    const meta = pad ? { _meta: { pad: "p".repeat(pad) } } : {};
    conn.write(
      [JSON.stringify({ jsonrpc: "2.0", id: `${probe}-init`, method: "initialize", params: { protocolVersion: 1 } }), ...ids.map((id) => JSON.stringify({ jsonrpc: "2.0", id, method: "session/list", params: meta }))]
        .map((l) => `${l}\n`)
        .join(""),
    );
    return { conn, peer, ids, closed };
  }

  it("a client that reads in stretches, pausing for less than the limit each time, has each request answered once", async () => {
    await fc.assert(
      fc.asyncProperty(fc.integer({ min: 1, max: 4000 }), fc.integer({ min: 0, max: 4000 }), fc.array(fc.integer({ min: 0, max: Math.floor(UNREAD_MS / 3) }), { minLength: 1, maxLength: 6 }), async (count, pad, pauses) => {
        const { conn, peer, ids, closed } = await flood(count, pad);
        let gone = false;
        void closed.then(() => (gone = true));
        try {
          for (const ms of pauses) {
            await new Promise((resolve) => setTimeout(resolve, ms));
            conn.resume();
            await new Promise((resolve) => setTimeout(resolve, 10));
            conn.pause();
          }
          conn.resume();
          for (const id of ids) expect(await peer.answer(id)).toHaveProperty("result");
          for (const id of ids) expect(peer.count(id), `answers to ${id}`).toBe(1);
          expect(peer.nullErrors).toEqual([]);
          expect(peer.strays).toEqual([]);
          expect(gone, "the daemon closed a connection that was read").toBe(false);
        } finally {
          conn.destroy();
        }
      }),
      runs(8),
    );
  });

  it("a client that stops reading has its connection closed, and the next connection is served", async () => {
    await fc.assert(
      // More answers than the kernel's buffers between the two ends hold: the rest would be the daemon's to hold.
      fc.asyncProperty(fc.integer({ min: 30_000, max: 60_000 }), fc.integer({ min: 0, max: 1000 }), fc.nat({ max: 1000 }), async (count, pad, read) => {
        const { conn, peer, ids, closed } = await flood(count, pad);
        try {
          // It reads some answers, then nothing more.
          conn.resume();
          if (read > 0) await peer.answer(ids[Math.min(read, ids.length) - 1] as string);
          conn.pause();
          const late = setTimeout(() => conn.destroy(new Error("not closed")), 15_000);
          await closed;
          clearTimeout(late);
          expect(conn.errored?.message).not.toBe("not closed");
        } finally {
          conn.destroy();
        }
        const next = connect(socket);
        next.on("error", () => undefined);
        await new Promise<void>((resolve, reject) => next.once("connect", resolve).once("error", reject));
        try {
          const peer2 = new Wire(next, (text) => next.write(text));
          peer2.send(JSON.stringify({ jsonrpc: "2.0", id: "init", method: "initialize", params: { protocolVersion: 1 } }));
          expect(await peer2.answer("init")).toHaveProperty("result");
          peer2.send(JSON.stringify({ jsonrpc: "2.0", id: "list", method: "session/list", params: {} }));
          expect(await peer2.answer("list")).toHaveProperty("result");
        } finally {
          next.destroy();
        }
      }),
      runs(3),
    );
    expect(served.stderr()).toMatch(/"the client read none of its output: its connection is closed"/);
  });
});

describe("one session loaded by many connections, each with servers and a folder of its own", () => {
  const daemonOf = onSocket({ LNK_ACP_MAX_BYTES: String(MAX_BYTES) });
  /** A conversation of its own: the fuzz before may have narrowed MAIN's tools. */
  const SHARED = "fz-many";
  let socket: string;
  beforeAll(async () => {
    assertBuilt(["dist/test/probe-server.js"], ["test/probe-server.ts"]);
    socket = daemonOf.socket();
    const maker = await peer();
    expect(await maker.ask("session/new", { cwd: agent, mcpServers: [], _meta: { link: { thread: SHARED } } })).toMatchObject({ result: { sessionId: SHARED } });
    maker.close();
  });

  /** A connection on the socket, initialized; its requests answered one by one. */
  async function peer(): Promise<{ ask: (method: string, params: unknown) => Promise<Response>; close: () => void }> {
    const conn = connect(socket);
    conn.on("error", () => undefined);
    await new Promise<void>((resolve, reject) => conn.once("connect", resolve).once("error", reject));
    const wire = new Wire(conn, (text) => conn.write(text));
    const ask = (method: string, params: unknown) => {
      const id = `many-${++serial}`;
      wire.send(JSON.stringify({ jsonrpc: "2.0", id, method, params }));
      return wire.answer(id);
    };
    expect(await ask("initialize", { protocolVersion: 1, clientCapabilities: {} })).toHaveProperty("result");
    return { ask, close: () => conn.destroy() };
  }

  // Servers that are never started (no prompt of their connection runs): names and environments of
  // any kind, a command that does nothing, some near the line's limit.
  const pad = fc.constantFrom(0, 100, MAX_BYTES / 4).map((n) => new Big("p".repeat(n), `"p" × ${n}`));
  const servers = fc.array(
    fc.record({ name: fc.oneof(fc.string({ maxLength: 12 }), hostile), command: fc.constantFrom("true", "false"), args: fc.array(fc.string({ maxLength: 8 }), { maxLength: 2 }), env: fc.array(fc.record({ name: fc.string({ maxLength: 8 }), value: pad }), { maxLength: 2 }) }),
    { maxLength: 4 },
  );
  const cwd = fc.oneof(fc.constant(agent), fc.string({ maxLength: 20 }).map((s) => `/${s}`), hostile);
  const probe = join(ROOT, "dist/test/probe-server.js");

  it("a prompt offers the tools of the connection that sent it alone, whatever the others loaded it with, open or closed since", async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(fc.record({ servers, cwd, closes: fc.boolean() }), { minLength: 1, maxLength: 12 }), fc.boolean(), async (loads, witnessFirst) => {
        const witness = await peer();
        const others: Awaited<ReturnType<typeof peer>>[] = [];
        try {
          const own = { name: "witness", command: process.execPath, args: [probe], env: [] };
          const loadWitness = async () => expect(await witness.ask("session/load", { sessionId: SHARED, cwd: agent, mcpServers: [own] })).toHaveProperty("result");
          if (witnessFirst) await loadWitness();
          for (const load of loads) {
            const other = await peer();
            others.push(other);
            const answer = await other.ask("session/load", { sessionId: SHARED, cwd: load.cwd, mcpServers: load.servers });
            if ("error" in answer) expect(REFUSALS).toContain(answer.error.code);
            if (load.closes) other.close();
          }
          if (!witnessFirst) await loadWitness();
          const asked = server.requests.length;
          server.script({ text: "witnessed" });
          expect(await witness.ask("session/prompt", { sessionId: SHARED, prompt: [{ type: "text", text: "which tools?" }] })).toMatchObject({ result: { stopReason: "end_turn" } });
          const offered = z.array(z.object({ function: z.object({ name: z.string() }).loose() }).loose()).parse(server.requests[asked]?.body.tools ?? []);
          expect(new Set(offered.map((t) => t.function.name.split("__")[0]))).toEqual(new Set(["witness"]));
        } finally {
          witness.close();
          for (const other of others) other.close();
        }
      }),
      runs(12),
    );
  });
});
