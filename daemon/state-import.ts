// `lnk-link-harness state import [--agent DIR] [FILE]`: an ASP State (FILE or stdin) taken into the
// agent's folder. Loaded only for this command.
import { StoreError } from "../protocol/index.js";
import { ImportError, checkState, planImport } from "../asp/state-import.js";
import { jsonFault } from "../store/index.js";
import { UsageError, agentRef, type AgentOptions } from "./cli.js";
import { readInput } from "./commands.js";

/** The most of a State read: a few skills' trees at their most, and the notes. */
const STATE_MAX = 64 * 1024 * 1024;

/** Takes the State in, then prints what came and what was left behind; bad input writes nothing. */
export async function importState(o: AgentOptions, file: string | undefined): Promise<void> {
  const text = await readInput(
    file,
    "state import reads the State as JSON from FILE or from stdin, and stdin is a terminal: name a FILE, or pipe the JSON in (state import --agent DIR < state.json)",
    STATE_MAX,
  );
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (e) {
    throw new UsageError(`the State is not JSON: ${jsonFault(e, text)}`);
  }
  let plan;
  try {
    plan = planImport(agentRef(o), checkState(raw));
  } catch (e) {
    if (e instanceof ImportError) throw new UsageError(e.message);
    if (e instanceof StoreError) throw new UsageError(`cannot import: ${e.message}`);
    throw e;
  }
  plan.write();
  const lines = [...plan.came.map((c) => `came: ${c}`), ...plan.left.map((l) => `left behind: ${l}`)];
  if (lines.length === 0) lines.push("nothing came: the State is empty");
  process.stdout.write(`${lines.join("\n")}\n`);
}
