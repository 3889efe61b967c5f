// The one-shot commands: configure and state.
import { readFileSync, statSync } from "node:fs";
import { StoreError } from "../protocol/index.js";
import { SettingsError, parseSettings, paths, planIdentity, planNotes, writeSettings, type AgentRef } from "../store/index.js";
import { UsageError, agentRef, type AgentOptions } from "./cli.js";
import { oneLine } from "./output.js";

/** The most of settings read: what config.json may hold, and some room for the way it is written. */
const INPUT_MAX = 4 * 1024 * 1024;

/**
 * The input's text, from FILE or stdin, at most `max` bytes. Stdin is read as a stream: a pipe whose
 * writer is still writing would make a synchronous read fail with EAGAIN. `terminal` says what to do
 * when stdin is a terminal, since waiting silently on one would look like a hang.
 */
export async function readInput(file: string | undefined, terminal: string, max = INPUT_MAX): Promise<string> {
  if (file === undefined && process.stdin.isTTY) throw new UsageError(terminal);
  try {
    if (file !== undefined) {
      if (statSync(file).size > max) throw new UsageError(`${file} holds more than ${max} bytes`);
      return readFileSync(file, "utf8");
    }
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of process.stdin) {
      const bytes = Buffer.isBuffer(chunk) ? chunk : Buffer.from(String(chunk));
      size += bytes.length;
      if (size > max) throw new UsageError(`stdin holds more than ${max} bytes`);
      chunks.push(bytes);
    }
    return Buffer.concat(chunks).toString("utf8");
  } catch (e) {
    if (e instanceof UsageError) throw e;
    throw new UsageError(`cannot read ${file ?? "stdin"}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  }
}

/**
 * Validates settings and writes config.json through the store, who the agent is into Link's block
 * of instruction.md, and what it remembered into Link's note blocks of memory/notes.md (each replaced,
 * never added twice); nothing is written for bad input, nor for a file that can't be written.
 */
export async function configure(o: AgentOptions, file: string | undefined): Promise<void> {
  const text = await readInput(
    file,
    "configure reads the settings as JSON from FILE or from stdin, and stdin is a terminal: name a FILE, or pipe the JSON in (configure --agent DIR < settings.json)",
  );
  let settings;
  try {
    settings = parseSettings(text);
  } catch (e) {
    if (e instanceof SettingsError) throw new UsageError(e.message);
    throw e;
  }
  const agent = agentRef(o);
  let identity;
  try {
    identity = planIdentity(agent, settings.identity);
  } catch (e) {
    if (e instanceof StoreError) throw new UsageError(`cannot write who the agent is: ${e.message}`);
    throw e;
  }
  let notes;
  try {
    notes = planNotes(agent, "note", settings.remembered ?? []);
  } catch (e) {
    if (e instanceof StoreError) throw new UsageError(`cannot write what the agent remembered: ${e.message}`);
    throw e;
  }
  writeSettings(agent, settings);
  identity?.();
  notes?.();
  process.stderr.write(`lnk-link-harness: settings written to ${paths(agent).config}\n`);
}

/** The paths a move carries: the agent's own folder's parts and its files folder. */
export function statePaths(agent: AgentRef): { agent: string; files: string; paths: string[] } {
  const p = paths(agent);
  return { agent: p.dir, files: p.files, paths: [p.config, p.instructions, p.skills, p.memory, p.chats] };
}

/** `state`: the paths a move carries; `state export`: the ASP State, and on stderr a line for each file it left. */
export async function printState(o: AgentOptions, asp: boolean): Promise<void> {
  if (!asp) {
    process.stdout.write(`${JSON.stringify(statePaths(agentRef(o)), null, 2)}\n`);
    return;
  }
  const { exportState } = await import("../asp/export.js");
  const { state, left } = exportState(agentRef(o));
  for (const l of left) process.stderr.write(`lnk-link-harness: left out of the export: ${oneLine(l.path)}: ${oneLine(l.why)}\n`);
  process.stdout.write(`${JSON.stringify(state, null, 2)}\n`);
}
