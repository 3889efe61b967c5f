// `lnk-link-harness instructions` over the built command line: the system prompt a turn would send
// now, by section, with each one's owner, size and limit; the same prompt the daemon then sends the
// model; a conversation's tools.json narrowing its tools; and its bad input refused, fuzzed too.
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import * as acp from "@agentclientprotocol/sdk";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { configure, daemonTestHooks, scriptedSettings, startDaemon, stdioClient, tempDir, watched } from "./acp-client.js";
import type { ModelServer } from "./model-server.js";
import { BIN, MAIN } from "./fixtures/built.js";
import { run, type Run } from "./fixtures/child.js";

let server: ModelServer;
const cleanup = daemonTestHooks([BIN, "dist/daemon/instructions.js", "dist/turn/sections.js"], (s) => (server = s));
const seed = process.env.FC_SEED ? { seed: Number(process.env.FC_SEED) } : {};

function folder(): string {
  const dir = tempDir("lnk-instructions-");
  cleanup.push(() => dir.remove());
  return dir.path;
}

const cli = (args: string[], env: Record<string, string> = {}): Promise<Run> =>
  run(process.execPath, [MAIN, ...args], { env: { PATH: process.env.PATH ?? "/usr/bin:/bin", ...env }, ms: 15_000 });

interface Printed {
  name: string;
  owner: string;
  size: number;
  max: number;
  text: string;
}

/** The sections as printed: a heading line each, then its text up to the next heading. */
function sections(stdout: string): Printed[] {
  const parts = stdout.split(/\n\n--- (?=[a-z]+: owner )/);
  return parts.slice(1).map((part) => {
    const nl = part.indexOf("\n");
    const m = /^([a-z]+): owner (\S+), (\d+) of at most (\d+) characters/.exec(part.slice(0, nl));
    if (!m) throw new Error(`not a section heading: ${part.slice(0, nl)}`);
    return { name: m[1] ?? "", owner: m[2] ?? "", size: Number(m[3]), max: Number(m[4]), text: part.slice(nl + 1).replace(/\n$/, "") };
  });
}

describe("instructions", { timeout: 60_000 }, () => {
  it("prints each section with its owner, size and limit: together, the system prompt the daemon then sends", async () => {
    const dir = folder();
    mkdirSync(join(dir, "instructions"), { recursive: true });
    writeFileSync(join(dir, "instructions", "instruction.md"), "Keep it short.\n");
    mkdirSync(join(dir, "memory"), { recursive: true });
    writeFileSync(join(dir, "memory", "notes.md"), `The gate code is 4417. ${"n".repeat(300)}\n`);
    configure(dir, scriptedSettings(server.url, { identity: { persona: "You are Mira." }, instructions: { notes: { max: 100, owner: "team" } } }));

    const r = await cli(["instructions", "--agent", dir]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toBe("");
    const printed = sections(r.stdout);
    expect(printed.map((s) => s.name)).toEqual(["base", "environment", "standing", "notes"]);
    expect(printed.map((s) => [s.owner, s.max])).toEqual([
      ["link", 8000],
      ["link", 2000],
      ["owner", 16000],
      ["team", 100],
    ]);
    for (const s of printed) expect(s.size).toBe(s.text.length);
    const notes = printed.find((s) => s.name === "notes");
    expect(notes?.size).toBe(100);
    expect(r.stdout).toMatch(/--- notes: owner team, 100 of at most 100 characters \(cut\)\n/);
    expect(r.stdout.split("\n")[0]).toBe(`The system prompt a turn would send now: 4 sections, ${printed.reduce((n, s) => n + s.size, 0) + 2 * 3} characters`);

    const d = watched(startDaemon(["--agent", dir]), cleanup);
    const c = await stdioClient(d, cleanup);
    const { sessionId } = await c.agent.request(acp.methods.agent.session.new, { cwd: dir, mcpServers: [] });
    server.script({ text: "ok" });
    await c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "hi" }] });
    expect(server.requests[0]?.body.messages?.[0]).toMatchObject({ role: "system", content: printed.map((s) => s.text).join("\n\n") });
  });

  it("names the tools the environment and the settings name, and a conversation's tools.json narrows them", async () => {
    const dir = folder();
    configure(dir, scriptedSettings(server.url, { tools: { web: "http://127.0.0.1:9/mcp" } }));
    const env = { LNK_MEMORY: "http://127.0.0.1:9/memory" };
    let r = await cli(["instructions", "--agent", dir], env);
    expect(r.code, r.stderr).toBe(0);
    expect(sections(r.stdout).find((s) => s.name === "tools")?.text).toMatch(/^You have tools: memory, web\./);

    const chat = join(dir, "chats", "sub");
    mkdirSync(chat, { recursive: true });
    writeFileSync(join(chat, "tools.json"), JSON.stringify({ v: 1, tools: ["web__fetch"] }));
    r = await cli(["instructions", "--agent", dir, "--thread", "sub"], env);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout.split("\n")[0]).toMatch(/^The system prompt a turn of sub would send now: /);
    expect(sections(r.stdout).find((s) => s.name === "tools")?.text).toMatch(/^You have tools: web\./);
  });

  it("bad input: one line, exit 2, nothing written", async () => {
    const dir = folder();
    const bare = folder();
    configure(dir, scriptedSettings(server.url));
    for (const [args, message] of [
      [["instructions", "--agent", bare], /the agent has no settings/],
      [["instructions", "--agent", join(bare, "none")], /no agent folder/],
      [["instructions", "--agent", dir, "--thread", "../etc"], /invalid thread name/],
      [["instructions", "--agent", dir, "--thread", "nobody"], /no conversation "nobody"/],
      [["instructions", "--agent", dir, "extra"], /instructions takes no argument/],
      [["instructions", "--agent", dir, "--json"], /instructions takes no --json/],
      [["state", "--agent", dir, "--thread", "t"], /state takes no --thread/],
      [["--agent", dir, "--thread", "t"], /serving takes no --thread/],
    ] as const) {
      const r = await cli([...args]);
      expect(r.code, args.join(" ")).toBe(2);
      expect(r.stdout).toBe("");
      expect(r.stderr).toMatch(/^lnk-link-harness: [^\n]+\n$/);
      expect(r.stderr).toMatch(message);
    }
  });

  it("any --thread is a prompt or one line of error, fuzzed", async () => {
    const dir = folder();
    configure(dir, scriptedSettings(server.url));
    mkdirSync(join(dir, "chats", "real"), { recursive: true });
    await fc.assert(
      fc.asyncProperty(fc.oneof(fc.string({ minLength: 1, maxLength: 20 }), fc.constantFrom("real", "..", ".", "a/b", "real/..", "x\u202Ey", "-h")), async (thread) => {
        const r = await cli(["instructions", "--agent", dir, `--thread=${thread}`]);
        if (r.code === 0) {
          expect(thread).toBe("real");
          expect(sections(r.stdout).length).toBeGreaterThan(0);
        } else {
          expect(r.code).toBe(2);
          expect(r.stderr).toMatch(/^lnk-link-harness: [^\n]+\n$/);
        }
      }),
      { numRuns: 20, ...seed },
    );
  });
});
