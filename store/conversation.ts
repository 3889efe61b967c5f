// A conversation's derived files: the transcript (copy for people and memory), window.json, usage.json, tools.json.
import type { z } from "zod";
import { closeSync, constants, fstatSync, lstatSync, openSync, readSync } from "node:fs";
import { basename } from "node:path";
import { ToolsList, UsageMark, WindowMark, StoreError, describeIssues, type Numbered } from "../protocol/index.js";
import { FILE_MODE, flushMadeAboveSync, isErrno, jsonFault, LIMITS, LinkRefused, ParsedTexts, readText, replaceFile, writeAll } from "./files.js";
import { checkConversationLinks, knownWindowFile, noteWindowFile, readBase, WINDOW_FILE, WINDOW_FILE_MAX, windowLine } from "./events.js";
import { withFolder } from "./folder.js";
import type { ConversationPaths } from "./paths.js";

const TRANSCRIPT = "transcript.md";
const WINDOW = "window.json";
const TOOLS = "tools.json";

/** The last `bytes` of the transcript, or undefined when there is none. */
export function transcriptTail(conv: ConversationPaths, bytes = 256): string | undefined {
  const base = readBase(conv);
  let fd: number;
  try {
    fd = openSync(`${base}/${TRANSCRIPT}`, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch (e) {
    if (isErrno(e, "ENOENT")) return undefined;
    if (isErrno(e, "ELOOP")) throw new StoreError(`refused: ${conv.transcript} is a symbolic link`, conv.transcript);
    // Derived: one that can't be opened (a socket says ENXIO; one its mode keeps from this user,
    // EACCES) reads as a copy cut short, made again by renaming a new one into place.
    if (isErrno(e, "ENXIO") || isErrno(e, "EACCES") || isErrno(e, "EPERM")) return "";
    // Named as the conversation's file, never the descriptor's path it was opened through.
    throw new StoreError(`cannot read ${conv.transcript}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`, conv.transcript);
  }
  try {
    const st = fstatSync(fd);
    // Derived: anything but a regular file of its own there reads as a copy cut short, and is made
    // again (renamed into place: a file of one name, the other left as it was). A hard link is a
    // file of another name too, maybe outside the agent's folder: what is added would go there.
    if (!st.isFile() || st.nlink > 1) return "";
    const size = st.size;
    const len = Math.min(size, bytes);
    const buf = Buffer.alloc(len);
    readSync(fd, buf, 0, len, size - len);
    return buf.toString("utf8");
  } finally {
    closeSync(fd);
  }
}

/** The copy whole (for people; a turn reads only its tail). */
export function readTranscript(conv: ConversationPaths): string | undefined {
  checkConversationLinks(conv);
  return readText(conv.transcript, { max: LIMITS.event });
}

const APPEND = constants.O_WRONLY | constants.O_APPEND | constants.O_CREAT | constants.O_NOFOLLOW | constants.O_NONBLOCK;

/** Adds to the copy's end (it only grows, and only when the agent answers). */
export function appendTranscript(conv: ConversationPaths, text: string): void {
  withFolder(conv, (folder) => {
    folder.check();
    const notFile = () => new StoreError(`refused: ${conv.transcript} is not a regular file`, conv.transcript);
    let fd: number;
    try {
      fd = openSync(folder.at(TRANSCRIPT), APPEND, FILE_MODE);
    } catch (e) {
      // Opened without waiting: a FIFO no one reads says ENXIO.
      if (isErrno(e, "ENXIO")) throw notFile();
      if (isErrno(e, "ELOOP")) throw new StoreError(`refused: ${conv.transcript} is a symbolic link`, conv.transcript);
      // Named as the conversation's file, never the descriptor's path it was opened through.
      throw new StoreError(`cannot write ${conv.transcript}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`, conv.transcript);
    }
    try {
      const st = fstatSync(fd);
      if (!st.isFile()) throw notFile();
      // Linked in since its end was read (transcriptTail): never added to, and made again next turn.
      if (st.nlink > 1) throw new StoreError(`refused: ${conv.transcript} has ${st.nlink} names (a hard link): nothing is added to it`, conv.transcript);
      writeAll(fd, text);
    } finally {
      closeSync(fd);
    }
  });
}

/** Replaces a file of the conversation whole, through its checked folder (flushed: and the folders made on the way to it). */
function replaceInFolder(conv: ConversationPaths, name: string, text: string, flush: boolean, make = true): void {
  withFolder(
    conv,
    (folder) => {
      folder.check();
      replaceFile(folder.at(name), text, FILE_MODE, flush);
    },
    { make },
  );
  if (flush) flushMadeAboveSync(conv.dir);
}

/** Makes the copy again, whole. */
export function replaceTranscript(conv: ConversationPaths, text: string): void {
  replaceInFolder(conv, TRANSCRIPT, text, false);
}

/** Events a window's events file may lag its conversation by before they are added to it: a fresh read reads those a file each. */
export const WINDOW_FILE_LAG = 16;

/** As the copy is added to (APPEND), but never made: only the file this process knows is added to. */
const OPEN_WINDOW_FILE = APPEND & ~constants.O_CREAT;

/**
 * Brings a conversation's window's events file (readWindowFile) up to `events`, what its next load
 * reads (from its mark, or the copy's end before it), numbered one after another; under its lock,
 * after the turn's answer. Added to while it is the file this process last read or wrote (the same
 * inode and size: no other writer added to it since), holds no more events before `events` than in
 * them, and lags them by WINDOW_FILE_LAG or more; made again (a temp file renamed into place) when
 * it is not that file, so that what other processes added, or a file cut short, is replaced whole.
 * Never flushed: a file lost or cut short by a crash is read as far as it holds. Not written at all
 * when the events hold more than `max` bytes (WINDOW_FILE_MAX), nor again while its start stays.
 */
export function keepWindowFile(conv: ConversationPaths, events: readonly Numbered[], max = WINDOW_FILE_MAX): void {
  const first = events[0];
  if (!first) return;
  let count = 1;
  while (count < events.length && events[count]?.n === first.n + count) count++;
  const last = first.n + count - 1;
  const known = knownWindowFile(conv);
  // Over the limit from this start: the window only grows until it drops (its start moves), so it
  // is not made again (up to max characters of lines) at every turn meanwhile.
  if (known?.over && known.start === first.n) return;
  if (known && !known.over && known.start <= first.n && known.end >= first.n - 1 && known.end <= last && first.n - known.start <= count) {
    if (last - known.end < WINDOW_FILE_LAG) return;
    if (addToWindowFile(conv, known, events.slice(known.end + 1 - first.n, count), last, max)) return;
  }
  let text = "";
  for (let i = 0; i < count; i++) {
    const e = events[i] as Numbered;
    text += windowLine(e.n, e.event);
    if (text.length > max) break;
  }
  if (text.length > max || Buffer.byteLength(text) > max) {
    noteWindowFile(conv, { ino: 0, size: 0, start: first.n, end: last, over: true });
    return;
  }
  replaceInFolder(conv, WINDOW_FILE, text, false);
  const st = lstatSync(`${readBase(conv)}/${WINDOW_FILE}`);
  noteWindowFile(conv, { ino: st.ino, size: st.size, start: first.n, end: last });
}

/** Adds `more` to the window's events file `known`, if it is still that file; whether it was. */
function addToWindowFile(conv: ConversationPaths, known: { ino: number; size: number; start: number }, more: readonly Numbered[], last: number, max: number): boolean {
  return withFolder(conv, (folder) => {
    folder.check();
    let fd: number;
    try {
      fd = openSync(folder.at(WINDOW_FILE), OPEN_WINDOW_FILE);
    } catch {
      return false;
    }
    try {
      const st = fstatSync(fd);
      if (!st.isFile() || st.nlink !== 1 || st.ino !== known.ino || st.size !== known.size) return false;
      let text = "";
      for (const e of more) text += windowLine(e.n, e.event);
      const bytes = Buffer.byteLength(text);
      if (known.size + bytes > max) return false;
      writeAll(fd, text);
      noteWindowFile(conv, { ino: st.ino, size: known.size + bytes, start: known.start, end: last });
      return true;
    } finally {
      closeSync(fd);
    }
  });
}

/**
 * A derived file of the conversation, read and checked against its schema; undefined when missing,
 * unreadable (too large, not a file) or not of its schema: it is made again. A link is refused.
 */
function readDerived<T>(conv: ConversationPaths, path: string, max: number, schema: z.ZodType<T>): T | undefined {
  const base = readBase(conv);
  let text: string | undefined;
  try {
    text = readText(`${base}/${basename(path)}`, { max, named: path });
  } catch (e) {
    if (e instanceof StoreError && !(e instanceof LinkRefused)) return undefined;
    throw e;
  }
  if (text === undefined) return undefined;
  // Read whole at each call; the same text as the last read of the file gives what it gave.
  const known = derivedRead.known(path, text);
  if (known?.value.schema === schema) return known.value.value as T | undefined;
  let value: T | undefined;
  try {
    const parsed = schema.safeParse(JSON.parse(text));
    value = parsed.success ? Object.freeze(parsed.data) : undefined;
  } catch {
    value = undefined;
  }
  derivedRead.keep(path, text, { schema, value });
  return value;
}

/**
 * What the derived files read lately gave, with the schema each was read with. Only short texts are
 * kept (a window's mark is some hundred characters): at most a few megabytes in all, whatever a
 * folder's derived files hold (a usage count may be megabytes long).
 */
const derivedRead = new ParsedTexts<{ schema: z.ZodType; value: unknown }>(1024, 4096);

/** Forgets what the derived files read gave (for measuring a fresh process). */
export function forgetDerived(): void {
  derivedRead.clear();
}

/** The window's mark; a missing or unreadable one is undefined (it is derived, and made again). */
export function readMark(conv: ConversationPaths): WindowMark | undefined {
  return readDerived(conv, conv.window, LIMITS.mark, WindowMark);
}

export function writeMark(conv: ConversationPaths, mark: WindowMark): void {
  replaceInFolder(conv, WINDOW, `${JSON.stringify(WindowMark.parse(mark))}\n`, false);
}

/** How far `usage` counted; undefined when missing, unreadable or not of its schema (it is derived). */
export function readUsageMark(conv: ConversationPaths): UsageMark | undefined {
  return readDerived(conv, conv.usage, LIMITS.usage, UsageMark);
}

export function writeUsageMark(conv: ConversationPaths, mark: UsageMark): void {
  const text = `${JSON.stringify(UsageMark.parse(mark))}\n`;
  // One too large to be read back is not written: the next count starts from the first event.
  if (text.length > LIMITS.usage) return;
  // Never made for it: a conversation moved away while it was counted stays gone.
  replaceInFolder(conv, "usage.json", text, false, false);
}

/** A subagent's tool list, or undefined when the conversation has all its agent's tools. */
export function readToolsList(conv: ConversationPaths): string[] | undefined {
  checkConversationLinks(conv);
  const text = readText(conv.tools, { max: LIMITS.tools });
  if (text === undefined) return undefined;
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (e) {
    throw new StoreError(`${conv.tools} is not JSON: ${jsonFault(e, text)}`, conv.tools);
  }
  const parsed = ToolsList.safeParse(raw);
  if (!parsed.success) throw new StoreError(`${conv.tools} fails its schema: ${describeIssues(parsed.error)}`, conv.tools);
  return parsed.data.tools;
}

/** Between a tool and its call in a call's name, `<tool>__<call>` (a tool's name never holds it). */
const SEPARATOR = "__";

/** An entry covers a call's name when it is that name, or names the call's tool (all its calls). */
function covers(entry: string, name: string): boolean {
  return entry === name || (!entry.includes(SEPARATOR) && name.startsWith(`${entry}${SEPARATOR}`));
}

/**
 * The calls both lists allow, as entries: where one entry covers the other (`memory` and
 * `memory__search`), the narrower stays. Each entry of a list is a tool's name (all its calls) or a
 * call's name, so lists of either kind narrow by calls, never by matching words.
 */
export function intersectToolsLists(before: readonly string[], later: readonly string[]): string[] {
  const both: string[] = [];
  for (const a of before) {
    for (const b of later) {
      const narrower = covers(a, b) ? b : covers(b, a) ? a : undefined;
      if (narrower !== undefined && !both.includes(narrower)) both.push(narrower);
    }
  }
  // An entry another one holds adds nothing: ["memory", "memory__search"] is ["memory"].
  return both.filter((e) => !both.some((o) => o !== e && covers(o, e)));
}

/**
 * Keeps a subagent's list: the first list is kept as given (once each name); a later list narrows it
 * to the calls both allow and never widens it. Returns the list now in force.
 */
export function narrowToolsList(conv: ConversationPaths, tools: readonly string[]): string[] {
  const before = readToolsList(conv);
  const now = before === undefined ? [...new Set(tools)] : intersectToolsLists(before, tools);
  replaceInFolder(conv, TOOLS, `${JSON.stringify({ v: 1, tools: now })}
`, true);
  return now;
}
