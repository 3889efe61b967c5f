// What a process owes its client: one name a prompt, `owed-<pid>-<id>-<after>-<tag>` in the
// conversation's folder, made before its turn runs and removed once the prompt's answer was written
// to the client. It holds no answer: only the last event before the prompt came (`after`, in its
// name) and its message's time (`tag`: messageTag), so the answer is read from the events, which are
// the truth. The name is one more of the process's lock
// holder (store/lock.ts linkHolder): no file is made for it; where there is none, a file of its own
// holding the mark. Either names the process's host and token, so that whether it is gone is told
// as its lock's holder's is (writerGone). An earlier version's `owed-<pid>-<id>` holds the mark as
// JSON, read as before. A kill at any point leaves either no name (the answer reached the client) or
// one whose answer, if its turn finished one, `_link/recover` hands over.
import { lstatSync, readdirSync, renameSync, type Stats } from "node:fs";
import { hostname } from "node:os";
import { join } from "node:path";
import { OwedMark, StoreError, describeIssues } from "../protocol/index.js";
import { isErrno } from "./errno.js";
import { listThreads } from "./events.js";
import { jsonFault, PROCESS_TOKEN, readNoFollow, unlinkQuiet, writeTemp } from "./files.js";
import { folderId, removeQuiet, withFolder } from "./folder.js";
import { linkHolder, ownerMadeElsewhere, ownerNamed, processAlive, writerGone } from "./lock.js";
import { isThread, paths, type AgentRef, type ConversationPaths } from "./paths.js";

/** `owed-<pid>-<id>`, then its mark: `-<after>`, then the message's tag (messageTag), where a version since 2026-12-04 made it. */
const OWED_NAME = /^owed-(\d{1,10})-([0-9a-f]{16})(?:-(\d{1,15})(?:-([0-9a-z]{1,12}))?)?$/;
/** An owed file is a few dozen bytes. */
const OWED_MAX = 4096;

export interface Owed {
  readonly thread: string;
  readonly conv: ConversationPaths;
  /** Its name in the conversation's folder. */
  readonly name: string;
  /** The process that made it. */
  readonly pid: number;
  /** The conversation's last event before the prompt came. */
  readonly after: number;
  /** The tag of the message the prompt's turn wrote after it (messageTag), where its name has one. */
  readonly tag?: string;
  /** The host and token of the process that made it, where its file names them (an earlier version's names neither). */
  readonly writer: { readonly host?: string; readonly token?: string };
  /** The file as it stood when listed: its times tell a pid another process has since (see writerGone). */
  readonly st: Stats;
}

/**
 * What tells the message a prompt's turn writes from another written at the same number: its time,
 * to the millisecond, in base 36. A process killed before its message was on disk leaves a mark of
 * a number the next process's turn then writes its own message at: the mark's tag is not that
 * message's, so that turn's answer, delivered to its own prompt, is never handed over as this one's.
 */
export function messageTag(time: string): string | undefined {
  const ms = Date.parse(time);
  return Number.isFinite(ms) && ms >= 0 ? ms.toString(36) : undefined;
}

/** The name of a new owed file of this process. */
export function owedName(id: string): string {
  return `owed-${process.pid}-${id}`;
}

/** An owed name without the mark its name carries: the prompt's, whatever its mark. */
export function owedBase(name: string): string {
  const m = OWED_NAME.exec(name);
  return m ? `owed-${m[1]}-${m[2]}` : name;
}

/**
 * Owes a prompt's answer after event `after`, in the checked folder: `name` (owedName) with the mark,
 * as one more name of the process's holder, or where it has none there a file of its own written
 * whole (a temp file renamed to it). `previous`, the name an earlier mark of the prompt gave it, is
 * renamed to the new mark. Returns the name it is owed under now. `namesOnly`: nothing is made but a
 * name (the costly call on a disk is making a file); undefined, and nothing written, where a file
 * would be needed.
 */
export function writeOwed(conv: ConversationPaths, name: string, after: number, previous?: string, namesOnly?: false, tag?: string): string;
export function writeOwed(conv: ConversationPaths, name: string, after: number, previous: string | undefined, namesOnly: true, tag?: string): string | undefined;
export function writeOwed(conv: ConversationPaths, name: string, after: number, previous?: string, namesOnly = false, tag?: string): string | undefined {
  const marked = tag === undefined ? `${name}-${after}` : `${name}-${after}-${tag}`;
  return withFolder(conv, (folder) => {
    // Through a folder a lock holds, only while it still does: a turn that lost it writes nothing more.
    folder.guard?.();
    if (previous !== undefined) {
      if (previous === marked) return marked;
      try {
        renameSync(folder.at(previous), folder.at(marked));
        return marked;
      } catch (e) {
        if (!isErrno(e, "ENOENT")) throw e;
      }
    }
    if (linkHolder(folder.base, conv, marked)) return marked;
    if (namesOnly) return undefined;
    const text = `${JSON.stringify({ v: 1, after, time: new Date().toISOString(), host: hostname(), token: PROCESS_TOKEN } satisfies OwedMark)}\n`;
    // Not flushed: a kill of the process loses nothing the kernel holds; the answer itself is flushed.
    const tmp = writeTemp(folder.base, text, undefined, false);
    try {
      renameSync(tmp, folder.at(marked));
    } catch (e) {
      unlinkQuiet(tmp);
      throw e;
    }
    return marked;
  });
}

