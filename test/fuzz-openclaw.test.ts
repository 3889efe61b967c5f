// Hostile OpenClaw folders and States with sessions, fuzzed through the import's own code: workspace
// files of any name, text and kind (links out to a secret, FIFOs, folders where files should be),
// databases of random bytes, or the real one with rows of any JSON, any zstd bytes, any types; and
// ASP States whose sessions are of any shape. Each is taken with every file inside the agent's folder,
// or refused with a clear error and nothing written; nothing outside it is ever written or read into
// it, and a second import adds nothing.
import { execFileSync } from "node:child_process";
import { linkSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import fc from "fast-check";
import initSqlJs from "sql.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { StoreError } from "../protocol/index.js";
import { OpenClawError, readOpenClaw } from "../asp/openclaw.js";
import { OPENCLAW_LEFT_NAMED, readDatabase, readTranscript, SessionsRead, zstdFault } from "../asp/openclaw-sessions.js";
import { ImportError, checkState, planImport } from "../asp/state-import.js";
import { ROOT } from "./fixtures/built.js";
import { files } from "./fixtures/files.js";
import { importOnce } from "./fixtures/import-once.js";

const seed = process.env.FC_SEED ? { seed: Number(process.env.FC_SEED) } : {};
const FIXTURE_DB = join(ROOT, "test", "fixtures", "openclaw-2026.9.6", "state", "agents", "main", "agent", "openclaw-agent.sqlite");
const SECRET = "the secret of another folder";

let root = "";
beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), "lnk-fuzz-openclaw-"));
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

/** What the agent's folder may hold after an import: its own parts alone. */
const OWN = /^(config\.json|instructions\/instruction\.md|skills\/[^/]+\/.+|memory\/.+|chats\/[^/]+\/(\d{12}\.json))$/;

/** Imports a State into the agent's folder as the command does; says whether it was taken. */
async function take(dir: string, raw: unknown): Promise<boolean> {
  let plan;
  try {
    plan = planImport({ dir }, checkState(raw));
  } catch (e) {
    if (e instanceof ImportError || e instanceof StoreError) return false;
    throw e;
  }
  await plan.write();
  return true;
}

const text = fc.oneof(
  fc.string({ maxLength: 40 }),
  fc.constantFrom("", "<!-- link:begin x -->\n", "a\u0000b", "\uFFFD", "# SOUL.md\nYou are Wren.\n", "---\nname: x\n---\nDo it.\n"),
);
const name = fc.oneof(
  fc.constantFrom("AGENTS.md", "SOUL.md", "USER.md", "IDENTITY.md", "MEMORY.md", "memory.md", "BOOTSTRAP.md", ".git", "memory", "skills"),
  fc.stringMatching(/^[a-z][a-z0-9._-]{0,8}$/),
);
/** One thing the workspace holds: a file, a folder of files, a link out, a FIFO, or a skill. */
const thing = fc.oneof(
  fc.record({ kind: fc.constant("file" as const), path: name, text }),
  fc.record({ kind: fc.constant("note" as const), path: fc.stringMatching(/^[a-z0-9 ._-]{1,10}$/), text }),
  fc.record({ kind: fc.constant("skill" as const), path: fc.oneof(fc.stringMatching(/^[a-z][a-z-]{0,8}$/), fc.constantFrom("..x", ".hidden", " ")), files: fc.dictionary(fc.oneof(fc.constant("SKILL.md"), fc.stringMatching(/^[a-z]{1,4}(\/[a-z]{1,4})?$/)), text, { maxKeys: 3 }) }),
  fc.record({ kind: fc.constant("link" as const), path: fc.oneof(name, fc.constantFrom("memory/out.md", "skills/out")) }),
  fc.record({ kind: fc.constant("fifo" as const), path: fc.oneof(name, fc.constant("memory/pipe.md")) }),
);

