// A conversation's derived files: the transcript (copy for people and memory), window.json, tools.json.
import { closeSync, constants, fstatSync, openSync, readSync } from "node:fs";
import { ToolsList, WindowMark, StoreError, describeIssues } from "../protocol/index.js";
import { isErrno, readText, replaceFile, writeAll } from "./files.js";
import { ensureConversation } from "./events.js";
import type { ConversationPaths } from "./paths.js";

/** The last `bytes` of the transcript, or undefined when there is none. */
export function transcriptTail(conv: ConversationPaths, bytes = 256): string | undefined {
  let fd: number;
  try {
    fd = openSync(conv.transcript, constants.O_RDONLY | constants.O_NOFOLLOW);
  } catch (e) {
    if (isErrno(e, "ENOENT")) return undefined;
    if (isErrno(e, "ELOOP")) throw new StoreError(`refused: ${conv.transcript} is a symbolic link`, conv.transcript);
    throw e;
  }
  try {
    const size = fstatSync(fd).size;
    const len = Math.min(size, bytes);
    const buf = Buffer.alloc(len);
    readSync(fd, buf, 0, len, size - len);
    return buf.toString("utf8");
  } finally {
    closeSync(fd);
  }
}

export function readTranscript(conv: ConversationPaths): string | undefined {
  return readText(conv.transcript);
}

/** Adds to the copy's end (it only grows, and only when the agent answers). */
export function appendTranscript(conv: ConversationPaths, text: string): void {
  ensureConversation(conv);
  const fd = openSync(conv.transcript, constants.O_WRONLY | constants.O_APPEND | constants.O_CREAT | constants.O_NOFOLLOW, 0o644);
  try {
    writeAll(fd, text);
  } finally {
    closeSync(fd);
  }
}

/** Makes the copy again, whole. */
export function replaceTranscript(conv: ConversationPaths, text: string): void {
  ensureConversation(conv);
  replaceFile(conv.transcript, text, 0o644, false);
}

/** The window's mark; a missing or unreadable one is undefined (it is derived, and made again). */
export function readMark(conv: ConversationPaths): WindowMark | undefined {
  const text = readText(conv.window);
  if (text === undefined) return undefined;
  try {
    const parsed = WindowMark.safeParse(JSON.parse(text));
    return parsed.success ? parsed.data : undefined;
  } catch {
    return undefined;
  }
}

export function writeMark(conv: ConversationPaths, mark: WindowMark): void {
  ensureConversation(conv);
  replaceFile(conv.window, `${JSON.stringify(WindowMark.parse(mark))}\n`, 0o644, false);
}

/** A subagent's tool list, or undefined when the conversation has all its agent's tools. */
export function readToolsList(conv: ConversationPaths): string[] | undefined {
  const text = readText(conv.tools);
  if (text === undefined) return undefined;
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (e) {
    throw new StoreError(`${conv.tools} is not JSON: ${(e as Error).message}`, conv.tools);
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
  ensureConversation(conv);
  replaceFile(conv.tools, `${JSON.stringify({ v: 1, tools: now })}\n`);
  return now;
}
