// Recovery tells a process that is gone as the conversation's lock tells its holder gone: an owed
// file names its process's host and token, so a file of a pid another process of this machine has
// since is handed over, and one of another machine sharing the folder waits until it is older than
// the stale period, whether its pid is there on this machine or not. Files of the names earlier
// versions made are handed over as before.
import { spawn, spawnSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { readdirSync, renameSync, utimesSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import type { Event } from "../protocol/index.js";
import { appendEvent, paths, writeOwed } from "../store/index.js";
import { messageTag, owedName } from "../store/owed.js";
import { configure, daemonTestHooks, scriptedSettings, startDaemon, stdioClient, tempDir, watched, type Client } from "./acp-client.js";
import { BIN } from "./fixtures/built.js";
import type { ModelServer } from "./model-server.js";

let server: ModelServer;
const cleanup = daemonTestHooks([BIN, "dist/acp/delivery.js", "dist/store/owed.js", "dist/store/lock.js"], (s) => (server = s));

interface Recovered {
  answers: { sessionId: string; event: number; text: string; time: string }[];
}
const recover = async (c: Client) => (await c.agent.request("_link/recover", {})) as unknown as Recovered;

const time = "2026-12-05T03:00:00.000Z";
const question = (text: string): Event => ({ v: 1, kind: "message", role: "user", time, header: "[h]", text });
const answer = (text: string): Event => ({ v: 1, kind: "message", role: "assistant", time, text, model: "m", provider: "p", latency_ms: 1, stop: "end_turn" });

/** An agent whose conversations `threads` each hold one question and its answer, `answer of <thread>`. */
async function agentOf(threads: string[]): Promise<string> {
  const tmp = tempDir("lnk-recover-host-");
  cleanup.push(() => tmp.remove());
  const dir = join(tmp.path, "agent");
  configure(dir, scriptedSettings(server.url));
  for (const thread of threads) {
    const conv = paths({ dir }).conversation(thread);
    await appendEvent(conv, question(`q of ${thread}`));
    await appendEvent(conv, answer(`answer of ${thread}`));
  }
  return dir;
}

/** A pid no process has: a process's that has exited. */
function deadPid(): number {
  const run = spawnSync("sh", ["-c", "echo $$"], { encoding: "utf8" });
  return Number(run.stdout.trim());
}

/** Sets a file's times back a minute: older than any stale period of the lock's. */
function age(path: string): void {
  const then = new Date(Date.now() - 60_000);
  utimesSync(path, then, then);
}

const owedIn = (dir: string, thread: string) => readdirSync(paths({ dir }).conversation(thread).dir).filter((n) => n.startsWith("owed-"));

describe("_link/recover of another process's owed file", () => {
  it("hands over a file whose pid a process of this machine started after it has, and one of another machine once it is old, not before", async () => {
    const dir = await agentOf(["reused", "remote", "remote-live"]);
    const conv = (thread: string) => paths({ dir }).conversation(thread);

    // Made by this process, then named as the pid of a process started after it (more than the
    // lock's margin of two seconds later), live all along: the pid is another process's since.
    const made = writeOwed(conv("reused"), owedName("00000000000000a1"), 0, undefined, false, messageTag(time));
    await new Promise((r) => setTimeout(r, 2_500));
    const later = spawn("sleep", ["60"], { stdio: "ignore" });
    cleanup.push(() => later.kill());
    const reused = join(conv("reused").dir, made.replace(`owed-${process.pid}-`, `owed-${later.pid}-`));
    renameSync(join(conv("reused").dir, made), reused);
    age(reused);

    // Another machine's, its pid no process's here: fresh, it is that machine's process's to deliver.
    const remote = join(conv("remote").dir, `owed-${deadPid()}-00000000000000b1-0-${messageTag(time)}`);
    writeFileSync(remote, `${JSON.stringify({ v: 1, after: 0, time: new Date().toISOString(), host: "elsewhere.invalid", token: randomUUID() })}\n`);
    // Another machine's holder's name, its pid one a process has here (pid 1): old, its process is gone.
    const remoteLive = join(conv("remote-live").dir, `owed-1-00000000000000c1-0-${messageTag(time)}`);
    writeFileSync(remoteLive, JSON.stringify({ pid: 1, host: "elsewhere.invalid", token: randomUUID() }));
    age(remoteLive);

    const d = watched(startDaemon(["--agent", dir]), cleanup);
    const client = await stdioClient(d, cleanup);
    const first = await recover(client);
    expect(first.answers.map((a) => [a.sessionId, a.text]).sort()).toEqual([
      ["remote-live", "answer of remote-live"],
      ["reused", "answer of reused"],
    ]);
    expect(owedIn(dir, "remote")).toHaveLength(1);

    // Once the other machine's file is older than the stale period, it is handed over, once.
    age(remote);
    expect((await recover(client)).answers.map((a) => [a.sessionId, a.text])).toEqual([["remote", "answer of remote"]]);
    expect(await recover(client)).toEqual({ answers: [] });
    await d.stop();
    for (const thread of ["reused", "remote", "remote-live"]) expect(owedIn(dir, thread)).toEqual([]);
  });

  it("hands over a gone process's files of the names and marks earlier versions made, as before", async () => {
    const dir = await agentOf(["json", "marked", "tagged"]);
    const conv = (thread: string) => paths({ dir }).conversation(thread);
    const pid = deadPid();
    const mark = `${JSON.stringify({ v: 1, after: 0, time })}\n`;
    // `owed-<pid>-<id>`, its mark in it; `-<after>`, and `-<after>-<tag>`, with a mark naming no host.
    writeFileSync(join(conv("json").dir, `owed-${pid}-00000000000000d1`), mark);
    writeFileSync(join(conv("marked").dir, `owed-${pid}-00000000000000e1-0`), mark);
    writeFileSync(join(conv("tagged").dir, `owed-${pid}-00000000000000f1-0-${messageTag(time)}`), mark);

    const d = watched(startDaemon(["--agent", dir]), cleanup);
    const client = await stdioClient(d, cleanup);
    expect((await recover(client)).answers.map((a) => [a.sessionId, a.text]).sort()).toEqual([
      ["json", "answer of json"],
      ["marked", "answer of marked"],
      ["tagged", "answer of tagged"],
    ]);
    expect(await recover(client)).toEqual({ answers: [] });
    await d.stop();
    for (const thread of ["json", "marked", "tagged"]) expect(owedIn(dir, thread)).toEqual([]);
  });
});