/** A row of transcript_events: any JSON, message-shaped JSON, bad JSON, or zstd bytes of anything. */
const message = fc.record(
  {
    role: fc.oneof(fc.constantFrom("user", "assistant", "toolResult", "bashExecution"), fc.string({ maxLength: 5 })),
    content: fc.oneof(
      fc.string({ maxLength: 20 }),
      fc.array(
        fc.oneof(
          fc.record({ type: fc.constant("text"), text: fc.string({ maxLength: 20 }) }),
          fc.record({ type: fc.constant("thinking"), thinking: fc.string({ maxLength: 20 }) }),
          fc.record({ type: fc.constant("toolCall"), id: fc.string({ maxLength: 5 }), name: fc.string({ maxLength: 5 }), arguments: fc.jsonValue({ maxDepth: 2 }) }),
          fc.record({ type: fc.constant("image"), data: fc.string({ maxLength: 8 }), mimeType: fc.constantFrom("image/png", "text/html") }),
          fc.jsonValue({ maxDepth: 2 }),
        ),
        { maxLength: 3 },
      ),
      fc.jsonValue({ maxDepth: 2 }),
    ),
    timestamp: fc.oneof(fc.integer(), fc.double(), fc.string({ maxLength: 10 }), fc.constant(1796064900000)),
    model: fc.oneof(fc.string({ maxLength: 8 }), fc.integer()),
    usage: fc.oneof(fc.record({ input: fc.integer(), output: fc.integer(), cacheRead: fc.integer() }), fc.jsonValue({ maxDepth: 1 })),
    stopReason: fc.constantFrom("stop", "toolUse", "error", "aborted", "length", "odd"),
    toolCallId: fc.string({ maxLength: 5 }),
    toolName: fc.string({ maxLength: 5 }),
    isError: fc.boolean(),
    __openclaw: fc.record({ senderIsOwner: fc.boolean() }),
  },
  { requiredKeys: ["role"] },
);
const event = fc.oneof(
  fc.record({ type: fc.constant("message"), message, timestamp: fc.oneof(fc.constant("2026-11-30T18:55:00.174Z"), fc.string({ maxLength: 10 })) }).map((e) => JSON.stringify(e)),
  fc.record({ type: fc.constantFrom("session", "model_change", "custom", "compaction", "strange"), id: fc.string({ maxLength: 4 }), parentId: fc.string({ maxLength: 4 }) }).map((e) => JSON.stringify(e)),
  fc.jsonValue({ maxDepth: 3 }).map((v) => JSON.stringify(v)),
  fc.string({ maxLength: 30 }),
);
const row = fc.record({
  session: fc.oneof(fc.constantFrom("c0d45299-f027-41df-af45-7363803a7ad5", "new", "../../etc", ".", "a/b"), fc.string({ minLength: 1, maxLength: 12 })),
  seq: fc.integer({ min: -5, max: 100 }),
  json: fc.option(event, { nil: null }),
  zstd: fc.option(fc.oneof(fc.uint8Array({ maxLength: 40 }), fc.constant(new Uint8Array([40, 181, 47, 253, 0, 0]))), { nil: null }),
  created: fc.oneof(fc.integer(), fc.constant(null)),
});
const database = fc.oneof(
  fc.constant({ kind: "none" as const }),
  // A second name of another folder's database, which holds the secret.
  fc.constant({ kind: "hard" as const }),
  fc.record({ kind: fc.constant("bytes" as const), bytes: fc.uint8Array({ maxLength: 600 }) }),
  fc.record({ kind: fc.constant("rows" as const), rows: fc.array(row, { maxLength: 8 }) }),
);

/**
 * JSONL transcripts of OpenClaw's before its database: a line an event, or a link out, a second
 * name (a hard link) of another folder's transcript, which holds the secret, or a FIFO.
 */
const transcripts = fc.array(
  fc.record({
    name: fc.oneof(fc.stringMatching(/^[a-z0-9.-]{1,8}\.jsonl$/), fc.constantFrom(".jsonl", "sessions.json", "c0d45299-f027-41df-af45-7363803a7ad5.jsonl")),
    lines: fc.array(event, { maxLength: 5 }),
    how: fc.constantFrom("file", "file", "link", "hard", "fifo"),
  }),
  { maxLength: 3 },
);

