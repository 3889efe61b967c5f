// The built daemon driven by acpx, an independent ACP client: a one-shot prompt, and a saved session
// that outlives the daemon's process.
import { execFile } from "node:child_process";
import { mkdirSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { configure, daemonTestHooks, scriptedSettings, tempDir } from "./acp-client.js";
import { BIN, MAIN, ROOT } from "./fixtures/built.js";
import type { ModelServer } from "./model-server.js";

const ACPX = join(ROOT, "node_modules", ".bin", "acpx");
const EVERYTHING = `"${process.execPath}" "${join(ROOT, "node_modules/@modelcontextprotocol/server-everything/dist/index.js")}" stdio`;
const run = promisify(execFile);

let server: ModelServer;
const cleanup = daemonTestHooks([BIN, "dist/daemon/serve.js", "dist/acp/app.js"], (s) => (server = s));

/** An agent folder and a HOME for acpx's own records. */
function place(): { dir: string; home: string; agent: string } {
  const tmp = tempDir("lnk-acpx-");
  cleanup.push(() => tmp.remove());
  const dir = join(tmp.path, "agent");
  configure(dir, scriptedSettings(server.url));
  return { dir, home: join(tmp.path, "home"), agent: `${process.execPath} ${MAIN} --agent ${dir}` };
}

function acpx(home: string, args: string[]) {
  return run(ACPX, args, { cwd: ROOT, env: { ...process.env, HOME: home }, timeout: 45_000 });
}

const SessionRecord = z.object({ acp_session_id: z.string(), pid: z.number().int().optional() }).loose();
const WireMessage = z.object({ method: z.string().optional(), params: z.object({ update: z.record(z.string(), z.unknown()).optional() }).loose().optional() }).loose();
const QueueLock = z.object({ pid: z.number().int(), socketPath: z.string().optional() }).loose();

function readJson<S extends z.ZodType>(schema: S, path: string): z.infer<S> {
  return schema.parse(JSON.parse(readFileSync(path, "utf8")));
}

function sessionRecord(home: string) {
  const dir = join(home, ".acpx", "sessions");
  const files = readdirSync(dir).filter((f) => f.endsWith(".json"));
  expect(files).toHaveLength(1);
  return readJson(SessionRecord, join(dir, files[0] as string));
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

/** Ends a process that isn't this one's child: signals it, then waits for it to be gone. */
async function end(pid: number): Promise<void> {
  if (!alive(pid)) return;
  process.kill(pid, "SIGTERM");
  const deadline = Date.now() + 15_000;
  while (alive(pid)) {
    if (Date.now() > deadline) throw new Error(`process ${pid} did not end`);
    await new Promise((resolve) => setImmediate(resolve));
  }
}

/** acpx keeps a queue owner (and with it the daemon) alive between prompts: end both. */
function endQueueOwners(home: string): Promise<void>[] {
  const dir = join(home, ".acpx", "queues");
  let locks: string[];
  try {
    locks = readdirSync(dir).filter((f) => f.endsWith(".lock"));
  } catch {
    return [];
  }
  return locks.map(async (f) => {
    const lock = readJson(QueueLock, join(dir, f));
    await end(lock.pid);
    if (lock.socketPath) rmSync(dirname(lock.socketPath), { recursive: true, force: true });
  });
}

describe("acpx", { timeout: 120_000 }, () => {
  it("exec prints the model's answer", async () => {
    const { home, agent } = place();
    server.script({ text: "Hello from Link Harness." });
    const { stdout } = await acpx(home, ["--agent", agent, "--format", "quiet", "exec", "say hello"]);
    expect(stdout.trim()).toBe("Hello from Link Harness.");
    expect(server.requests.at(-1)?.body.messages?.at(-1)?.content).toMatch(/say hello$/);
  });

  it("a saved session keeps its id across a daemon restart, and the second turn holds the first", async () => {
    const { home, agent } = place();
    cleanup.push(() => Promise.all(endQueueOwners(home)));
    await acpx(home, ["--agent", agent, "sessions", "new", "--name", "work"]);
    const created = sessionRecord(home).acp_session_id;

    server.script({ text: "Noted: 4711." });
    const first = await acpx(home, ["--agent", agent, "--format", "quiet", "prompt", "-s", "work", "the gate code is 4711"]);
    expect(first.stdout.trim()).toBe("Noted: 4711.");
    const daemon = sessionRecord(home).pid;
    expect(daemon).toBeDefined();
    await end(daemon as number);

    server.script({ text: "It is 4711." });
    const second = await acpx(home, ["--agent", agent, "--format", "quiet", "prompt", "-s", "work", "what is the gate code?"]);
    expect(second.stdout.trim()).toBe("It is 4711.");
    const record = sessionRecord(home);
    // acpx makes a new session silently when resume fails: the id shows it didn't.
    expect(record.acp_session_id).toBe(created);
    expect(record.pid).not.toBe(daemon);
    const sent = JSON.stringify(server.requests.at(-1)?.body.messages);
    expect(sent).toContain("the gate code is 4711");
    expect(sent).toContain("Noted: 4711.");
    expect(sent).toContain("what is the gate code?");
  });

  it("drives /model:set and /new end to end: the reply printed, the next request on the model chosen, then without what came before", async () => {
    const { home, agent } = place();
    cleanup.push(() => Promise.all(endQueueOwners(home)));
    await acpx(home, ["--agent", agent, "sessions", "new", "--name", "cmd"]);
    const say = (text: string) => acpx(home, ["--agent", agent, "--format", "quiet", "prompt", "-s", "cmd", text]);
    server.script({ text: "Noted: 4711." });
    await say("the gate code is 4711");
    const asked = server.requests.length;
    expect((await say("/model:set big-model")).stdout).toMatch(/now runs on big-model/);
    expect(server.requests.length).toBe(asked);
    await say("which model?");
    expect(server.requests.at(-1)?.body.model).toBe("big-model");
    expect(JSON.stringify(server.requests.at(-1)?.body.messages)).toContain("4711");
    expect((await say("/new")).stdout).toMatch(/Started anew/);
    await say("what is the gate code?");
    const last = server.requests.at(-1);
    expect(last?.body.model).toBe("big-model");
    expect(JSON.stringify(last?.body.messages)).not.toContain("4711");
  });

  it("shows what an editor sees: each session's title, sessions filtered by working folder, and a tool's image as an image", async () => {
    const { home, agent, dir } = place();
    const folders = [join(dir, "..", "w1"), join(dir, "..", "w2")];
    for (const [i, cwd] of folders.entries()) {
      mkdirSync(cwd);
      await acpx(home, ["--agent", agent, "--cwd", cwd, "--format", "quiet", "exec", `from w${i + 1}`]);
    }
    const listed = (await acpx(home, ["--agent", agent, "sessions", "list", "--filter-cwd", folders[0] as string])).stdout;
    expect(listed).toContain("from w1");
    expect(listed).toContain(folders[0]);
    expect(listed).not.toContain("from w2");

    server.script({ tool_calls: [{ name: "everything__get-tiny-image", arguments: {} }] }, { text: "I see a tiny image." });
    const shown = await run(ACPX, ["--agent", agent, "--format", "json", "exec", "show me the tiny image"], {
      cwd: ROOT,
      env: { ...process.env, HOME: home, LNK_TOOL_EVERYTHING: EVERYTHING },
      timeout: 45_000,
    });
    const updates = shown.stdout
      .split("\n")
      .filter((l) => l.startsWith("{"))
      .map((l) => WireMessage.parse(JSON.parse(l)))
      .filter((m) => m.method === "session/update")
      .map((m) => m.params?.update ?? {});
    expect(updates.some((u) => u.sessionUpdate === "session_info_update" && u.title === "show me the tiny image")).toBe(true);
    const images = updates
      .filter((u) => u.sessionUpdate === "tool_call_update")
      .flatMap((u) => (u.content as { content?: { type?: string; mimeType?: string } }[] | undefined) ?? [])
      .filter((c) => c.content?.type === "image");
    expect(images[0]?.content?.mimeType).toBe("image/png");
  });
});
