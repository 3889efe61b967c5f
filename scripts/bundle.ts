// Bundles the start path (daemon/main.ts and what it loads before its first answer) into one
// CommonJS file, the program's bin: Node starts a CommonJS file without its ES module loader, and
// one file is read instead of a dozen. What a command loads later (the agent, the ACP SDK, zod,
// openai) stays in the ES modules beside it that tsc wrote, imported when it is needed.
// Run after tsc: `npm run build`.
import { build } from "esbuild";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..");
export const BIN = "dist/daemon/lnk-link-harness.cjs";
/** Loaded with import() once the first answer is out, or by other commands than serving. */
const LATER = ["./agent.js", "./commands.js", "./contract.js", "./facts.js", "./instructions.js", "./state-import.js", "./usage.js", "./conversation.js", "./conversations-move.js", "./shared.js", "./blank.js"];

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