describe("hostile OpenClaw folders, fuzzed", { timeout: 300_000 }, () => {
  it("are read and taken with every file inside the agent's folder, or refused with one clear error and nothing written", async () => {
    const SQL = await initSqlJs();
    const fixture = readFileSync(FIXTURE_DB);
    let n = 0;
    const outcomes = { taken: 0, refused: 0 };
    await fc.assert(
      fc.asyncProperty(fc.array(thing, { maxLength: 8 }), database, fc.boolean(), transcripts, async (things, db, nested, jsonl) => {
        const place = join(root, `folder-${++n}`);
        const secret = join(place, "secret.md");
        mkdirSync(place);
        writeFileSync(secret, `${SECRET}\n`);
        // Another folder's session, as a transcript and in a database: what a link or a second name of it would carry.
        const secretLine = JSON.stringify({ type: "message", message: { role: "user", content: SECRET, timestamp: 1764528000000 } });
        writeFileSync(join(place, "secret.jsonl"), `${secretLine}\n`);
        const secretDb = new SQL.Database();
        secretDb.run("CREATE TABLE transcript_events (session_id TEXT NOT NULL, seq INTEGER NOT NULL, event_json TEXT, created_at INTEGER NOT NULL, event_zstd BLOB, PRIMARY KEY (session_id, seq))");
        secretDb.run("INSERT INTO transcript_events VALUES ('theirs', 1, ?, 1764528000000, NULL)", [secretLine]);
        writeFileSync(join(place, "secret.sqlite"), secretDb.export());
        secretDb.close();
        const openclaw = join(place, "openclaw");
        const state = nested ? join(openclaw, "state") : openclaw;
        const workspace = join(openclaw, "workspace");
        mkdirSync(workspace, { recursive: true });
        mkdirSync(state, { recursive: true });
        writeFileSync(join(state, "openclaw.json"), JSON.stringify({ agents: { defaults: { workspace: "/home/ada/workspace" } } }));
        for (const t of things) {
          const path = join(workspace, t.kind === "note" ? `memory/${t.path}` : t.kind === "skill" ? `skills/${t.path}` : t.path);
          try {
            mkdirSync(join(path, ".."), { recursive: true });
            // Never over what is there: a FIFO an earlier thing made would block a write into it.
            if (t.kind === "file" || t.kind === "note") writeFileSync(path, t.text, { flag: "wx" });
            else if (t.kind === "link") symlinkSync(secret, path);
            else if (t.kind === "fifo") execFileSync("mkfifo", [path], { stdio: "ignore" });
            else {
              for (const [f, body] of Object.entries(t.files)) {
                mkdirSync(join(path, f, ".."), { recursive: true });
                writeFileSync(join(path, f), body, { flag: "wx" });
              }
            }
          } catch {
            // A path an earlier thing took (a file where a folder would go): the folder is as odd as it is.
          }
        }
        const dbPath = join(state, "agents", "main", "agent", "openclaw-agent.sqlite");
        if (db.kind !== "none") {
          mkdirSync(join(dbPath, ".."), { recursive: true });
          if (db.kind === "hard") linkSync(join(place, "secret.sqlite"), dbPath);
          else if (db.kind === "bytes") writeFileSync(dbPath, db.bytes);
          else {
            // A copy: sql.js keeps the bytes it is given as its file, and writes into them.
            const d = new SQL.Database(new Uint8Array(fixture));
            d.run("PRAGMA ignore_check_constraints = ON");
            for (const r of db.rows) {
              d.run("INSERT OR REPLACE INTO transcript_events (session_id, seq, event_json, created_at, event_zstd) VALUES (?, ?, ?, ?, ?)", [r.session, r.seq, r.json, r.created ?? 0, r.zstd]);
            }
            writeFileSync(dbPath, d.export());
            d.close();
          }
        }
        for (const t of jsonl) {
          const folder = join(state, "agents", "main", "sessions");
          mkdirSync(folder, { recursive: true });
          try {
            if (t.how === "link") symlinkSync(join(place, "secret.jsonl"), join(folder, t.name));
            else if (t.how === "hard") linkSync(join(place, "secret.jsonl"), join(folder, t.name));
            else if (t.how === "fifo") execFileSync("mkfifo", [join(folder, t.name)], { stdio: "ignore" });
            else writeFileSync(join(folder, t.name), t.lines.join("\n"), { flag: "wx" });
          } catch {
            // A name an earlier transcript took.
          }
        }
        const source = files(openclaw);
        const dir = join(place, "agent");
        mkdirSync(dir);
        let raw;
        try {
          raw = (await readOpenClaw(openclaw)).state;
        } catch (e) {
          expect(e).toBeInstanceOf(OpenClawError);
          expect((e as Error).message).toMatch(/^[^\n]+$/);
          expect(readdirSync(dir)).toEqual([]);
          outcomes.refused++;
          return;
        }
        if (!(await take(dir, raw))) {
          expect(readdirSync(dir)).toEqual([]);
          outcomes.refused++;
          return;
        }
        outcomes.taken++;
        // Nothing beside the agent's folder and the OpenClaw one, which was only read.
        expect(readdirSync(place).sort()).toEqual(["agent", "openclaw", "secret.jsonl", "secret.md", "secret.sqlite"]);
        expect(files(openclaw)).toEqual(source);
        const got = files(dir);
        for (const f of Object.keys(got)) expect(f).toMatch(OWN);
        expect(JSON.stringify(got)).not.toContain(SECRET);
        // Again: nothing new.
        await take(dir, (await readOpenClaw(openclaw)).state);
        expect(files(dir)).toEqual(got);
      }),
      { numRuns: 60, endOnFailure: true, ...seed },
    );
    expect(outcomes.taken).toBeGreaterThan(10);
    expect(outcomes.refused).toBeGreaterThan(3);
  });
});

