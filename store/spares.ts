// Files made ahead for a conversation's next events, while a turn of it waits for the model (through
// the folder its lock holds), or once a turn that never asked is done and its lock let go: the next
// turn writes its question and its answer into them, so that no file is made while it runs. Making
// a file is the costly call of a turn's on a disk (a quarter of a millisecond to over one on ext4
// without a journal, a round trip on a network file system); while the model answers nothing waits
// for it. Made on the event loop when that turn is the only one the process runs (its folder
// `alone`), in the thread pool when others run, whose streams must not stop for it. Each is an
// empty private temp file of this process's (`.tmp-<pid>-…`, so a gone process's are removed with
// its holder: store/lock.ts), kept open.
// Bounded: two a conversation, for the conversations used most lately. Nothing of it matters: a
// turn that finds none, or one that is not as it was made, makes its files as before.
import { closeSync, fstatSync, lstatSync } from "node:fs";
import { basename, join } from "node:path";
import { dropTemp, FILE_MODE, makeTemp, tempName, unlinkQuiet, type MadeFile } from "./files.js";
import { withFolder } from "./folder.js";
import { hardLinksWork } from "./lock.js";
import type { ConversationPaths } from "./paths.js";

/** A turn writes two events of its own when it calls no tool: its question and its answer. */
export const SPARES_PER_CONVERSATION = 2;
/** The conversations whose spares are kept, the ones used most lately: each spare holds a file descriptor. */
export const SPARE_CONVERSATIONS = 8;

interface Spare {
  name: string;
  fd: number;
  dev: number;
  ino: number;
}

interface Kept {
  conv: ConversationPaths;
  spares: Spare[];
}

/** By conversation folder, the one used most lately last. */
const kept = new Map<string, Kept>();
/** The conversations whose spares are being made, each with the making of the one under way now. */
const making = new Map<string, Promise<unknown>>();
/** The paths of the spares being made (named before they are), removed too should the process exit meanwhile. */
const pending = new Set<string>();
let exitHooked = false;

/** How many spares are kept now, in all (tests). */
export function sparesKept(): number {
  let n = 0;
  for (const k of kept.values()) n += k.spares.length;
  return n;
}

/** Notes a conversation as used now: its spares are the last to go. */
function touch(conv: ConversationPaths): Kept {
  let k = kept.get(conv.dir);
  if (k) kept.delete(conv.dir);
  else k = { conv, spares: [] };
  kept.set(conv.dir, k);
  while (kept.size > SPARE_CONVERSATIONS) {
    const [dir, oldest] = kept.entries().next().value as [string, Kept];
    kept.delete(dir);
    for (const s of oldest.spares) drop(oldest.conv, s);
  }
  return k;
}

function closeQuiet(fd: number): void {
  try {
    closeSync(fd);
  } catch {
    // Closed already.
  }
}

/** Removes a spare's name at `path` while it is still the file made: another file at its name is left. */
function removeIfMade(path: string, s: Spare): void {
  try {
    const st = lstatSync(path);
    if (st.isFile() && st.dev === s.dev && st.ino === s.ino) unlinkQuiet(path);
  } catch {
    // Gone already.
  }
}

/** Lets a spare go: its name removed through the conversation's checked folder, then closed (its inode no other file's meanwhile). */
function drop(conv: ConversationPaths, s: Spare): void {
  try {
    withFolder(conv, (folder) => removeIfMade(folder.at(s.name), s), { make: false });
  } catch {
    // The folder is gone, or is a link now: nothing of it is removed.
  }
  closeQuiet(s.fd);
}

/** As the process exits, its spares' names go, and those of spares being made: nothing of a live process's is left behind. */
function removeAtExit(): void {
  for (const k of kept.values()) for (const s of k.spares) removeIfMade(join(k.conv.dir, s.name), s);
  for (const path of pending) unlinkQuiet(path);
}

/**
 * Makes a conversation's spares, up to SPARES_PER_CONVERSATION, through its folder opened and
 * checked for this (no lock held: temp files of this process's are no other's concern). Made on the
 * event loop through the folder of the one turn the process runs, else in the thread pool (see
 * makeTemp); a folder that can't take them costs only their gain. None where the process leaves
 * no holder (no hard links): nothing would look for those of a killed process.
 */
export async function makeSpares(conv: ConversationPaths): Promise<void> {
  if (!hardLinksWork()) return;
  const k = touch(conv);
  if (k.spares.length >= SPARES_PER_CONVERSATION || making.has(conv.dir)) return;
  if (!exitHooked) {
    exitHooked = true;
    process.once("exit", removeAtExit);
  }
  making.set(conv.dir, Promise.resolve());
  try {
    await withFolder(
      conv,
      async (folder) => {
        // Those missing now: one a turn takes meanwhile is the next turn's to make again, after it.
        for (let missing = SPARES_PER_CONVERSATION - k.spares.length; missing > 0; missing--) {
          const path = tempName(folder.base);
          const named = join(conv.dir, basename(path));
          pending.add(named);
          let made: MadeFile;
          try {
            const file = makeTemp(folder.base, FILE_MODE, path, folder.alone);
            making.set(conv.dir, file);
            made = await file;
          } finally {
            pending.delete(named);
          }
          // Let go meanwhile (used less lately than SPARE_CONVERSATIONS others): not kept.
          if (kept.get(conv.dir) !== k) {
            dropTemp(made);
            return;
          }
          const st = fstatSync(made.fd);
          k.spares.push({ name: basename(made.path), fd: made.fd, dev: st.dev, ino: st.ino });
        }
      },
      { make: false },
    );
  } finally {
    making.delete(conv.dir);
  }
}

/**
 * A spare of the conversation's for an event's file, named through `folder` (the turn's, which its
 * lock holds): one kept, else the one being made now (its name may be there already), once it is
 * made. A turn that comes while its conversation's spares are made waits for the one under way
 * rather than making a file of its own beside it (two files made where one was needed, on a disk
 * where making one costs up to a millisecond). Undefined when none is kept or under way, or the one
 * under way could not be made.
 */
export async function spareFor(conv: ConversationPaths, folder: { at(name: string): string }): Promise<MadeFile | undefined> {
  const now = takeSpare(conv, folder);
  const coming = making.get(conv.dir);
  if (now !== undefined || coming === undefined) return now;
  // Kept as it is made, in the step its making ends with, before this one goes on.
  await coming.catch(() => undefined);
  return takeSpare(conv, folder);
}

/**
 * A spare kept of the conversation's, named through `folder`; undefined when none is kept. One whose
 * name is no longer the file made (removed, replaced, given a second name, written to) is let go,
 * and the next looked at.
 */
function takeSpare(conv: ConversationPaths, folder: { at(name: string): string }): MadeFile | undefined {
  const k = kept.get(conv.dir);
  for (let s = k?.spares.shift(); s !== undefined; s = k?.spares.shift()) {
    const path = folder.at(s.name);
    let st;
    try {
      st = lstatSync(path);
    } catch {
      st = undefined;
    }
    const same = st !== undefined && st.isFile() && st.dev === s.dev && st.ino === s.ino;
    if (same && st?.nlink === 1 && st.size === 0) return { path, fd: s.fd };
    // Not as made: closed; its name removed only while it is still the file made (another's is left).
    if (same) drop(conv, s);
    else closeQuiet(s.fd);
  }
  return undefined;
}

/** Lets every spare go (tests; a process that stops removes them as it exits). */
export function dropSpares(): void {
  for (const k of kept.values()) for (const s of k.spares) drop(k.conv, s);
  kept.clear();
}
