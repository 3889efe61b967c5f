// Bundles the start path (daemon/main.ts and what it loads before its first answer) into one
// CommonJS file, the program's bin: Node starts a CommonJS file without its ES module loader, and
// one file is read instead of a dozen. What a command loads later (the agent, the ACP SDK, zod,
// openai) stays in the ES modules beside it that tsc wrote, imported when it is needed.
// Run after tsc: `npm run build`.
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { build } from "esbuild";
import { dirname, join, relative } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { lazyAcpSchemas } from "./lazy-schemas.js";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..");
export const BIN = "dist/daemon/lnk-link-harness.cjs";
/** Loaded with import() once the first answer is out, or by other commands than serving. */
const LATER = ["./agent.js", "./commands.js", "./contract.js", "./facts.js", "./instructions.js", "./state-import.js", "./usage.js", "./conversation.js", "./conversations-move.js"];

const result = await build({
  absWorkingDir: ROOT,
  entryPoints: ["dist/daemon/main.js"],
  outfile: BIN,
  bundle: true,
  platform: "node",
  format: "cjs",
  target: "node20",
  external: LATER,
  // A CommonJS file has no import.meta: its URL is the bundle's own (version.ts reads package.json
  // from there, and the bundle sits where main.js does). Strict first, as the ES modules were.
  banner: { js: '"use strict";\nconst __bundle_url = require("node:url").pathToFileURL(__filename).href;' },
  define: { "import.meta.url": "__bundle_url" },
  metafile: true,
  logLevel: "warning",
});

// The start path stays free of dependencies: anything from node_modules here would load on every start.
const heavy = Object.keys(result.metafile.inputs).filter((p) => p.includes("node_modules"));
if (heavy.length > 0) {
  process.stderr.write(`bundle: the start path must not load dependencies, but it loads ${heavy.join(", ")}\n`);
  process.exit(1);
}
const inputs = Object.keys(result.metafile.inputs).map((p) => relative("dist", p));
process.stdout.write(`bundle: ${BIN} from ${inputs.length} modules (${inputs.join(", ")})\n`);

// The agent and all it loads, dependencies too, as one more CommonJS file loaded by daemon/bundle.ts;
// then V8's compiled code for it, made in a process of its own by warm-up prompts (the same
// Node, and no V8 flags, as the daemon runs with: V8 takes the code only then).
export const AGENT = "dist/daemon/agent.cjs";
/** The Headers the openai client is given in the bundle (see the plugin "openai-headers"). */
const HEADERS = join(ROOT, "dist", "turn", "headers.js");
// Link's model facts, read and checked now, held by the bundle as they are (turn/facts.ts).
const { readShippedFacts } = (await import(pathToFileURL(join(ROOT, "dist", "turn", "facts.js")).href)) as typeof import("../turn/facts.js");
const agent = await build({
  absWorkingDir: ROOT,
  entryPoints: ["dist/daemon/agent.js"],
  outfile: AGENT,
  bundle: true,
  // ASCII only, as daemon/bundle.ts reads it; less to read and parse, with the names kept for the stacks.
  charset: "ascii",
  minifyWhitespace: true,
  minifySyntax: true,
  platform: "node",
  format: "cjs",
  target: "node20",
  banner: {
    js: '"use strict";\nconst __bundle_url = require("node:url").pathToFileURL(__filename).href;\nconst __bundle_resolve = (name) => require("node:url").pathToFileURL(require.resolve(name)).href;',
  },
  define: { "import.meta.url": "__bundle_url", "import.meta.resolve": "__bundle_resolve", __LNK_SHIPPED_FACTS__: JSON.stringify(JSON.stringify(readShippedFacts())) },
  plugins: [
    {
      // proper-lockfile's own file system is graceful-fs, which it uses only where a lock is given
      // none: store/lock.ts gives every lock its own. Loaded, graceful-fs would cost a start some
      // 4 ms and wrap Node's fs.close and fs.closeSync for the whole process; the bundle gives
      // proper-lockfile Node's fs in its place.
      name: "no-graceful-fs",
      setup(b) {
        b.onResolve({ filter: /^graceful-fs$/ }, () => ({ path: "node:fs", external: true }));
      },
    },
    // The ACP SDK's generated schemas, some two hundred, are made as its module loads: 30 to 40 ms of
    // a start, for the few a connection's methods use. Each is made when first used instead.
    lazyAcpSchemas,
    {
      // The openai client builds each request's headers with fetch's Headers, which Node loads with
      // the whole of fetch at its first use (20 to 30 ms a first turn waited for): its modules that
      // name Headers are given turn/headers.ts's in its place, and nothing else in the bundle is.
      name: "openai-headers",
      setup(b) {
        b.onLoad({ filter: /[\\/]node_modules[\\/]openai[\\/].*\.mjs$/ }, (args) => {
          const text = readFileSync(args.path, "utf8");
          if (!/\bHeaders\b/.test(text.replace(/\/\/.*$/gm, ""))) return undefined;
          return { contents: `import { FetchHeaders as Headers } from ${JSON.stringify(HEADERS)};\n${text}`, loader: "js", resolveDir: dirname(args.path) };
        });
      },
    },
  ],
  metafile: true,
  logLevel: "warning",
});
// daemon/bundle.ts reads it as latin1, which is the same text only if it is ASCII.
// eslint-disable-next-line no-control-regex
if (/[^\x00-\x7f]/.test(readFileSync(join(ROOT, AGENT), "latin1"))) {
  process.stderr.write(`bundle: ${AGENT} holds a character outside ASCII\n`);
  process.exit(1);
}
// Prompts run before the agent's compiled code is kept: the first runs a first turn's code, the
// next ones a later turn's (the window's mark read, the history there), which the code kept holds too.
const KEPT_PROMPTS = 3;
const cached = spawnSync(
  process.execPath,
  ["--input-type=module", "-e", `const { keepCompiled } = await import("./dist/daemon/bundle.js"); process.stdout.write(String(await keepCompiled(${JSON.stringify(join(ROOT, AGENT))}, (m) => m.preload({ prompts: ${KEPT_PROMPTS} }))));`],
  { cwd: ROOT, encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] },
);
if (cached.status !== 0) {
  process.stderr.write(`bundle: the agent's compiled code could not be kept (status ${String(cached.status)})\n`);
  process.exit(1);
}
const modules = Object.keys(agent.metafile.inputs).length;
process.stdout.write(`bundle: ${AGENT} from ${modules} modules, its compiled code ${Math.round(Number(cached.stdout) / 1024)} KiB\n`);
