// `lnk-link-harness conversations move out [--agent DIR] [THREAD...]` and `conversations move in
// [--agent DIR] [FILE]`: conversations given out, or taken in, in the portable session form (the
// contract's `conversations`; Link's `lnk agent chat convert` runs it). Out prints an ASP State of
// sessions only, which `move in`, `_asp/import` and `state import` take; in writes each session as a
// new conversation, as `_asp/import` does (the same code), and prints `_asp/import`'s answer.
// Out never removes what it gives: events are written once and never taken back, and what is moved
// is kept until its copy is in, so a failed move loses nothing (man lnk-link-harness(1)).
import { existsSync, mkdirSync } from "node:fs";
import { z } from "zod";
import { ASP_KINDS, AspState, StoreError, Thread, describeIssues, type AspImportResult, type AspLeftBehind } from "../protocol/index.js";
import { EXPORT_SESSIONS_BYTES, InvalidSessions, checkSessions, importSessions } from "../asp/sessions.js";
import { jsonFault, listThreads, paths } from "../store/index.js";
import { UsageError, agentRef, type AgentOptions } from "./cli.js";
import { readInput } from "./commands.js";
import { readNamed, writeSessionJson, type ReadNamed } from "./conversation.js";
import { oneLine, stdoutChunks } from "./output.js";

/** The most a printed State of sessions is: what `conversations move in` reads, less room for its frame. */
const MOVED_BYTES = EXPORT_SESSIONS_BYTES - 64;
/** How each session is indented in the State printed. */
const PAD = "    ";

/**
 * Prints `{"sessions": [...]}`: the conversations THREADs name (each a chat's folder, or one
 * conversation of a chat as `<thread>~<name>`), else every one, a session at a time. Named ones are
 * read whole before anything is printed, so one that can't be read prints nothing, nor do named ones
 * over what `conversations move in` takes; of every one, those that can't be read, and those past
 * what `move in` takes, are left out and named on stderr. No conversation is held whole: each is
 * read once to check and measure it, then again as it is printed.
 */
export async function moveOut(o: AgentOptions, threads: readonly string[]): Promise<void> {
  const agent = agentRef(o);
  if (!existsSync(agent.dir)) throw new UsageError(`no agent folder at ${agent.dir}`);
  const named = threads.map((t) => readNamed(agent, t, PAD));
  const total = named.reduce((sum, read) => sum + (read.bytes ?? 0) + 2, 0);
  if (total > MOVED_BYTES) {
    throw new UsageError(`the conversations named print ${total} bytes, over the ${MOVED_BYTES} conversations move in takes: move them out a few at a time`);
  }
  const out = stdoutChunks();
  await out.write('{\n  "sessions": [');
  let first = true;
  const put = async (read: ReadNamed) => {
    if (read.left !== undefined) process.stderr.write(`lnk-link-harness: left out of ${oneLine(read.thread)}: ${oneLine(read.left)}\n`);
    await out.write(first ? "\n" : ",\n");
    first = false;
    await writeSessionJson(out, read, PAD);
  };
  const leftOut = (path: string, why: string) => process.stderr.write(`lnk-link-harness: left out: ${oneLine(path)}: ${oneLine(why)}\n`);
  if (threads.length > 0) {
    for (const read of named) await put(read);
  } else {
    let bytes = 0;
    const chats = paths(agent).chats;
    let every: string[];
    try {
      every = listThreads(
        chats,
        (name) => leftOut(`chats/${name}`, "a symbolic link, not followed"),
        (shown) => leftOut(`chats/${shown}`, "its name is not UTF-8 text: not read"),
      );
    } catch (e) {
      if (!(e instanceof StoreError)) throw e;
      leftOut("chats", e.message);
      every = [];
    }
    for (const thread of every) {
      if (!Thread.safeParse(thread).success) {
        leftOut(`chats/${thread}`, "not a thread's name");
        continue;
      }
      let read: ReadNamed;
      try {
        read = readNamed(agent, thread, PAD);
      } catch (e) {
        // One gone since it was listed (no conversation by that name now) is left out too: the rest still go.
        if (!(e instanceof StoreError) && !(e instanceof UsageError)) throw e;
        leftOut(`chats/${thread}`, e.message);
        continue;
      }
      const size = (read.bytes ?? 0) + 2;
      if (bytes + size > MOVED_BYTES) {
        leftOut(`chats/${thread}`, `past the ${MOVED_BYTES} bytes conversations move in takes: move it out by its name`);
        continue;
      }
      bytes += size;
      await put(read);
    }
  }
  await out.write(first ? "]\n}\n" : "\n  ]\n}\n");
  await out.end();
}

/** Whether the input is one session, as `conversation --json` prints it, rather than a State. */
function isOneSession(raw: unknown): raw is Record<string, unknown> {
  return typeof raw === "object" && raw !== null && !Array.isArray(raw) && ("thread" in raw || "events" in raw) && !("sessions" in raw);
}

/**
 * Takes the sessions of an ASP State (as `move out` prints it), or one session (as `conversation
 * --json` prints it), from FILE or stdin, and writes each as a new conversation; prints what was
 * imported and what was left behind. Anything invalid writes nothing at all.
 */
export async function moveIn(o: AgentOptions, file: string | undefined): Promise<void> {
  const text = await readInput(
    file,
    "conversations move in reads the sessions as JSON from FILE or from stdin, and stdin is a terminal: name a FILE, or pipe the JSON in (conversations move in --agent DIR < sessions.json)",
    EXPORT_SESSIONS_BYTES,
  );
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (e) {
    throw new UsageError(`the sessions are not JSON: ${jsonFault(e, text)}`);
  }
  const agent = agentRef(o);
  const one = isOneSession(raw);
  let sessions: unknown = [raw];
  const leftBehind: AspLeftBehind[] = [];
  if (!one) {
    // The sessions are checked by importSessions, which names an event's wrong field by its kind.
    const parsed = AspState.extend({ sessions: z.unknown() }).safeParse(raw);
    if (!parsed.success) throw new UsageError(`not an ASP State of sessions: ${describeIssues(parsed.error)}`);
    const { sessions: all, ...rest } = parsed.data;
    // Left out, there are none; any other value (null among them) is checked as the sessions, and refused.
    sessions = all === undefined ? [] : all;
    // A kind that holds nothing (an empty text or list) leaves nothing behind.
    for (const kind of ASP_KINDS) {
      const value: unknown = rest[kind as keyof typeof rest];
      if (value !== undefined && value !== "" && (!Array.isArray(value) || value.length > 0)) {
        leftBehind.push({ kind, why: "conversations move in takes sessions only (state import takes the rest)" });
      }
    }
  }
  let checked;
  try {
    checked = checkSessions(sessions);
  } catch (e) {
    // One session is named as the input names it: its fields, not sessions.0's.
    if (e instanceof InvalidSessions) throw new UsageError(one ? `the session: ${e.message.replace(/\bsessions\.0\./g, "").replace(/\bsessions\.0:/g, "(top):")}` : e.message);
    throw e;
  }
  // The agent's folder is made when missing, as state import makes it, once the input is known good.
  if (checked.length > 0) mkdirSync(agent.dir, { recursive: true, mode: 0o700 });
  const answer: AspImportResult = { imported: await importSessions(agent, checked), leftBehind };
  process.stdout.write(`${JSON.stringify(answer, null, 2)}\n`);
}