/**
 * Whether the process that made an owed file is gone (or is this one), as its lock's holder would be
 * judged (store/lock.ts writerGone): of this machine, where no process has its pid or the one that
 * has it started after the file was made; of another, once the file and the conversation's lock are
 * older than the stale period.
 */
export function owedWriterGone(o: Owed, stale?: number): boolean {
  return writerGone(o.conv, o.pid, o.writer, o.st, stale);
}

/** The host and token an owed file names, read once: its holder's owner text, or its own mark's; none where it names neither. */
function writerOf(path: string): { host?: string; token?: string } {
  let json: unknown;
  try {
    json = JSON.parse(readNoFollow(path, { max: OWED_MAX }));
  } catch {
    // Not JSON, or gone meanwhile: a file that names no one, as an earlier version's.
    return {};
  }
  return ownerNamed(json) ?? markWriter(OwedMark.safeParse(json).data);
}

/** The host and token an owed file's own mark names, where a version since 2026-12-05 wrote them. */
function markWriter(mark: OwedMark | undefined): { host?: string; token?: string } {
  return { ...(mark?.host === undefined ? {} : { host: mark.host }), ...(mark?.token === undefined ? {} : { token: mark.token }) };
}

/** Removes an owed file (its answer reached the client, or was handed over), in the checked folder: never through a link. */
export function removeOwed(conv: ConversationPaths, name: string): void {
  removeQuiet(conv, name);
}

/**
 * Takes an owed file of a process that is gone for this one: renamed, in the checked folder, to a
 * name of this process's (the same id), which no other process's recovery hands over while this one
 * lives. Of two processes that take one file at once, one does; the other gets undefined. A file
 * this process made is its own already.
 */
export function claimOwed(o: Owed): Owed | undefined {
  if (o.pid === process.pid) return o;
  const m = OWED_NAME.exec(o.name);
  const id = m?.[2];
  if (id === undefined) return undefined;
  // Its mark and tag kept: only the process in its name changes.
  const name = `${owedName(id)}${o.name.slice(owedBase(o.name).length)}`;
  try {
    withFolder(o.conv, (folder) => renameSync(folder.at(o.name), folder.at(name)), { make: false });
  } catch (e) {
    // Taken by another process first, or the folder is gone or a link now.
    if (isErrno(e, "ENOENT") || e instanceof StoreError) return undefined;
    throw e;
  }
  return { ...o, name, pid: process.pid };
}

/** Every owed file of the agent's conversations, any process's. A file that can't be read is named in `faults`. */
export function listOwed(agent: AgentRef): { owed: Owed[]; faults: string[] } {
  const owed: Owed[] = [];
  const faults: string[] = [];
  const p = paths(agent);
  for (const thread of listThreads(p.chats)) {
    if (!isThread(thread)) continue;
    const conv = p.conversation(thread);
    let names: string[];
    try {
      names = readdirSync(conv.dir);
    } catch (e) {
      if (!isErrno(e, "ENOENT")) faults.push(`${conv.dir}: ${(e as Error).message}`);
      continue;
    }
    /** The folder's id (folderId), once a name of another file asks for it. */
    let here: string | undefined;
    for (const name of names) {
      const m = OWED_NAME.exec(name);
      if (!m) continue;
      const path = join(conv.dir, name);
      try {
        if (m[3] !== undefined) {
          // Its mark in its name: one more name of its process's holder, or a file of its own.
          const st = lstatSync(path);
          if (!st.isFile()) throw new StoreError(`${path} is not a file`, path);
          // A name a copy of another folder brought (`cp -al`): that folder's prompt, not this one's,
          // while its process lives (that process owes it there). Once it is gone, the copy's is handed
          // over too: a folder moved to another disk or restored from a copy (its marks naming the
          // folder as it was) can't be told from a copy, and an answer is better handed over twice
          // than lost.
          if (st.nlink > 1 && processAlive(Number(m[1]))) {
            here ??= folderId(lstatSync(conv.dir));
            if (ownerMadeElsewhere(path, here)) continue;
          }
          owed.push({ thread, conv, name, pid: Number(m[1]), after: Number(m[3]), ...(m[4] === undefined ? {} : { tag: m[4] }), writer: writerOf(path), st });
          continue;
        }
        const text = readNoFollow(path, { max: OWED_MAX });
        let json: unknown;
        try {
          json = JSON.parse(text);
        } catch (e) {
          throw new StoreError(`${path} is not JSON: ${jsonFault(e, text)}`, path);
        }
        const mark = OwedMark.safeParse(json);
        if (!mark.success) throw new StoreError(`${path}: ${describeIssues(mark.error)}`, path);
        owed.push({ thread, conv, name, pid: Number(m[1]), after: mark.data.after, writer: markWriter(mark.data), st: lstatSync(path) });
      } catch (e) {
        if (isErrno(e, "ENOENT")) continue;
        faults.push((e as Error).message);
      }
    }
  }
  return { owed, faults };
}