describe("States with sessions through state import, fuzzed", { timeout: 120_000 }, () => {
  const time = fc.constantFrom("2026-01-02T03:04:05.000Z", "2026-01-02T03:04:06Z", "not a time");
  const user = fc.record({ v: fc.constant(1), time, kind: fc.constant("message"), role: fc.constant("user"), text: fc.string({ maxLength: 10 }), header: fc.constant("[h]") });
  const answer = fc.record({
    v: fc.constant(1),
    time,
    kind: fc.constant("message"),
    role: fc.constant("assistant"),
    text: fc.string({ maxLength: 10 }),
    model: fc.constant("m"),
    provider: fc.constant("p"),
    latency_ms: fc.oneof(fc.constant(0), fc.constant(-1)),
    stop: fc.constantFrom("end_turn", "tool_calls", "bogus"),
  });
  const result = fc.record({ v: fc.constant(1), time, kind: fc.constant("tool_result"), call_id: fc.constant("c"), tool: fc.constant("t"), text: fc.string({ maxLength: 10 }), error: fc.boolean() });
  const eventOf = fc.oneof(user, answer, result, fc.jsonValue({ maxDepth: 2 }));
  const thread = fc.oneof(fc.stringMatching(/^[a-z][a-z0-9-]{0,6}$/), fc.constantFrom("..", ".hidden", "a/b", "", "x".repeat(300), "chats"));
  const session = fc.oneof(fc.record({ thread, events: fc.array(eventOf, { maxLength: 4 }) }), fc.jsonValue({ maxDepth: 2 }));
  const stateOf = fc.record(
    {
      instructions: fc.string({ maxLength: 10 }),
      memory: fc.array(fc.record({ path: fc.constantFrom("MEMORY.md", "memory/a.md", "../x"), text: fc.string({ maxLength: 10 }), source: fc.constantFrom("link", "hermes") }), { maxLength: 2 }),
      sessions: fc.array(session, { maxLength: 4 }),
    },
    { requiredKeys: [] },
  );

  it("each is taken whole, or refused naming the field with nothing written; a second import duplicates nothing", async () => {
    let n = 0;
    const outcomes = { taken: 0, refused: 0 };
    await fc.assert(
      fc.asyncProperty(stateOf, async (s) => {
        const imported = await importOnce(join(root, `state-${++n}`), s);
        if (!imported.taken) {
          outcomes.refused++;
          return;
        }
        outcomes.taken++;
        for (const f of Object.keys(imported.got)) expect(f).toMatch(OWN);
        // Each session with events is a conversation holding them, in order.
        const taken = (s.sessions ?? []).filter((x) => typeof x === "object" && x !== null && "events" in x && Array.isArray(x.events) && x.events.length > 0);
        expect(imported.came).toHaveLength(taken.length);
        expect(imported.again).toEqual([]);
      }),
      { numRuns: 300, endOnFailure: true, ...seed },
    );
    expect(outcomes.taken).toBeGreaterThan(20);
    expect(outcomes.refused).toBeGreaterThan(20);
  });
});

