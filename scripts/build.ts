// `npm run build`: tsc, then the bundle of the start path, skipped when nothing it reads changed
// since the last build (a make-like check of modification times against dist/.built), so the quick
// start's install, demo and tests build once between them. `npm run build -- --force` always builds.
import { spawnSync } from "node:child_process";
import { mkdirSync, readdirSync, statSync, utimesSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..");
const STAMP = join(ROOT, "dist", ".built");
/** What the build reads: the sources tsc compiles, its settings and the packages the bundle takes in. */
const INPUTS = ["protocol", "store", "turn", "acp", "asp", "daemon", "test", "scripts", "tsconfig.json", "tsconfig.build.json", "package.json", "package-lock.json"];

/** The newest modification time among the inputs (tests are not built, so they don't count). */
function newest(path: string): number {
  let st;
  try {
    st = statSync(path);
  } catch {
    return 0;
  }
  if (!st.isDirectory()) return path.endsWith(".test.ts") ? 0 : st.mtimeMs;
  let most = st.mtimeMs;
  for (const name of readdirSync(path)) most = Math.max(most, newest(join(path, name)));
  return most;
}

function stamped(): number | undefined {
  try {
    return statSync(STAMP).mtimeMs;
  } catch {
    return undefined;
  }
}

const force = process.argv.includes("--force");
const built = stamped();
const sources = Math.max(...INPUTS.map((p) => newest(join(ROOT, p))));
if (!force && built !== undefined && sources <= built) {
  process.stdout.write("build: dist/ is up to date with the sources (npm run build -- --force builds anyway)\n");
  process.exit(0);
}

// A source saved while the build runs is newer than the stamp: the stamp is dated when the build began.
const began = new Date();
const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
const compiled = spawnSync(process.execPath, [tsc, "-p", "tsconfig.build.json"], { cwd: ROOT, stdio: "inherit" });
if (compiled.status !== 0) process.exit(compiled.status ?? 1);
await import("./bundle.js");
mkdirSync(dirname(STAMP), { recursive: true });
writeFileSync(STAMP, `${began.toISOString()}\n`);
utimesSync(STAMP, began, began);
