// The daemon's cold start to its first `initialize` answer over stdio, and its memory when idle,
// beside the floor of any Node program: `node -e 0`.
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { writeSettings } from "../../store/index.js";
import type { ModelServer } from "../model-server.js";
import { benchSettings } from "./agent.js";
import { initializeLine, procMemory, spawnDaemon } from "./daemon.js";
import { summarize, type Summary } from "./stats.js";

/** Spawn to exit of `node -e 0` (ms). */
async function bareStart(): Promise<number> {
  const t0 = performance.now();
  await new Promise<void>((resolve, reject) => {
    const child = spawn(process.execPath, ["-e", "0"], { stdio: "ignore" });
    child.once("error", reject);
    child.once("close", () => resolve());
  });
  return performance.now() - t0;
}

export async function nodeStart(runs: number): Promise<Summary> {
  const times: number[] = [];
  for (let i = 0; i < runs; i++) times.push(await bareStart());
  return summarize(times);
}

export interface StartResult {
  /** Spawn to the `initialize` answer's line on stdout (ms). */
  coldStart: Summary;
  /** `node -e 0`, started in turn with the daemon, so both meet the same load. */
  nodeStart: Summary;
  /** RSS right after `initialize`, and after one turn (MB). */
  rssAfterInitializeMb: number;
  rssAfterTurnMb: number;
  peakMb: number;
}

const line = (id: number, method: string, params: unknown) => `${JSON.stringify({ jsonrpc: "2.0", id, method, params })}\n`;

export async function measureStart(server: ModelServer, runs: number): Promise<StartResult> {
  const dir = mkdtempSync(join(tmpdir(), "lnk-link-harness-bench-start-"));
  try {
    const agent = { dir };
    writeSettings(agent, benchSettings(server.url));
    const times: number[] = [];
    const bare: number[] = [];
    for (let i = 0; i < runs; i++) {
      bare.push(await bareStart());
      const t0 = performance.now();
      const daemon = spawnDaemon(["--agent", dir]);
      daemon.child.stdin.write(initializeLine());
      await daemon.waitForLine(/"id":1,/);
      times.push(performance.now() - t0);
      // Its client went away: the daemon ends by itself.
      daemon.child.stdin.end();
      await daemon.exited;
    }

    server.fallback = () => ({ text: "Idle now." });
    const daemon = spawnDaemon(["--agent", dir]);
    try {
      daemon.child.stdin.write(initializeLine());
      await daemon.waitForLine(/"id":1,/);
      const rssAfterInitializeMb = procMemory(daemon.pid, "VmRSS");
      daemon.child.stdin.write(line(2, "session/new", { cwd: dir, mcpServers: [], _meta: { link: { thread: "idle" } } }));
      await daemon.waitForLine(/"id":2,/);
      daemon.child.stdin.write(line(3, "session/prompt", { sessionId: "idle", prompt: [{ type: "text", text: "Hello." }] }));
      const answer = await daemon.waitForLine(/"id":3,/, 30_000);
      if (!answer.includes('"end_turn"')) throw new Error(`the turn did not end well: ${answer.slice(0, 300)}`);
      const rssAfterTurnMb = procMemory(daemon.pid, "VmRSS");
      const peakMb = procMemory(daemon.pid, "VmHWM");
      return { coldStart: summarize(times), nodeStart: summarize(bare), rssAfterInitializeMb, rssAfterTurnMb, peakMb };
    } finally {
      daemon.child.stdin.end();
      await daemon.stop();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
