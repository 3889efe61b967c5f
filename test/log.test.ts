// The log: one JSON line each on stderr, a line left for the loop's next pass (log.later) written in
// the order it was logged, never after a line logged after it, and never lost to an exit.
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { ROOT } from "./fixtures/built.js";

const LOG = pathToFileURL(join(ROOT, "dist", "daemon", "log.js")).href;

const Line = z.looseObject({ time: z.string(), level: z.string(), msg: z.string() });

/** What a process that runs `body` (with `log` imported) wrote to stderr, line by line, and to stdout. */
function run(body: string): { lines: z.infer<typeof Line>[]; stdout: string } {
  const r = spawnSync(process.execPath, ["--input-type=module", "-e", `import { log } from ${JSON.stringify(LOG)};\n${body}`], { encoding: "utf8" });
  expect(r.status).toBe(0);
  return { lines: r.stderr.trim().split("\n").filter(Boolean).map((l) => Line.parse(JSON.parse(l))), stdout: r.stdout };
}

describe("log.later", () => {
  it("is written once the loop comes round, not as it is logged", () => {
    const { lines, stdout } = run(
      [
        "let writes = 0;",
        "const write = process.stderr.write.bind(process.stderr);",
        "process.stderr.write = (...a) => (writes++, write(...a));",
        'log.later.info("turn", { thread: "t" });',
        'process.stdout.write(`${writes}\\n`);',
        'setImmediate(() => process.stdout.write(`${writes}\\n`));',
      ].join("\n"),
    );
    expect(stdout).toBe("0\n1\n");
    expect(lines.map((l) => l.msg)).toEqual(["turn"]);
    expect(lines[0]).toMatchObject({ level: "info", thread: "t" });
  });

  it("never comes after a line logged after it, whatever its level", () => {
    const { lines } = run(`log.later.info("first"); log.later.warn("second"); log.warn("third"); log.later.info("fourth"); setImmediate(() => log.error("fifth"));`);
    expect(lines.map((l) => l.msg)).toEqual(["first", "second", "third", "fourth", "fifth"]);
    expect(lines.map((l) => l.level)).toEqual(["info", "warn", "warn", "info", "error"]);
  });

  it("is written by a process that exits before the loop comes round, with the time it was logged", () => {
    const { lines, stdout } = run(`log.later.info("kept"); process.stdout.write(new Date().toISOString()); const t = Date.now(); while (Date.now() - t < 30); process.exit(0);`);
    expect(lines.map((l) => l.msg)).toEqual(["kept"]);
    expect(lines[0]!.time <= stdout).toBe(true);
  });
});
