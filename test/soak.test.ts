// A short soak in CI: the soak runner kills the daemon 20 times (or as many as 90 s allow) while
// conversations take turns with tool calls, then checks the disk. Zero violations, or it fails.
// The long run is `npm run soak` (man lnk-link-harness-soak(7)).
import { spawn } from "node:child_process";
import { join } from "node:path";
import { afterEach, beforeAll, expect, it, onTestFailed } from "vitest";
import { z } from "zod";
import { tempDir } from "./acp-client.js";
import { assertBuilt, BIN, ROOT } from "./fixtures/built.js";

const RUNNER = join(ROOT, "dist", "test", "soak", "run.js");
const KILLS = 20;
const CONVERSATIONS = 3;

const Summary = z.object({
  soak: z
    .object({
      kills: z.number(),
      acknowledged: z.number(),
      events: z.number(),
      calls: z.number(),
      unanswered: z.number(),
      violations: z.number(),
    })
    .loose(),
});

const cleanup: (() => unknown)[] = [];
beforeAll(() => {
  assertBuilt(["dist/test/soak/run.js", BIN], ["test/soak", "acp", "daemon", "turn", "store", "protocol"]);
});
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f();
});

it(`the daemon killed ${KILLS} times mid-turn loses nothing`, { timeout: 170_000 }, async () => {
  const dir = tempDir("lnk-soak-ci-");
  cleanup.push(() => dir.remove());
  // Its own process group, so a runner cut short takes its daemons and tools with it.
  const runner = spawn(process.execPath, [RUNNER, "--kills", String(KILLS), "--minutes", "1.5", "--conversations", String(CONVERSATIONS), "--dir", dir.path], {
    detached: true,
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  let err = "";
  runner.stdout.setEncoding("utf8").on("data", (d: string) => (out += d));
  runner.stderr.setEncoding("utf8").on("data", (d: string) => (err += d));
  const exited = new Promise<number | null>((resolve) => runner.once("close", (code) => resolve(code)));
  cleanup.push(async () => {
    try {
      if (runner.pid !== undefined) process.kill(-runner.pid, "SIGKILL");
    } catch {
      // already gone
    }
    await exited;
  });
  onTestFailed(() => void process.stderr.write(`the soak's output:\n${out}\n${err}\n`));

  const code = await exited;
  const line = out.split("\n").find((l) => l.startsWith('{"soak"'));
  expect(line, out + err).toBeDefined();
  const { soak } = Summary.parse(JSON.parse(line ?? "{}"));
  expect(soak.violations).toBe(0);
  expect(code).toBe(0);
  // It did kill turns, and turns went on: a soak that tested nothing would pass too easily.
  expect(soak.kills).toBeGreaterThanOrEqual(KILLS / 2);
  expect(soak.acknowledged).toBeGreaterThanOrEqual(CONVERSATIONS);
  expect(soak.calls).toBeGreaterThan(0);
});
