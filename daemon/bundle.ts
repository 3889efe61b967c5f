// The agent's code as one file: the build bundles daemon/agent.ts with everything it loads, the
// turn, the ACP and MCP SDKs, zod and openai, into dist/daemon/agent.cjs, and keeps beside it V8's
// compiled code for it, made by running one warm-up prompt (agent.cjs.cache). A start reads two
// files instead of hundreds of modules and compiles almost nothing: the code a first prompt runs
// comes compiled. A cache that doesn't fit this Node (another version, other V8 flags) or is
// damaged is rejected by V8 itself, and the bundle compiles from its source as any script does.
// Without the bundle (a build of tsc alone), the agent is imported from the ES modules beside it.
// Free of dependencies: the start path (bundled) loads it.
import { createHash } from "node:crypto";
import { existsSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import Module, { createRequire } from "node:module";
import { dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { setFlagsFromString } from "node:v8";
import { Script, constants } from "node:vm";
import { lazy, lazyImport } from "../turn/load.js";
import { log } from "./log.js";

type AgentModule = typeof import("./agent.js");

/** The agent's bundle, beside this module (dist/daemon/, as the start path's bundle is). */
export const AGENT_BUNDLE = fileURLToPath(new URL("./agent.cjs", import.meta.url));

/** The file V8's compiled code of a bundle is kept in. */
export const cacheOf = (file: string): string => `${file}.cache`;

export interface Loaded<M> {
  exports: M;
  script: Script;
  /** What became of the kept compiled code: taken by V8, rejected by V8, made for another bundle, or none kept. */
  code: "kept" | "rejected" | "another bundle's" | "none kept";
}

/** The SHA-256 of a bundle's bytes, which its kept code begins with. */
const digest = (bytes: Buffer): Buffer => createHash("sha256").update(bytes).digest();
const DIGEST_BYTES = 32;

/** Node's own modules the agent loads as it starts, or its first turn: loaded before V8's flag changes. */
const NODE_OWN = ["node:assert", "node:fs/promises", "node:readline", "node:timers/promises"];

let tuned = false;

/**
 * Tells V8 to give each function of the agent the feedback it compiles further with as soon as the
 * function is made, not after it has run some: the turns a process answers first run the code V8
 * compiled for them rather than its interpreter (a steady turn's overhead a tenth to a sixth less
 * over a process's first twenty turns, alternated with the build before). A flag V8's kept code is
 * checked against: set here, before the bundle is compiled, both when its code is kept (the build)
 * and when it is taken (a start), so that they agree. Node's own modules are compiled with code it
 * kept under the flags it started with, and refused under others: those the agent loads are loaded
 * first. Only on the V8 this was measured on (Node 20's); elsewhere V8 runs as it starts.
 */
function tuneV8(load: NodeJS.Require): void {
  if (tuned || !process.versions.v8.startsWith("11.")) return;
  tuned = true;
  for (const name of NODE_OWN) load(name);
  // Node loads its file streams on their first use.
  void (load("node:fs") as typeof import("node:fs")).ReadStream;
  setFlagsFromString("--no-lazy-feedback-allocation");
}

/**
 * Runs a CommonJS bundle as Node's loader would (its own require, module, __filename), compiled
 * with its kept code when V8 takes it. A bundle that can't be read or doesn't parse throws: the
 * caller's next attempt reads it again, nothing of a failed one is kept.
 */
export function loadBundle<M>(file: string, o: { fresh?: boolean } = {}): Loaded<M> {
  const bytes = readFileSync(file);
  // The build writes it in ASCII (esbuild escapes the rest): read as latin1, it is the same text, and
  // V8 keeps it as it was read, one byte a character, with no UTF-8 to decode.
  const source = bytes.toString("latin1");
  // V8 checks the code it is given against the source's length alone: code kept for another bundle
  // of the same length would run that bundle's functions. So the kept code is this bundle's only
  // when it begins with this bundle's digest.
  let cachedData: Buffer | undefined;
  let theirs = false;
  if (!o.fresh) {
    try {
      const kept = readFileSync(cacheOf(file));
      if (kept.length > DIGEST_BYTES && kept.subarray(0, DIGEST_BYTES).equals(digest(bytes))) cachedData = kept.subarray(DIGEST_BYTES);
      else theirs = true;
    } catch {
      // None (or unreadable): compiled from the source.
    }
  }
  const load = createRequire(file);
  tuneV8(load);
  const script = new Script(Module.wrap(source), { filename: file, cachedData, importModuleDynamically: constants.USE_MAIN_CONTEXT_DEFAULT_LOADER });
  const module = { exports: {} as M };
  const run = script.runInThisContext() as (exports: M, require: NodeJS.Require, module: { exports: M }, filename: string, dirname: string) => void;
  run.call(module.exports, module.exports, load, module, file, dirname(file));
  const code = cachedData ? (script.cachedDataRejected ? "rejected" : "kept") : theirs ? "another bundle's" : "none kept";
  return { exports: module.exports, script, code };
}

/** Whether the agent runs from its bundle: it was built (a build of tsc alone has none). */
export const bundled = (): boolean => existsSync(AGENT_BUNDLE);

/**
 * The agent's code, loaded when first needed: from its bundle, or from the ES modules when there is
 * none. Made once for the process (serve.ts), whose every agent shares it. A load that failed (a moment of EMFILE) is tried again by the next
 * caller; the ES modules' retry gives each failed module a URL of its own (../turn/load.ts).
 */
export function agentCode(): () => Promise<AgentModule> {
  const modules = lazyImport(() => import("./agent.js"), () => new URL("./agent.js", import.meta.url).href);
  return lazy(async () => {
    if (!bundled()) return modules();
    const began = performance.now();
    const loaded = loadBundle<AgentModule>(AGENT_BUNDLE);
    // Whether the kept code was taken: compiled from the source, a start costs some tens of ms more,
    // which is worth a line of the log (a Node other than the one it was built with, say).
    const fields = { ms: Math.round(performance.now() - began), code: loaded.code };
    if (loaded.code === "kept") log.debug("agent loaded", fields);
    else log.info("agent loaded", fields);
    return loaded.exports;
  });
}

/**
 * Keeps V8's compiled code of a bundle, compiled afresh (never from code kept before), with
 * everything compiled so far (`warm` runs first so that the code a prompt runs is in it), after the
 * bundle's digest, written whole or not at all.
 */
export async function keepCompiled(file: string, warm: (exports: unknown) => Promise<void>): Promise<number> {
  const loaded = loadBundle<unknown>(file, { fresh: true });
  await warm(loaded.exports);
  const data = Buffer.concat([digest(readFileSync(file)), loaded.script.createCachedData()]);
  const temporary = `${cacheOf(file)}.${process.pid}`;
  writeFileSync(temporary, data);
  renameSync(temporary, cacheOf(file));
  return data.length;
}
