// `lnk-link-harness state import [--agent DIR] [FILE]`: an ASP State (FILE or stdin) taken into the
// agent's folder; `state import --from openclaw DIR` reads it from an OpenClaw state folder first.
// Loaded only for this command (and the OpenClaw reader, with sql.js and fzstd, only with --from).
import { StoreError } from "../protocol/index.js";
import { ImportError, checkState, planImport } from "../asp/state-import.js";
import { jsonFault } from "../store/index.js";
import { UsageError, agentRef, type AgentOptions } from "./cli.js";
import { readInput } from "./commands.js";
import { oneLine } from "./output.js";

/** The most of a State read: a few skills' trees at their most, and the notes. */
const STATE_MAX = 64 * 1024 * 1024;

/** Where a State comes from: a file or stdin, or another harness's folder. */
export type StateSource = { file?: string } | { from: "openclaw"; dir: string };

/** The State as JSON, from FILE or stdin. */
async function stateOfFile(file: string | undefined): Promise<unknown> {
  const text = await readInput(
    file,
    "state import reads the State as JSON from FILE or from stdin, and stdin is a terminal: name a FILE, or pipe the JSON in (state import --agent DIR < state.json)",
    STATE_MAX,
  );
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new UsageError(`the State is not JSON: ${jsonFault(e, text)}`);
  }
}

/**
 * Takes the State in, then prints what came and what was left behind. Everything is checked before
 * anything is written: bad input writes nothing, and a write that fails puts back what it wrote.
 */
export async function importState(o: AgentOptions, source: StateSource): Promise<void> {
  let raw: unknown;
  const left: string[] = [];
  if ("from" in source) {
    const { readOpenClaw, OpenClawError } = await import("../asp/openclaw.js");
    try {
      const read = await readOpenClaw(source.dir);
      raw = read.state;
      left.push(...read.left);
    } catch (e) {
      if (e instanceof OpenClawError) throw new UsageError(`cannot import from openclaw: ${e.message}`);
      throw e;
    }
  } else raw = await stateOfFile(source.file);
  let plan;
  try {
    plan = planImport(agentRef(o), checkState(raw));
  } catch (e) {
    if (e instanceof ImportError) throw new UsageError(e.message);
    if (e instanceof StoreError) throw new UsageError(`cannot import: ${e.message}`);
    throw e;
  }
  let sessions: string[];
  try {
    sessions = await plan.write();
  } catch (e) {
    throw new Error(`cannot import, and nothing of it was kept: ${(e as Error).message}`, { cause: e });
  }
  // Names from the folder read (a file's, a table's) may hold anything: never a control character on the terminal.
  const lines = [...plan.came.map((c) => `came: ${oneLine(c)}`), ...sessions.map((s) => `came: ${oneLine(s)}`), ...[...left, ...plan.left].map((l) => `left behind: ${oneLine(l)}`)];
  if (lines.length === 0) lines.push("nothing came: the State is empty");
  process.stdout.write(`${lines.join("\n")}\n`);
}