describe("a zstd copy's headers", () => {
  it("a header cut short, or a window past the bound before its content size is read, is a fault", () => {
    const magic = [0x28, 0xb5, 0x2f, 0xfd];
    // Not single-segment, an 8-byte content size said and none of it there: the window is judged first.
    expect(zstdFault(new Uint8Array([...magic, 0xc0, 0xa7]))).toMatch(/asks for a window of 2013265920 bytes/);
    expect(zstdFault(new Uint8Array([...magic, 0xc0, 0x80]))).toMatch(/asks for a window of 67108864 bytes/);
    // A window within the bound, the rest cut short: not a frame that can be read, before anything is held.
    expect(zstdFault(new Uint8Array([...magic, 0xc0, 0x50]))).toBe("its zstd copy is not a zstd frame that can be read");
    expect(zstdFault(new Uint8Array([...magic, 0xe0]))).toBe("its zstd copy is not a zstd frame that can be read");
    expect(zstdFault(new Uint8Array([...magic]))).toBe("its zstd copy is not a zstd frame that can be read");
  });
});

describe("a zstd copy's headers, fuzzed", () => {
  it("any bytes are judged without a throw; a frame zstd itself made for an event is never refused", () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 64 }), fc.boolean(), (bytes, framed) => {
        const data = framed ? new Uint8Array([0x28, 0xb5, 0x2f, 0xfd, ...bytes]) : bytes;
        const fault = zstdFault(data);
        expect(fault === undefined || typeof fault === "string").toBe(true);
      }),
      { numRuns: 5_000, ...seed },
    );
    fc.assert(
      fc.property(fc.string({ maxLength: 2_000 }), fc.constantFrom(1, 3, 19), (text, level) => {
        const frame = execFileSync("zstd", ["-q", "-c", `-${level}`], { input: JSON.stringify({ type: "message", text }) });
        expect(zstdFault(new Uint8Array(frame))).toBeUndefined();
      }),
      { numRuns: 20, ...seed },
    );
  });
});

describe("a database of many sessions", () => {
  it("measures the first by id up to the bound and counts the rest as left behind; those it read come in the order they began", async () => {
    const SQL = await initSqlJs();
    const db = new SQL.Database();
    db.run("CREATE TABLE transcript_events (session_id TEXT NOT NULL, seq INTEGER NOT NULL, event_json TEXT, created_at INTEGER NOT NULL, event_zstd BLOB, PRIMARY KEY (session_id, seq))");
    const at = Date.parse("2026-12-01T08:00:00Z");
    // s0 to s4 by id, begun in the other order; s3 and s4 past a bound of 3, each of two rows.
    for (let i = 0; i < 5; i++) {
      for (const seq of [1, 2]) {
        const time = at + (5 - i) * 1000 + seq;
        db.run("INSERT INTO transcript_events VALUES (?, ?, ?, ?, NULL)", [`s${i}`, seq, JSON.stringify({ type: "message", id: `e${seq}`, message: { role: "user", content: `s${i} ${seq}`, timestamp: time } }), time]);
      }
    }
    const into = new SessionsRead();
    await readDatabase(db.export(), "agent.sqlite", into, 3);
    db.close();
    expect(into.sessions.map((s) => [s.thread, s.events.length])).toEqual([
      ["openclaw-s2", 2],
      ["openclaw-s1", 2],
      ["openclaw-s0", 2],
    ]);
    expect(into.left).toContain("agent.sqlite: 2 sessions past the import's 3 (the first by id are read)");
  });
});

