// The sessions one process keeps open for an agent are bounded: past the bound, the one used least
// lately whose conversation runs no turn is forgotten, as session/close forgets it, and its
// conversation is read again from disk at its next prompt; a session whose turn runs is never the
// one forgotten, so a cancel still reaches it.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { McpServer } from "@agentclientprotocol/sdk";
import { afterEach, describe, expect, it } from "vitest";
import { MCP_SERVERS_MAX, OPEN_HELD_MAX, OPEN_SESSIONS_MAX, Sessions } from "../acp/sessions.js";

const quiet = { info: () => undefined, warn: () => undefined, error: () => undefined };
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
    const [a, b, c] = ["a", "b", "c"].map((name) => sessions.create({}, "/work", tool(name)));
    expect(sessions.size).toBe(3);
    // a is used again, so b is now the one used least lately; b's turn runs, so c goes when d comes.
    sessions.get(a!.id);
    running.add(b!.thread);
    const d = sessions.create({}, "/work", tool("d"));
    expect(sessions.size).toBe(3);
    expect(sessions.get(b!.id).mcpServers).toEqual(tool("b"));
    expect(sessions.get(a!.id).mcpServers).toEqual(tool("a"));
    expect(sessions.get(d.id).mcpServers).toEqual(tool("d"));
    // Forgotten, c is still a session its id names: read again (an empty conversation), without the tools its client gave.
    expect(sessions.size).toBe(3);
    const again = sessions.get(c!.id);
    expect(again).toMatchObject({ id: c!.id, thread: c!.thread, mcpServers: [] });
    expect(sessions.size).toBe(3);
  });

  it("hold at most OPEN_HELD_MAX of their clients' servers together: a client opening sessions of the largest tool lists has the oldest forgotten, never one whose turn runs", () => {
    const running = new Set<string>();
    const sessions = new Sessions({ dir: agentDir() }, quiet, (thread) => running.has(thread));
    // Some 250 KiB of JSON each: a server with a long environment.
    const big = (name: string): McpServer[] => [{ name, command: "true", args: [], env: [{ name: "PAD", value: "x".repeat(MCP_SERVERS_MAX - 6_000) }] }];
    const first = sessions.create({}, "/work", big("first"));
    running.add(first.thread);
    const fits = Math.floor(OPEN_HELD_MAX / (MCP_SERVERS_MAX - 5_000));
    for (let i = 0; i < fits * 4; i++) sessions.create({}, "/work", big(`t${i}`));
    expect(sessions.size).toBeLessThanOrEqual(fits);
    expect(sessions.size).toBeGreaterThan(fits / 2);
    // The one whose turn runs kept its servers; the newest is kept too.
    expect(sessions.get(first.id).mcpServers).toEqual(big("first"));
  });

  it("take a working folder that is an absolute path, as ACP asks, and refuse any other, keeping none of it", () => {
    const sessions = new Sessions({ dir: agentDir() }, quiet);
    for (const cwd of ["", ".", "relative/dir", "~/work", "/tmp\0/x"]) {
      expect(() => sessions.create({}, cwd, []), JSON.stringify(cwd)).toThrow(/is not an absolute path/);
    }
    expect(sessions.size).toBe(0);
    expect(sessions.create({}, "/work/a b", []).cwd).toBe("/work/a b");
  });

  it("a client opening sessions without end leaves the process holding the bound of them, not more", () => {
    const sessions = new Sessions({ dir: agentDir() }, quiet);
    for (let i = 0; i < OPEN_SESSIONS_MAX + 500; i++) sessions.create({}, "/work", []);
    expect(sessions.size).toBe(OPEN_SESSIONS_MAX);
  });
});
