// The sessions one process keeps open for an agent are bounded: past the bound, the one used least
// lately whose conversation runs no turn is forgotten, as session/close forgets it, and its
// conversation is read again from disk at its next prompt; a session whose turn runs is forgotten
// only once no other is left to forget. Each connection holds a session it opened with its own
// working folder and servers, counted within the bound, and lets go of them as it closes.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { McpServer } from "@agentclientprotocol/sdk";
import { afterEach, describe, expect, it } from "vitest";
import { CWD_MAX, MCP_SERVERS_MAX, OPEN_HELD_MAX, OPEN_SESSIONS_MAX, Sessions } from "../acp/sessions.js";
import { paths } from "../store/index.js";

const quiet = { info: () => undefined, warn: () => undefined, error: () => undefined };
/** The connection the sessions are opened for. */
const client = {};
const folders: string[] = [];
afterEach(() => {
  for (const dir of folders.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function agentDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "lnk-sessions-bound-"));
  folders.push(dir);
  return dir;
}

const tool = (name: string): McpServer[] => [{ name, command: "true", args: [], env: [] }];

describe("the sessions a process keeps open", () => {
  it("are at most the bound; the one used least lately and running no turn is forgotten first", () => {
    const running = new Set<string>();
    const sessions = new Sessions({ dir: agentDir() }, quiet, (thread) => running.has(thread), 3);
    const [a, b, c] = ["a", "b", "c"].map((name) => sessions.create(client, {}, "/work", tool(name)));
    expect(sessions.size).toBe(3);
    // a is used again, so b is now the one used least lately; b's turn runs, so c goes when d comes.
    sessions.get(client, a!.id);
    running.add(b!.thread);
    const d = sessions.create(client, {}, "/work", tool("d"));
    expect(sessions.size).toBe(3);
    expect(sessions.get(client, b!.id).mcpServers).toEqual(tool("b"));
    expect(sessions.get(client, a!.id).mcpServers).toEqual(tool("a"));
    expect(sessions.get(client, d.id).mcpServers).toEqual(tool("d"));
    // Forgotten, c is still a session its id names: read again (an empty conversation), without the tools its client gave.
    expect(sessions.size).toBe(3);
    const again = sessions.get(client, c!.id);
    expect(again).toMatchObject({ id: c!.id, thread: c!.thread, mcpServers: [] });
    expect(sessions.size).toBe(3);
  });

  it("hold at most OPEN_HELD_MAX of their clients' servers together: a client opening sessions of the largest tool lists has the oldest forgotten, never one whose turn runs", () => {
    const running = new Set<string>();
    const sessions = new Sessions({ dir: agentDir() }, quiet, (thread) => running.has(thread));
    // Some 250 KiB of JSON each: a server with a long environment.
    const big = (name: string): McpServer[] => [{ name, command: "true", args: [], env: [{ name: "PAD", value: "x".repeat(MCP_SERVERS_MAX - 6_000) }] }];
    const first = sessions.create(client, {}, "/work", big("first"));
    running.add(first.thread);
    const fits = Math.floor(OPEN_HELD_MAX / (MCP_SERVERS_MAX - 5_000));
    for (let i = 0; i < fits * 4; i++) sessions.create(client, {}, "/work", big(`t${i}`));
    expect(sessions.size).toBeLessThanOrEqual(fits);
    expect(sessions.size).toBeGreaterThan(fits / 2);
    // The one whose turn runs kept its servers; the newest is kept too.
    expect(sessions.get(client, first.id).mcpServers).toEqual(big("first"));
  });

  it("take a working folder that is an absolute path, as ACP asks, and refuse any other, keeping none of it", () => {
    const sessions = new Sessions({ dir: agentDir() }, quiet);
    for (const cwd of ["", ".", "relative/dir", "~/work", "/tmp\0/x"]) {
      expect(() => sessions.create(client, {}, cwd, []), JSON.stringify(cwd)).toThrow(/is not an absolute path/);
    }
    expect(sessions.size).toBe(0);
    expect(sessions.create(client, {}, "/work/a b", []).cwd).toBe("/work/a b");
  });

  it("are held by each connection with its own working folder and servers; a connection's close lets go of its own alone", () => {
    const sessions = new Sessions({ dir: agentDir() }, quiet);
    const [a, b, c] = [{}, {}, {}];
    const made = sessions.create(a, { channel: "slack" }, "/work/a", tool("alpha"));
    sessions.attach(b, made.id, "/work/b", tool("beta"));
    expect(sessions.size).toBe(2);
    expect(sessions.get(a, made.id)).toMatchObject({ cwd: "/work/a", mcpServers: tool("alpha"), channel: "slack" });
    expect(sessions.get(b, made.id)).toMatchObject({ cwd: "/work/b", mcpServers: tool("beta"), channel: "slack" });
    // One that opened it not takes it up without another's folder or servers, with the session's channel.
    const taken = sessions.get(c, made.id);
    expect(taken).toMatchObject({ id: made.id, mcpServers: [], channel: "slack" });
    expect(taken.cwd).toBeUndefined();
    sessions.release(b);
    sessions.release(c);
    expect(sessions.size).toBe(1);
    expect(sessions.get(a, made.id)).toMatchObject({ cwd: "/work/a", mcpServers: tool("alpha") });
    // Closed by one connection, the session is still open for another.
    sessions.attach(b, made.id, "/work/b", tool("beta"));
    sessions.close(a, made.id);
    expect(sessions.size).toBe(1);
    expect(sessions.get(b, made.id)).toMatchObject({ cwd: "/work/b", mcpServers: tool("beta") });
  });

  it("a connection loading one session again and again, with new servers each time, holds the last of them alone", () => {
    const sessions = new Sessions({ dir: agentDir() }, quiet);
    const made = sessions.create(client, {}, "/work", []);
    const big = (i: number): McpServer[] => [{ name: `t${i}`, command: "true", args: [], env: [{ name: "PAD", value: "x".repeat(MCP_SERVERS_MAX / 2) }] }];
    for (let i = 0; i < 1000; i++) sessions.attach(client, made.id, `/work/${i}`, big(i));
    expect(sessions.size).toBe(1);
    expect(sessions.get(client, made.id)).toMatchObject({ cwd: "/work/999", mcpServers: big(999) });
  });

  it("connections without number loading one session whose turn runs, each with the largest servers, hold at most OPEN_HELD_MAX of them", () => {
    const sessions = new Sessions({ dir: agentDir() }, quiet, () => true);
    const made = sessions.create(client, {}, "/work", []);
    const big = (i: number): McpServer[] => [{ name: `t${i}`, command: "true", args: [], env: [{ name: "PAD", value: "x".repeat(MCP_SERVERS_MAX - 6_000) }] }];
    const fits = Math.floor(OPEN_HELD_MAX / (MCP_SERVERS_MAX - 5_000));
    const last = {};
    for (let i = 0; i < fits * 4; i++) sessions.attach(i === fits * 4 - 1 ? last : {}, made.id, "/work", big(i));
    expect(sessions.size).toBeLessThanOrEqual(fits);
    expect(sessions.get(last, made.id).mcpServers).toEqual(big(fits * 4 - 1));
  });

  it("a client opening sessions without end leaves the process holding the bound of them, not more", () => {
    const sessions = new Sessions({ dir: agentDir() }, quiet);
    for (let i = 0; i < OPEN_SESSIONS_MAX + 500; i++) sessions.create(client, {}, "/work", []);
    expect(sessions.size).toBe(OPEN_SESSIONS_MAX);
  });
});

describe("a session taken up from its conversation's events", () => {
  it("holds the working folder its last message came with only where a client's would be held: an absolute path, within CWD_MAX, without NUL", async () => {
    const dir = agentDir();
    const sessions = new Sessions({ dir }, quiet);
    const files = paths({ dir }).files;
    const given = ["relative/folder", `/${"x".repeat(CWD_MAX)}`, "/a\0b", "/work/project"];
    for (const [i, cwd] of given.entries()) {
      const thread = `20260101-00000${i}-0000abcd`;
      const conv = paths({ dir }).conversation(thread);
      mkdirSync(conv.dir, { recursive: true });
      writeFileSync(conv.event(1), `${JSON.stringify({ v: 1, kind: "message", role: "user", text: "hi", header: "", time: "2026-01-01T00:00:00.000Z", cwd })}\n`);
      expect(sessions.get(client, thread).cwd, cwd.slice(0, 20)).toBe(i === given.length - 1 ? cwd : undefined);
    }
    const listed = (await sessions.list(client, undefined)).sessions.map((s) => s.cwd).sort();
    expect(listed).toEqual([...Array<string>(given.length - 1).fill(files), "/work/project"].sort());
  });
});
