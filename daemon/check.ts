// What must hold of an agent's folder before a process serves it.
import { existsSync, statSync } from "node:fs";
import { join } from "node:path";
import { UsageError } from "./cli.js";

/**
 * Refuses to serve an agent that isn't there: a folder that doesn't exist (a mistyped --agent), a
 * file, or a folder without settings, each with the command that fixes it. Else the daemon would
 * start without complaint and fail at the first prompt.
 */
export function checkAgent(dir: string): void {
  const fix = `lnk-link-harness configure --agent ${dir} < settings.json`;
  let st;
  try {
    st = statSync(dir);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") throw new UsageError(`there is no agent at ${dir}: the folder does not exist; make it with its settings: ${fix}`);
    throw new UsageError(`cannot use the agent's folder ${dir}: ${(e as Error).message}`);
  }
  if (!st.isDirectory()) throw new UsageError(`${dir} is a file, not an agent's folder: name the folder with --agent`);
  if (!existsSync(join(dir, "config.json"))) throw new UsageError(`the agent at ${dir} has no settings yet: ${fix}`);
}
