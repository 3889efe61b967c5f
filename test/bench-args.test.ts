// The bench's command line: what it can't take is said in one line, before anything is measured.
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { ROOT } from "./fixtures/built.js";

const RUN = join(ROOT, "dist", "test", "bench", "run.js");

describe("the bench's arguments", () => {
  it.each([
    [["--only", "nope"], /^bench: --only takes overhead,.*, not nope$/],
    [["--profile-interval", "50"], /^bench: --profile-interval is the interval of --profile DIR's samples: give --profile DIR too$/],
    [["--profile", "/nonexistent", "--profile-interval", "0"], /^bench: --profile-interval takes microseconds, a whole number from 1 to 1000000, not "0"$/],
    [["--profile", "/nonexistent", "--profile-interval", "1e3"], /^bench: --profile-interval takes microseconds.*not "1e3"$/],
    [["--profile", "/nonexistent", "--profile-interval"], /^bench: --profile-interval takes microseconds.*not ""$/],
    [["--profile"], /^bench: --profile takes the folder its profiles are written to$/],
    [["--profile", ""], /^bench: --profile takes the folder its profiles are written to$/],
    [["--bogus"], /^bench: unknown argument --bogus; usage: run\.js /],
    [["--against"], /^bench: --against takes another build: its folder \(built\) or its dist\/daemon\/lnk-link-harness\.cjs$/],
    [["--against", "/nonexistent"], /^bench: --against: no daemon at \/nonexistent \(build that checkout first: npm run build\)$/],
    // A folder that is no checkout, and no file: refused, never run as a daemon.
    [["--against", "/tmp"], /^bench: --against: no daemon at \/tmp \(build that checkout first: npm run build\)$/],
    [["--against", ROOT, "--only", "overhead"], /^bench: --against runs with the client part: leave --only out, or name client in it$/],
    [["--openclaw", "--only", "overhead"], /^bench: --openclaw runs with the client part: leave --only out, or name client in it$/],
  ])("%j: one line on stderr, exit 2, nothing measured", (args, said) => {
    const r = spawnSync(process.execPath, [RUN, ...args], { encoding: "utf8", timeout: 30_000 });
    expect(r.status).toBe(2);
    expect(r.stdout).toBe("");
    const lines = r.stderr.trimEnd().split("\n");
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(said);
  });
});