describe("sessions whose ids make one thread, fuzzed", () => {
  it("each comes under a thread of its own; only the transcript of the database's very session is said to be the database's", async () => {
    const SQL = await initSqlJs();
    // Ids that make one thread (openclaw-a-b or openclaw-a.b), some of them in both places.
    const ids = fc.uniqueArray(fc.constantFrom<string>("a b", "a-b", "a  b", "a..b", "a.b", "a\tb"), { maxLength: 5 });
    let n = 0;
    await fc.assert(
      fc.asyncProperty(ids, fc.uniqueArray(fc.constantFrom<string>("a b", "a-b", "a  b", "a..b", "a.b", "a/b"), { maxLength: 5 }), async (inTranscripts, inDatabase) => {
        const agentDir = join(root, `one-thread-${++n}`, "agents", "main");
        mkdirSync(join(agentDir, "agent"), { recursive: true });
        mkdirSync(join(agentDir, "sessions"));
        const said = (where: string, id: string, at: number) => JSON.stringify({ type: "message", message: { role: "user", content: `${where} ${id}`, timestamp: at } });
        const db = new SQL.Database();
        db.run("CREATE TABLE transcript_events (session_id TEXT NOT NULL, seq INTEGER NOT NULL, event_json TEXT, created_at INTEGER NOT NULL, event_zstd BLOB, PRIMARY KEY (session_id, seq))");
        inDatabase.forEach((id, i) => db.run("INSERT INTO transcript_events VALUES (?, 1, ?, ?, NULL)", [id, said("database", id, 1764528000000 + i), 1764528000000 + i]));
        writeFileSync(join(agentDir, "agent", "openclaw-agent.sqlite"), db.export());
        db.close();
        for (const id of inTranscripts) writeFileSync(join(agentDir, "sessions", `${id}.jsonl`), `${said("transcript", id, 1764528000000)}\n`);
        const { state, left } = await readOpenClaw(join(agentDir, "..", ".."));
        const sessions = state.sessions ?? [];
        // Every session, under a thread no other has, holding what it said.
        const want = [...inDatabase.map((id) => `database ${id}`), ...inTranscripts.filter((id) => !inDatabase.includes(id)).map((id) => `transcript ${id}`)];
        expect(sessions.map((s) => s.events.map((e) => ("text" in e ? (e.text ?? "").split("\n").at(-1) : "")).join()).sort()).toEqual(want.sort());
        expect(new Set(sessions.map((s) => s.thread)).size).toBe(sessions.length);
        const held = left.filter((l) => l.includes("the transcript of a session the database holds"));
        expect(held.sort()).toEqual(
          inTranscripts
            .filter((id) => inDatabase.includes(id))
            .map((id) => `agents/main/sessions/${id}.jsonl: the transcript of a session the database holds: read from the database`)
            .sort(),
        );
      }),
      { numRuns: 60, ...seed },
    );
  });
});

describe("a transcript of many faults, fuzzed", () => {
  it("names at most a thousand things a session leaves, counts the rest, and carries every message among them in order", async () => {
    let past = 0;
    /** A line OpenClaw would not write: each of a fault, a type, a role or a field of its own. */
    const junk = fc.oneof(
      fc.constantFrom("{}", "{bad", "[]", "null", '"x"'),
      fc.nat().map((n) => JSON.stringify({ type: `t${n}` })),
      fc.nat().map((n) => JSON.stringify({ type: "message", message: { role: `r${n}`, timestamp: 1 } })),
      fc.nat().map((n) => JSON.stringify({ type: "message", message: { role: "toolResult", content: [{ type: `p${n}` }], timestamp: 1, [`f${n}`]: 1 } })),
    );
    await fc.assert(
      fc.asyncProperty(fc.array(fc.oneof({ weight: 1, arbitrary: fc.nat().map((n) => ({ said: `m${n}` })) }, { weight: 30, arbitrary: junk }), { maxLength: 3000, size: "max" }), async (lines) => {
        const text = lines.map((l) => (typeof l === "string" ? l : JSON.stringify({ type: "message", message: { role: "user", content: l.said, timestamp: 1764528000000 } }))).join("\n");
        const into = new SessionsRead();
        await readTranscript(text, "s", into);
        into.done();
        const said = lines.flatMap((l) => (typeof l === "string" ? [] : [l.said]));
        expect(into.sessions.flatMap((s) => s.events.map((e) => ("text" in e ? e.text : "")))).toEqual(said);
        const own = into.left.filter((l) => l.startsWith("session openclaw-s: "));
        const shared = into.left.filter((l) => l.startsWith("sessions: "));
        expect(own.length).toBeLessThanOrEqual(OPENCLAW_LEFT_NAMED + 1);
        expect(shared.length).toBeLessThanOrEqual(OPENCLAW_LEFT_NAMED + 1);
        // Past the bound, the last line counts what was not named.
        if (own.length > OPENCLAW_LEFT_NAMED) {
          past++;
          expect(own.at(-1)).toMatch(/^session openclaw-s: \d+ more things? not carried, past the first 1000 named$/);
        }
      }),
      { numRuns: 30, ...seed },
    );
    // Transcripts past the bound were among them.
    expect(past).toBeGreaterThan(0);
  });
});
