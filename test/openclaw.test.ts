// `state import --from openclaw DIR` over the built command line, with the real OpenClaw 2026.9.6 state
// folder of test/fixtures (copied, never written): who the agent is but OpenClaw's own defaults,
// its notes, its skill and both conversations come, everything else is named as left behind; the
// conversations replay over session/load with the daemon as a child process and go on with the same
// history; a second import duplicates nothing; an export after it gives back what came. Then the
// folder made hostile: not a folder, no database, a database that is not SQLite, bad events, links,
// a FIFO; each a clear line or a named leave-behind, nothing written outside the agent's folder.
import { execFileSync } from "node:child_process";
import { chmodSync, cpSync, existsSync, linkSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import * as acp from "@agentclientprotocol/sdk";
import initSqlJs from "sql.js";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { AspState } from "../protocol/index.js";
import { paths, readEventsFrom } from "../store/index.js";
import { configure, daemonTestHooks, scriptedSettings, startDaemon, stdioClient, type Daemon, watched } from "./acp-client.js";
import type { ModelServer, RecordedRequest } from "./model-server.js";
import { BIN, MAIN, ROOT } from "./fixtures/built.js";
import { run } from "./fixtures/child.js";
import { files } from "./fixtures/files.js";

export const FIXTURE = join(ROOT, "test", "fixtures", "openclaw-2026.9.6");
const DB = "state/agents/main/agent/openclaw-agent.sqlite";
const FIRST = "openclaw-c0d45299-f027-41df-af45-7363803a7ad5";
const SECOND = "openclaw-faf7aa5c-d2a6-486c-8156-0c957356be3b";

let server: ModelServer;
const cleanup = daemonTestHooks([BIN, "dist/daemon/state-import.js", "dist/asp/openclaw.js", "dist/asp/openclaw-sessions.js", "dist/asp/state-import.js"], (s) => (server = s));

function temp(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  cleanup.push(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** A writable copy of the fixture. */
export function copyFixture(into: string): string {
  const dir = join(into, "openclaw");
  cpSync(FIXTURE, dir, { recursive: true });
  execFileSync("chmod", ["-R", "u+w", dir]);
  return dir;
}

const cli = (args: string[], input = "") => run(process.execPath, [MAIN, ...args], { input, ms: 30_000 });

/** Changes the copy's database with SQL (its CHECKs off, as a hostile writer's would be). */
export async function alterDb(openclaw: string, ...statements: [string, unknown[]?][]): Promise<void> {
  const SQL = await initSqlJs();
  const path = join(openclaw, DB);
  const db = new SQL.Database(readFileSync(path));
  db.run("PRAGMA ignore_check_constraints = ON");
  for (const [sql, params] of statements) db.run(sql, params as never);
  writeFileSync(path, db.export());
  db.close();
}

interface Said {
  role: string;
  text: string;
}

/** What the fixture's database holds of a session's messages, read here on its own: role and text, in seq order. */
async function saidIn(sessionId: string): Promise<Said[]> {
  const SQL = await initSqlJs();
  const db = new SQL.Database(readFileSync(join(FIXTURE, DB)));
  const rows = db.exec("SELECT event_json FROM transcript_events WHERE session_id = ? ORDER BY seq", [sessionId])[0]?.values ?? [];
  db.close();
  const Entry = z.object({ type: z.string(), message: z.object({ role: z.string(), content: z.union([z.string(), z.array(z.object({ text: z.string() }).loose())]) }).loose().optional() }).loose();
  return rows
    .map((r) => Entry.parse(JSON.parse(String(r[0]))))
    .filter((e) => e.type === "message" && e.message)
    .map((e) => ({ role: e.message?.role ?? "", text: typeof e.message?.content === "string" ? e.message.content : (e.message?.content ?? []).map((p) => p.text).join("\n") }));
}

function agent(): string {
  const dir = join(temp("lnk-openclaw-"), "agent");
  mkdirSync(dir);
  configure(dir, scriptedSettings(server.url));
  return dir;
}

function daemon(dir: string): Daemon {
  return watched(startDaemon(["--agent", dir]), cleanup);
}

describe("state import --from openclaw, the real fixture", { timeout: 180_000 }, () => {
  it("takes what the agent is, remembered and said, names what is left, and duplicates nothing the second time", async () => {
    const openclaw = copyFixture(temp("lnk-openclaw-src-"));
    const dir = agent();
    const r = await cli(["state", "import", "--from", "openclaw", "--agent", dir, openclaw]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toBe("");
    const lines = r.stdout.trimEnd().split("\n");
    expect(lines.filter((l) => l.startsWith("came: "))).toEqual([
      "came: skill metric-units: 1 file into skills/metric-units/",
      "came: note MEMORY.md (openclaw): into a block of memory/notes.md",
      "came: note memory/2026-11-28.md (openclaw): into a block of memory/notes.md",
      `came: session ${FIRST}: 12 events into chats/${FIRST}/`,
      `came: session ${SECOND}: 4 events into chats/${SECOND}/`,
    ]);
    // OpenClaw's seeded files are its own default; its settings, its other records and every event
    // and field not carried are named.
    for (const file of ["SOUL.md", "IDENTITY.md", "USER.md", "AGENTS.md"]) {
      expect(lines).toContain(`left behind: workspace/${file}: OpenClaw's own default, unchanged from what it seeds: the harness's, not the agent's`);
    }
    expect(lines).toContain("left behind: state/openclaw.json: OpenClaw's own settings (its gateway, models and channels): the agent's spec in Link holds these");
    for (const thread of [FIRST, SECOND]) {
      expect(lines).toContain(`left behind: session ${thread}: its "thinking_level_change" event: OpenClaw's thinking level, which Link Harness takes from the agent's spec`);
      expect(lines).toContain(`left behind: session ${thread}: its "custom" "model-snapshot" event: OpenClaw's own records`);
    }
    expect(lines).toContain(`left behind: sessions: their messages' usage.cost: OpenClaw's own count or price, not carried (8 times)`);
    expect(lines.find((l) => l.startsWith(`left behind: ${DB}: its other tables`))).toContain("trajectory_runtime_events (56 rows)");
    expect(lines.every((l) => /^(came|left behind): /.test(l))).toBe(true);

    // The files: the skill as it was, the notes in Link's blocks, no instructions (all OpenClaw's default).
    expect(readFileSync(join(dir, "skills", "metric-units", "SKILL.md"), "utf8")).toBe(readFileSync(join(FIXTURE, "workspace", "skills", "metric-units", "SKILL.md"), "utf8"));
    const notes = readFileSync(join(dir, "memory", "notes.md"), "utf8");
    expect(notes).toContain("<!-- link:begin imported openclaw MEMORY.md");
    expect(notes).toContain("- Ada prefers tea over coffee.");
    expect(notes).toContain("She planted tulip bulbs along the south fence.");
    expect(existsSync(join(dir, "instructions", "instruction.md"))).toBe(false);

    // Both conversations, every message in order with its time and the model that answered.
    for (const [thread, id, turns] of [
      [FIRST, "c0d45299-f027-41df-af45-7363803a7ad5", 6],
      [SECOND, "faf7aa5c-d2a6-486c-8156-0c957356be3b", 2],
    ] as const) {
      const events = readEventsFrom(paths({ dir }).conversation(thread), 1).map((e) => e.event);
      const said = await saidIn(id);
      expect(said).toHaveLength(turns * 2);
      expect(events.map((e) => (e.kind === "message" ? { role: e.role, text: e.text } : { role: e.kind, text: "" }))).toEqual(said);
      expect(said.filter((s) => s.role === "user").map((s) => s.text.split("\n").at(-1))).toEqual(Array.from({ length: turns }, (_, i) => `turn ${i + 1}: please answer briefly`));
      const times = events.map((e) => e.time);
      expect([...times].sort()).toEqual(times);
      for (const e of events) if (e.kind === "message" && e.role === "assistant") expect([e.model, e.provider]).toEqual(["scripted", "scripted"]);
    }

    // A second import: nothing new written, each thing said to be there already.
    const before = files(dir);
    const again = await cli(["state", "import", "--from", "openclaw", "--agent", dir, openclaw]);
    expect(again.code, again.stderr).toBe(0);
    expect(files(dir)).toEqual(before);
    expect(again.stdout).not.toMatch(/^came: /m);
    expect(again.stdout).toContain(`left behind: session ${FIRST}: already imported as chats/${FIRST}/\n`);
    expect(again.stdout).toContain("left behind: note MEMORY.md (openclaw): already in a block of memory/notes.md\n");
    // The fixture was only read.
    expect(files(openclaw)).toEqual(files(FIXTURE));
  });

  it("the conversations replay over session/load and go on with the same history; an export gives back what came", async () => {
    const openclaw = copyFixture(temp("lnk-openclaw-src-"));
    // The owner's own text in two of the seeded files: it is carried, under its heading.
    const soul = "# SOUL.md\nYou are Wren, a patient gardener's helper.\n";
    const user = "# USER.md\n- Prefer metric units.\n";
    writeFileSync(join(openclaw, "workspace", "SOUL.md"), soul);
    writeFileSync(join(openclaw, "workspace", "USER.md"), user);
    const dir = agent();
    const r = await cli(["state", "import", "--from", "openclaw", "--agent", dir, openclaw]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/^came: instructions: into instructions\/instruction\.md$/m);
    expect(r.stdout).toMatch(/^left behind: workspace\/AGENTS\.md: OpenClaw's own default/m);

    const d = daemon(dir);
    const c = await stdioClient(d, cleanup);
    const said = await saidIn("c0d45299-f027-41df-af45-7363803a7ad5");
    await c.agent.request(acp.methods.agent.session.load, { sessionId: FIRST, cwd: ROOT, mcpServers: [] });
    const replayed = c.updates
      .map((u) => u.update)
      .filter((u) => u.sessionUpdate === "user_message_chunk" || u.sessionUpdate === "agent_message_chunk")
      .map((u) => ({ role: u.sessionUpdate === "user_message_chunk" ? "user" : "assistant", text: "content" in u && u.content.type === "text" ? u.content.text : "" }));
    expect(replayed).toEqual(said);

    // The next turn sends the model every message of it, in order, each user's under its header.
    server.script({ text: "Next." });
    const at = server.requests.length;
    await c.agent.request(acp.methods.agent.session.prompt, { sessionId: FIRST, prompt: [{ type: "text", text: "and now?" }] });
    const messages = (server.requests[at] as RecordedRequest).body.messages ?? [];
    const history = messages.slice(1, -1).map((m) => {
      const { role, content } = z.object({ role: z.string(), content: z.string() }).loose().parse(m);
      return { role, text: role === "user" ? content.slice(content.indexOf("\n") + 1) : content };
    });
    expect(history).toEqual(said);
    for (const m of messages.slice(1, -1)) {
      const { role, content } = z.object({ role: z.string(), content: z.string() }).loose().parse(m);
      if (role === "user") expect(content.split("\n")[0]).toMatch(/^\[2026-11-30 18:5\d UTC · direct · your owner\]$/);
    }

    // What came is what an export gives back: the instructions under their headings, the skill, the sessions.
    const state = AspState.parse(await c.agent.request("_asp/export", {}));
    c.close();
    await d.stop();
    expect(state.instructions).toBe(`## Who you are\n${soul.trim()}\n\n## Your owner\n${user.trim()}\n`);
    expect(state.skills).toEqual([{ name: "metric-units", files: { "SKILL.md": readFileSync(join(FIXTURE, "workspace", "skills", "metric-units", "SKILL.md"), "utf8") } }]);
    expect((state.sessions ?? []).map((s) => [s.thread, s.events.length])).toEqual([
      [FIRST, 12 + 2],
      [SECOND, 4],
    ]);
    // The notes are another harness's, kept in Link's blocks: never given back as Link Harness's own.
    expect(state.memory).toEqual([]);
    const printed = await cli(["state", "export", "--agent", dir]);
    expect(AspState.parse(JSON.parse(printed.stdout))).toEqual({ instructions: state.instructions, skills: state.skills, memory: [] });
  });

  it("carries tool calls, their results, thinking and zstd-compressed events; names a bad event and goes on", async () => {
    const openclaw = copyFixture(temp("lnk-openclaw-src-"));
    const id = "faf7aa5c-d2a6-486c-8156-0c957356be3b";
    const at = (seq: number) => Date.parse(`2026-11-30T19:00:${String(seq).padStart(2, "0")}.000Z`);
    const entry = (seq: number, message: unknown) => JSON.stringify({ type: "message", id: `e${seq}`, parentId: `e${seq - 1}`, timestamp: new Date(at(seq)).toISOString(), message });
    const zipped = execFileSync("zstd", ["-q", "-c"], { input: entry(11, { role: "user", content: [{ type: "text", text: "compressed, and read" }], timestamp: at(11) }) });
    const ins = "INSERT INTO transcript_events (session_id, seq, event_json, created_at, event_zstd, event_utf8_bytes, navigation_json) VALUES (?, ?, ?, ?, ?, ?, ?)";
    await alterDb(
      openclaw,
      [ins, [id, 7, entry(7, { role: "user", content: "use the tool", timestamp: at(7) }), at(7), null, null, null]],
      [
        ins,
        [
          id,
          8,
          entry(8, {
            role: "assistant",
            content: [
              { type: "thinking", thinking: "The owner wants the tool.", thinkingSignature: "sig" },
              { type: "toolCall", id: "call-1", name: "read", arguments: { path: "notes.md" } },
            ],
            model: "scripted",
            provider: "scripted",
            usage: { input: 5, output: 2, cacheRead: 3, cacheWrite: 1, totalTokens: 11 },
            stopReason: "toolUse",
            timestamp: at(8),
          }),
          at(8),
          null,
          null,
          null,
        ],
      ],
      [ins, [id, 9, entry(9, { role: "toolResult", toolCallId: "call-1", toolName: "read", content: [{ type: "text", text: "tulips" }], isError: false, timestamp: at(9) }), at(9), null, null, null]],
      [ins, [id, 10, "{not json", at(10), null, null, null]],
      [ins, [id, 11, null, at(11), new Uint8Array(zipped), 10, "{}"]],
      [ins, [id, 12, null, at(12), new Uint8Array([40, 181, 47, 253, 1, 2, 3]), 10, "{}"]],
      [ins, [id, 13, entry(13, { role: "bashExecution", command: "ls", output: "x" }), at(13), null, null, null]],
    );
    const dir = agent();
    const r = await cli(["state", "import", "--from", "openclaw", "--agent", dir, openclaw]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain(`came: session ${SECOND}: 8 events into chats/${SECOND}/\n`);
    expect(r.stdout).toContain(`left behind: session ${SECOND}: its event seq 10: its JSON can't be read\n`);
    expect(r.stdout).toContain(`left behind: session ${SECOND}: its event seq 12: its zstd copy is not a zstd frame that can be read\n`);
    expect(r.stdout).toContain(`left behind: session ${SECOND}: its event seq 13: a message of role "bashExecution": OpenClaw's own, which Link Harness has no event for\n`);
    expect(r.stdout).toContain("left behind: sessions: a thinking's signature: its provider's alone, not carried\n");
    const events = readEventsFrom(paths({ dir }).conversation(SECOND), 1).map((e) => e.event);
    expect(events.slice(4)).toEqual([
      { v: 1, time: "2026-11-30T19:00:07.000Z", kind: "message", role: "user", text: "use the tool", header: "[2026-11-30 19:00 UTC · direct · your owner]" },
      {
        v: 1,
        time: "2026-11-30T19:00:08.000Z",
        kind: "message",
        role: "assistant",
        text: "",
        model: "scripted",
        provider: "scripted",
        // OpenClaw's input and what it read from and wrote to the cache: all the prompt.
        usage: { in: 9, out: 2, cached: 3 },
        latency_ms: 0,
        thinking: { reasoning_content: "The owner wants the tool." },
        tool_calls: [{ id: "call-1", name: "read", arguments: '{"path":"notes.md"}' }],
        stop: "tool_calls",
      },
      { v: 1, time: "2026-11-30T19:00:09.000Z", kind: "tool_result", call_id: "call-1", tool: "read", text: "tulips", error: false },
      { v: 1, time: "2026-11-30T19:00:11.000Z", kind: "message", role: "user", text: "compressed, and read", header: "[2026-11-30 19:00 UTC · direct · your owner]" },
    ]);

    // The call replays as a tool call with its result.
    const d = daemon(dir);
    const c = await stdioClient(d, cleanup);
    await c.agent.request(acp.methods.agent.session.load, { sessionId: SECOND, cwd: ROOT, mcpServers: [] });
    const kinds = c.updates.map((u) => u.update.sessionUpdate);
    expect(kinds.filter((k) => k === "tool_call" || k === "tool_call_update")).toEqual(["tool_call", "tool_call_update"]);
    c.close();
    await d.stop();
  });
});

describe("state import --from openclaw, a hostile database", { timeout: 60_000 }, () => {
  it("a zstd copy of a hundred bytes that asks for a window of gigabytes is named and left behind at once, the rest read", async () => {
    const openclaw = copyFixture(temp("lnk-openclaw-src-"));
    const id = "faf7aa5c-d2a6-486c-8156-0c957356be3b";
    // A frame whose window is 1.875 GiB, then 32 blocks of one byte repeated 128 KiB: 4 MiB out.
    const blocks = Array.from({ length: 32 }, (_, i) => {
      const header = (i === 31 ? 1 : 0) | (1 << 1) | (131072 << 3);
      return [header & 0xff, (header >> 8) & 0xff, (header >> 16) & 0xff, 0x61];
    }).flat();
    const bomb = new Uint8Array([0x28, 0xb5, 0x2f, 0xfd, 0x00, 0xa7, ...blocks]);
    const ins = "INSERT INTO transcript_events (session_id, seq, event_json, created_at, event_zstd, event_utf8_bytes, navigation_json) VALUES (?, ?, ?, ?, ?, ?, ?)";
    await alterDb(openclaw, ...[7, 8, 9].map((seq): [string, unknown[]] => [ins, [id, seq, null, Date.parse("2026-11-30T19:00:00Z") + seq, bomb, 10, "{}"]]));
    const dir = agent();
    const r = await cli(["state", "import", "--from", "openclaw", "--agent", dir, openclaw]);
    expect(r.code, r.stderr).toBe(0);
    for (const seq of [7, 8, 9]) expect(r.stdout).toContain(`left behind: session ${SECOND}: its event seq ${seq}: its zstd copy asks for a window of 2013265920 bytes, over 16777216\n`);
    expect(r.stdout).toContain(`came: session ${SECOND}: 4 events into chats/${SECOND}/\n`);
  });

  it("a session that unpacks to more than the import takes: measured a row at a time, named, the sessions before and after it carried", async () => {
    const openclaw = copyFixture(temp("lnk-openclaw-src-"));
    // One message of 4 MiB of JSON from a frame of 300 bytes: raw blocks around 31 blocks of "a" repeated 128 KiB.
    const frame = (at: number): Uint8Array => {
      const [head, tail] = JSON.stringify({ type: "message", id: `e${at}`, message: { role: "user", content: "\u0000", timestamp: at } }).split("\\u0000");
      const raw = (text: string, last: boolean) => {
        const size = Buffer.byteLength(text);
        const header = (last ? 1 : 0) | (size << 3);
        return [header & 0xff, (header >> 8) & 0xff, (header >> 16) & 0xff, ...Buffer.from(text)];
      };
      const rle = Array.from({ length: 31 }, () => {
        const header = (1 << 1) | (131072 << 3);
        return [header & 0xff, (header >> 8) & 0xff, (header >> 16) & 0xff, 0x61];
      }).flat();
      const content = Buffer.byteLength(head as string) + 31 * 131072 + Buffer.byteLength(tail as string);
      const size = Array.from({ length: 4 }, (_, i) => (content >> (8 * i)) & 0xff);
      // Single segment, its size in four bytes.
      return new Uint8Array([0x28, 0xb5, 0x2f, 0xfd, 0xa0, ...size, ...raw(head as string, false), ...rle, ...raw(tail as string, true)]);
    };
    const ins = "INSERT INTO transcript_events (session_id, seq, event_json, created_at, event_zstd, event_utf8_bytes, navigation_json) VALUES (?, ?, ?, ?, ?, ?, ?)";
    const start = Date.parse("2026-12-01T08:00:00Z");
    const small = (id: string, at: number): [string, unknown[]] => [ins, [id, 1, JSON.stringify({ type: "message", id: "e1", message: { role: "user", content: `hello from ${id}`, timestamp: at } }), at, null, null, null]];
    // 280 MiB of messages in one session, begun between two small ones: over the import's limit, and
    // over the heap the import is given below, were they held at once.
    const big = Array.from({ length: 70 }, (_, i): [string, unknown[]] => [ins, ["big", i + 1, null, start + 1000 + i, frame(start + 1000 + i), 4194304, "{}"]]);
    await alterDb(openclaw, ["DELETE FROM transcript_events"], small("early", start), ...big, small("late", start + 5000));
    const dir = agent();
    const r = await run(process.execPath, ["--max-old-space-size=200", MAIN, "state", "import", "--from", "openclaw", "--agent", dir, openclaw], { ms: 120_000 });
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain("came: session openclaw-early: 1 event into chats/openclaw-early/\n");
    expect(r.stdout).toContain("came: session openclaw-late: 1 event into chats/openclaw-late/\n");
    expect(r.stdout).toContain(`left behind: session openclaw-big: past the import's limit of ${256 * 1024 * 1024} bytes of sessions\n`);
    expect(existsSync(paths({ dir }).conversation("openclaw-big").dir)).toBe(false);
  }, 180_000);

  it("a transcript_events that is a view (one that computes rows without end) is not read: one line, exit 2, nothing written", async () => {
    const openclaw = copyFixture(temp("lnk-openclaw-src-"));
    await alterDb(
      openclaw,
      ["DROP TABLE transcript_events"],
      ["CREATE VIEW transcript_events AS WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c) SELECT 's1' AS session_id, i AS seq, NULL AS event_json, NULL AS event_zstd, 0 AS created_at FROM c WHERE i < 0"],
    );
    const dir = agent();
    const r = await cli(["state", "import", "--from", "openclaw", "--agent", dir, openclaw]);
    expect(r.code).toBe(2);
    expect(r.stderr.trim().split("\n")).toHaveLength(1);
    expect(r.stderr).toContain("its transcript_events can't be read: it is a view, not a table");
    expect(existsSync(join(dir, "chats"))).toBe(false);
  });

  it("a name that would act on a terminal is printed escaped, on its own line", async () => {
    const openclaw = copyFixture(temp("lnk-openclaw-src-"));
    writeFileSync(join(openclaw, "workspace", "x\u001b]0;pwned\u0007\u001b[2J\rcame: instructions"), "odd\n");
    const dir = agent();
    const r = await cli(["state", "import", "--from", "openclaw", "--agent", dir, openclaw]);
    expect(r.code, r.stderr).toBe(0);
    // eslint-disable-next-line no-control-regex
    expect(r.stdout).not.toMatch(/[\u0000-\u0008\u000b-\u001f\u007f]/);
    expect(r.stdout).toContain("left behind: workspace/x\\u{1b}]0;pwned\\u{7}\\u{1b}[2J\\u{d}came: instructions");
  });

  it("a database folder that is a link out of DIR is named and not followed: no session read from it", async () => {
    const place = temp("lnk-openclaw-src-");
    const openclaw = copyFixture(place);
    const agentFolder = join(openclaw, dirname(DB));
    const outside = join(place, "outside-secret");
    renameSync(agentFolder, outside);
    symlinkSync(outside, agentFolder);
    const dir = agent();
    const r = await cli(["state", "import", "--from", "openclaw", "--agent", dir, openclaw]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain(`left behind: ${dirname(DB)}: a symbolic link, not followed\n`);
    expect(r.stdout).not.toMatch(/came: session /);
    expect(existsSync(join(dir, "chats"))).toBe(false);
  });
});

describe("state import --from openclaw, transcripts before the database", { timeout: 60_000 }, () => {
  it("reads sessions/<id>.jsonl, a line an event, and one the database holds from the database", async () => {
    const openclaw = copyFixture(temp("lnk-openclaw-src-"));
    const SQL = await initSqlJs();
    const db = new SQL.Database(readFileSync(join(FIXTURE, DB)));
    const lines = (id: string) => (db.exec("SELECT event_json FROM transcript_events WHERE session_id = ? ORDER BY seq", [id])[0]?.values ?? []).map((r) => String(r[0]));
    const first = lines("c0d45299-f027-41df-af45-7363803a7ad5");
    db.close();
    const sessions = join(openclaw, "state", "agents", "main", "sessions");
    mkdirSync(sessions);
    // An older session, kept only as a transcript (its lines those of the first, under another id, with a bad line).
    writeFileSync(join(sessions, "older-one.jsonl"), `${first.join("\n")}\n{bad\n`);
    writeFileSync(join(sessions, "faf7aa5c-d2a6-486c-8156-0c957356be3b.jsonl"), "{}\n");
    writeFileSync(join(sessions, "sessions.json"), "{}");
    const dir = agent();
    const r = await cli(["state", "import", "--from", "openclaw", "--agent", dir, openclaw]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain("came: session openclaw-older-one: 12 events into chats/openclaw-older-one/\n");
    expect(r.stdout).toContain(`came: session ${FIRST}: 12 events into chats/${FIRST}/\n`);
    expect(r.stdout).toContain("left behind: state/agents/main/sessions/faf7aa5c-d2a6-486c-8156-0c957356be3b.jsonl: the transcript of a session the database holds: read from the database\n");
    expect(r.stdout).toContain("left behind: state/agents/main/sessions/sessions.json: a file of OpenClaw's own, not a transcript: not carried\n");
    expect(r.stdout).toContain("left behind: session openclaw-older-one: its line 16: its JSON can't be read\n");
    const older = readEventsFrom(paths({ dir }).conversation("openclaw-older-one"), 1).map((e) => e.event);
    const same = readEventsFrom(paths({ dir }).conversation(FIRST), 1).map((e) => e.event);
    expect(older).toEqual(same);
  });

  it("a session whose id makes the same thread as another's, in a transcript or in the database, comes under a name of its own", async () => {
    const openclaw = copyFixture(temp("lnk-openclaw-src-"));
    const said = (text: string, at: number) => JSON.stringify({ type: "message", message: { role: "user", content: text, timestamp: at } });
    // Ids `c0d45299 f027-…` and `c0d45299-f027-…` make one thread: two sessions, not one.
    const sessions = join(openclaw, "state", "agents", "main", "sessions");
    mkdirSync(sessions);
    writeFileSync(join(sessions, "c0d45299 f027-41df-af45-7363803a7ad5.jsonl"), `${said("kept only as a transcript", 1764528000000)}\n`);
    writeFileSync(join(sessions, "faf7aa5c-d2a6-486c-8156-0c957356be3b.jsonl"), "{}\n");
    await alterDb(openclaw, ["INSERT INTO transcript_events (session_id, seq, event_json, created_at) VALUES (?, 1, ?, ?)", ["faf7aa5c d2a6-486c-8156-0c957356be3b", said("a later session of the database", 1796065000000), 1796065000000]]);
    const dir = agent();
    const r = await cli(["state", "import", "--from", "openclaw", "--agent", dir, openclaw]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain(`came: session ${FIRST}: 12 events into chats/${FIRST}/\n`);
    expect(r.stdout).toContain(`came: session ${FIRST}-2: 1 event into chats/${FIRST}-2/\n`);
    expect(r.stdout).toContain(`came: session ${SECOND}: 4 events into chats/${SECOND}/\n`);
    expect(r.stdout).toContain(`came: session ${SECOND}-2: 1 event into chats/${SECOND}-2/\n`);
    // Only the transcript of the database's very session is said to be the database's.
    expect(r.stdout.match(/the transcript of a session the database holds/g)).toHaveLength(1);
    expect(r.stdout).toContain("left behind: state/agents/main/sessions/faf7aa5c-d2a6-486c-8156-0c957356be3b.jsonl: the transcript of a session the database holds: read from the database\n");
    expect(r.stdout).not.toContain("a second session");
    const texts = (thread: string) => readEventsFrom(paths({ dir }).conversation(thread), 1).map((e) => (e.event.kind === "message" ? e.event.text.split("\n").at(-1) : ""));
    expect(texts(`${FIRST}-2`)).toEqual(["kept only as a transcript"]);
    expect(texts(`${SECOND}-2`)).toEqual(["a later session of the database"]);
    expect(texts(FIRST)).toHaveLength(12);
    // A second import finds each where the first put it.
    const again = await cli(["state", "import", "--from", "openclaw", "--agent", dir, openclaw]);
    expect(again.code, again.stderr).toBe(0);
    expect(again.stdout).not.toMatch(/came: session /);
    for (const thread of [FIRST, `${FIRST}-2`, SECOND, `${SECOND}-2`]) expect(again.stdout).toContain(`left behind: session ${thread}: already imported as chats/${thread}/\n`);
  });
});

describe("state import --from openclaw, transcripts of millions of lines", { timeout: 120_000 }, () => {
  it("are read a line at a time, each fault past the first thousand a session names counted, in a heap smaller than a row of each line", async () => {
    const openclaw = copyFixture(temp("lnk-openclaw-src-"));
    const sessions = join(openclaw, "state", "agents", "main", "sessions");
    mkdirSync(sessions);
    // Eight million blank lines; near two million events of no type or of a type or role of their own, each a fault of its own (under the 64 MiB a transcript may be).
    writeFileSync(join(sessions, "blank.jsonl"), "\n".repeat(8 * 1024 * 1024));
    const junk = Array.from({ length: 600_000 }, (_, i) => `{}\n{"type":"t${i}"}\n{"type":"message","message":{"role":"r${i}","timestamp":1}}\n`).join("");
    writeFileSync(join(sessions, "junk.jsonl"), `${junk}{"type":"message","message":{"role":"user","content":"still here","timestamp":1764528000000}}\n`);
    const dir = agent();
    const r = await run("/bin/sh", ["-c", 'exec "$0" --max-old-space-size=128 "$@"', process.execPath, MAIN, "state", "import", "--from", "openclaw", "--agent", dir, openclaw], { ms: 90_000 });
    expect(r.code, r.stderr.slice(-2000)).toBe(0);
    expect(r.stderr).toBe("");
    // The rest of the folder still came.
    expect(r.stdout).toContain(`came: session ${FIRST}: 12 events into chats/${FIRST}/\n`);
    expect(r.stdout).toContain("came: session openclaw-junk: 1 event into chats/openclaw-junk/\n");
    expect(r.stdout).toContain("left behind: session openclaw-blank: no events\n");
    const junkLines = r.stdout.split("\n").filter((l) => l.startsWith("left behind: session openclaw-junk: "));
    expect(junkLines).toHaveLength(1001);
    expect(junkLines[0]).toBe("left behind: session openclaw-junk: its line 1: not an object with a type");
    expect(junkLines.at(-1)).toBe(`left behind: session openclaw-junk: ${3 * 600_000 - 1000} more things not carried, past the first 1000 named`);
    expect(readEventsFrom(paths({ dir }).conversation("openclaw-junk"), 1).map((e) => e.event)).toMatchObject([{ role: "user", text: "still here" }]);
  });
});

describe("state import --from openclaw, bad folders", { timeout: 120_000 }, () => {
  it("not a folder, not OpenClaw's, a database that is not SQLite: one line, exit 2, nothing written", async () => {
    const place = temp("lnk-openclaw-bad-");
    const dir = agent();
    const before = files(dir);
    const file = join(place, "file");
    writeFileSync(file, "x");
    const empty = join(place, "empty");
    mkdirSync(empty);
    const corrupt = copyFixture(join(place, "corrupt"));
    writeFileSync(join(corrupt, DB), Buffer.alloc(8192, 7));
    const truncated = copyFixture(join(place, "truncated"));
    writeFileSync(join(truncated, DB), readFileSync(join(FIXTURE, DB)).subarray(0, 5000));
    const cases: [string[], RegExp][] = [
      [[file], /^lnk-link-harness: cannot import from openclaw: .*file is not a folder\n$/],
      [[join(place, "none")], /^lnk-link-harness: cannot import from openclaw: .*none: no such folder\n$/],
      [[empty], /^lnk-link-harness: cannot import from openclaw: .*empty is not an OpenClaw state folder: it holds neither openclaw\.json nor agents\//],
      [[corrupt], /^lnk-link-harness: cannot import from openclaw: state\/agents\/main\/agent\/openclaw-agent\.sqlite is not a SQLite database that can be read: file is not a database\n$/],
      [[truncated], /^lnk-link-harness: cannot import from openclaw: state\/agents\/main\/agent\/openclaw-agent\.sqlite/],
      [["--from", "hermes", empty], /^lnk-link-harness: --from "hermes": state import reads another harness's folder from openclaw only\n$/],
      [[], /^lnk-link-harness: state import --from openclaw takes one DIR/],
    ];
    for (const [args, why] of cases) {
      const r = await cli(["state", "import", ...(args[0] === "--from" ? [] : ["--from", "openclaw"]), "--agent", dir, ...args]);
      expect(r.code, `${args.join(" ")}: ${r.stderr}`).toBe(2);
      expect(r.stdout).toBe("");
      expect(r.stderr).toMatch(why);
      expect(files(dir)).toEqual(before);
    }
  });

  it("a database or a transcript of more than one name (a hard link), a link or a FIFO among the transcripts: each named as left behind, never read, as a workspace file of two names is", async () => {
    const place = temp("lnk-openclaw-hard-");
    const openclaw = copyFixture(place);
    // Files of another folder, named from inside this one by a second name.
    const otherDb = join(place, "other.sqlite");
    const other = join(place, "other.jsonl");
    renameSync(join(openclaw, DB), otherDb);
    linkSync(otherDb, join(openclaw, DB));
    writeFileSync(other, `${JSON.stringify({ type: "message", message: { role: "user", content: "the secret of another folder", timestamp: 1764528000000 } })}\n`);
    const sessions = join(openclaw, "state", "agents", "main", "sessions");
    mkdirSync(sessions);
    linkSync(other, join(sessions, "hard.jsonl"));
    symlinkSync(other, join(sessions, "soft.jsonl"));
    execFileSync("mkfifo", [join(sessions, "pipe.jsonl")]);
    writeFileSync(join(place, "memory.md"), "the secret of another folder\n");
    rmSync(join(openclaw, "workspace", "MEMORY.md"));
    linkSync(join(place, "memory.md"), join(openclaw, "workspace", "MEMORY.md"));
    const dir = agent();
    const r = await cli(["state", "import", "--from", "openclaw", "--agent", dir, openclaw]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toBe("");
    const lines = r.stdout.trimEnd().split("\n");
    const hard = (path: string) => `left behind: ${path}: has 2 names (a hard link): copy it to give it one (cp ${join(openclaw, path)} ${join(openclaw, path)}.new && mv ${join(openclaw, path)}.new ${join(openclaw, path)}): not read`;
    expect(lines).toContain(hard("workspace/MEMORY.md"));
    expect(lines).toContain(hard(DB));
    expect(lines).toContain(hard("state/agents/main/sessions/hard.jsonl"));
    expect(lines).toContain("left behind: state/agents/main/sessions/soft.jsonl: a symbolic link, not followed: not read");
    expect(lines).toContain("left behind: state/agents/main/sessions/pipe.jsonl: not a regular file: not read");
    // The rest of the folder still came; nothing of the other folder's files did.
    expect(lines).toContain("came: note memory/2026-11-28.md (openclaw): into a block of memory/notes.md");
    expect(lines.filter((l) => l.startsWith("came: session "))).toEqual([]);
    expect(JSON.stringify(files(dir))).not.toContain("the secret of another folder");
    expect(existsSync(join(dir, "chats"))).toBe(false);

    // The database a FIFO: named, never opened.
    rmSync(join(openclaw, DB));
    execFileSync("mkfifo", [join(openclaw, DB)]);
    const again = await cli(["state", "import", "--from", "openclaw", "--agent", agent(), openclaw]);
    expect(again.code, again.stderr).toBe(0);
    expect(again.stdout).toContain(`left behind: ${DB}: not a regular file: not read\n`);
  });

  it("no database, links, a FIFO, a database that is a link: each named as left behind, never followed", async () => {
    const place = temp("lnk-openclaw-odd-");
    const openclaw = copyFixture(place);
    rmSync(join(openclaw, DB));
    symlinkSync("/etc/passwd", join(openclaw, DB));
    writeFileSync(join(place, "secret.md"), "the secret of another folder\n");
    rmSync(join(openclaw, "workspace", "MEMORY.md"));
    symlinkSync(join(place, "secret.md"), join(openclaw, "workspace", "MEMORY.md"));
    symlinkSync(place, join(openclaw, "workspace", "memory", "outside"));
    execFileSync("mkfifo", [join(openclaw, "workspace", "SOUL.md.fifo")]);
    rmSync(join(openclaw, "workspace", "USER.md"));
    execFileSync("mkfifo", [join(openclaw, "workspace", "USER.md")]);
    writeFileSync(join(openclaw, "workspace", "memory", "big.md"), "x".repeat(1024 * 1024 + 1));
    writeFileSync(join(openclaw, "workspace", "memory", "photo.png"), Buffer.from([137, 80, 78, 71]));
    mkdirSync(join(openclaw, "workspace", "skills", "no-skill"));
    writeFileSync(join(openclaw, "workspace", "skills", "no-skill", "README.md"), "not a skill\n");
    chmodSync(join(openclaw, "workspace"), 0o755);
    const dir = agent();
    const r = await cli(["state", "import", "--from", "openclaw", "--agent", dir, openclaw]);
    expect(r.code, r.stderr).toBe(0);
    const lines = r.stdout.trimEnd().split("\n");
    expect(lines).toContain("left behind: workspace/MEMORY.md: a symbolic link, not followed: not read");
    expect(lines).toContain("left behind: workspace/USER.md: not a regular file: not read");
    expect(lines).toContain("left behind: workspace/SOUL.md.fifo: not a regular file of the workspace that an OpenClaw import does not carry");
    expect(lines).toContain("left behind: workspace/memory/outside: a symbolic link: not read");
    expect(lines.some((l) => l.startsWith("left behind: workspace/memory/big.md: ") && l.includes("over the limit"))).toBe(true);
    expect(lines).toContain("left behind: workspace/memory/photo.png: not UTF-8 text: not read");
    expect(lines).toContain("left behind: workspace/skills/no-skill: no SKILL.md: not a skill, not carried");
    expect(lines).toContain(`left behind: sessions: none read, since ${DB} is a symbolic link, not followed`);
    expect(lines).toContain("came: note memory/2026-11-28.md (openclaw): into a block of memory/notes.md");
    expect(JSON.stringify(files(dir))).not.toContain("the secret of another folder");
    expect(JSON.stringify(files(dir))).not.toContain("root:");
    expect(existsSync(join(dir, "chats"))).toBe(false);

    // No database at all: the workspace still comes, and the sessions are said to be none.
    rmSync(join(openclaw, DB));
    const dir2 = agent();
    const r2 = await cli(["state", "import", "--from", "openclaw", "--agent", dir2, openclaw]);
    expect(r2.code, r2.stderr).toBe(0);
    expect(r2.stdout).toContain(`left behind: sessions: none read, since ${DB} is not there\n`);
    // The state folder itself given (~/.openclaw), its workspace beside it named by openclaw.json, is found too.
    const dir3 = agent();
    const r3 = await cli(["state", "import", "--from", "openclaw", "--agent", dir3, join(openclaw, "state")]);
    expect(r3.code, r3.stderr).toBe(0);
    expect(r3.stdout).toContain("left behind: workspace: none found in DIR (openclaw.json names \"/home/ada/workspace\"; a folder of that name is looked for in DIR)\n");
  });
});
