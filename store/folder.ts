// A conversation's folder, checked once and held open while it is written, so no file of the
// conversation is ever written outside the agent's folder: not when chats/ or the conversation's
// folder is a link, and not when either is swapped for one while a turn writes.
import { closeSync, constants, fchmodSync, fstatSync, fsync, fsyncSync, lstatSync, openSync, type Stats } from "node:fs";
import { basename, dirname } from "node:path";
import { StoreError } from "../protocol/index.js";
import { isErrno } from "./errno.js";
import { checkNoLinks, flushMadeAbove, FOLDER_MODE, isFolder, madeAbove, makeFolder, unlinkQuiet } from "./files.js";
import type { ConversationPaths } from "./paths.js";

const DIRECTORY = constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW;

/**
 * Whether a folder opened here can be named as /proc/self/fd/<fd>: a name that reaches the folder the
 * descriptor holds, wherever it has been moved and whatever now stands at its old path (Linux's
 * stand-in for openat). Elsewhere the folder's path is checked again before each write.
 */
let viaProc: boolean | undefined;

function sameFolder(a: Stats, b: Stats): boolean {
  return a.dev === b.dev && a.ino === b.ino;
}

/** Opens `name` in the folder `parent` (a descriptor) without following a link. */
function openIn(parent: number, parentPath: string, name: string): number {
  if (viaProc !== false) {
    try {
      const fd = openSync(`/proc/self/fd/${parent}/${name}`, DIRECTORY);
      viaProc = true;
      return fd;
    } catch (e) {
      if (viaProc === true || !isErrno(e, "ENOENT")) throw e;
      // No /proc here (another system, or a sandbox without it): check paths instead.
      viaProc = false;
    }
  }
  return openSync(`${parentPath}/${name}`, DIRECTORY);
}

/** Which folder a folder's stat is on its file system (its device and inode): the same by any path, another for a copy. */
export function folderId(st: { dev: number; ino: number }): string {
  return `${st.dev}:${st.ino}`;
}

/**
 * Which folder a folder's stat is, told from any folder made later at its path: its device and
 * inode, and its birth time where the file system keeps one (ext4 gives a folder removed and made
 * again at once the same inode). What a process keeps of a conversation is of the folder of this.
 */
export function folderIdentity(st: { dev: number; ino: number; birthtimeMs: number }): string {
  return `${st.dev}:${st.ino}:${st.birthtimeMs}`;
}

export class ConversationFolder {
  /** Checks that must still hold before each write: the conversation's lock, while a turn holds it. */
  guard: (() => void) | undefined;
  /** Whether a lock holds it: its writes' names are flushed once, when the lock's work is done. */
  get held(): boolean {
    return held.get(this.conv) === this;
  }
  /**
   * Whether it is held and no other folder is: the only conversation this process writes now, whose
   * turn waits on its flushes with nothing else under way, so they are made on the event loop.
   */
  get alone(): boolean {
    return holding === 1 && this.held;
  }
  private fd: number | undefined;
  /** Whether a name was linked in it since it was last flushed. */
  private unflushed = false;
  /** The folders made on the way to it (a new conversation's), being flushed since its lock was taken. */
  private above: Promise<void> | undefined;

  private constructor(
    readonly conv: ConversationPaths,
    fd: number,
    private readonly stat: Stats,
    /** What files of the folder are named from: the held descriptor, or the path. */
    readonly base: string,
  ) {
    this.fd = fd;
  }

  /** Which folder this is on its file system (folderId). */
  get id(): string {
    return folderId(this.stat);
  }

  /** Which folder this is, told from one made at its path later (folderIdentity). */
  get identity(): string {
    return (this.identityText ??= folderIdentity(this.stat));
  }
  private identityText: string | undefined;

  /**
   * Makes the conversation's folder (and chats/) where missing, each 0700, and opens it: chats/ and
   * the conversation's folder must be folders, never links. A folder an earlier version made open to
   * others is made private.
   */
  static open(conv: ConversationPaths, o: { make?: boolean } = {}): ConversationFolder {
    return ConversationFolder.there(conv) ?? ConversationFolder.made(conv, o);
  }

  /**
   * The folder as it is at nearly every turn: chats/ and the conversation's folder there, opened
   * each without following a link (O_NOFOLLOW on the one component each open names), which is the
   * check itself: five calls. Anything else (one missing, a link, not a folder, no /proc) is left
   * to `made`, which says what is wrong.
   */
  private static there(conv: ConversationPaths): ConversationFolder | undefined {
    if (viaProc === false) return undefined;
    const chats = dirname(conv.dir);
    let parent: number;
    try {
      parent = openSync(chats, DIRECTORY);
    } catch {
      return undefined;
    }
    let fd: number | undefined;
    try {
      fd = openSync(`/proc/self/fd/${parent}/${basename(conv.dir)}`, DIRECTORY);
      const st = fstatSync(fd);
      const up = fstatSync(parent);
      // A folder an earlier version made open to others: made private by `made`.
      if ((st.mode & 0o077) !== 0 || (up.mode & 0o077) !== 0) {
        closeSync(fd);
        return undefined;
      }
      viaProc = true;
      return new ConversationFolder(conv, fd, st, `/proc/self/fd/${fd}`);
    } catch {
      if (fd !== undefined) closeSync(fd);
      return undefined;
    } finally {
      closeSync(parent);
    }
  }

  /** The folder made where missing, checked path by path, and opened. */
  private static made(conv: ConversationPaths, o: { make?: boolean }): ConversationFolder {
    const chats = dirname(conv.dir);
    const agent = dirname(chats);
    // conv.dir is <agent>/chats/<thread>, and a thread name holds no separator.
    checkNoLinks(agent, conv.event(1));
    if (o.make !== false) {
      try {
        // The agent's own folder is never made here: one removed while a process still serves it
        // (the agent gone) stays gone, rather than coming back with a conversation in it.
        makeFolder(conv.dir, agent);
      } catch (e) {
        // Said as the agent's folder only when it is what is missing, not by the error's code: a
        // chats/ that is a file fails with ENOTDIR too.
        if (!isFolder(agent)) throw new StoreError(`the agent's folder ${agent} is missing or not a folder: nothing is written for it`, conv.dir);
        throw new StoreError(`cannot make ${conv.dir}: ${(e as Error).message}`, conv.dir);
      }
    }
    let parent: number;
    try {
      parent = openSync(chats, DIRECTORY);
    } catch (e) {
      throw refusedOrFailed(e, chats);
    }
    let fd: number | undefined;
    let st: Stats;
    try {
      try {
        fd = openIn(parent, chats, basename(conv.dir));
        st = fstatSync(fd);
      } catch (e) {
        throw refusedOrFailed(e, conv.dir);
      }
      // Made private through the very folders opened, never a path that may lead elsewhere since.
      try {
        if ((fstatSync(parent).mode & 0o077) !== 0) fchmodSync(parent, FOLDER_MODE);
        if ((st.mode & 0o077) !== 0) fchmodSync(fd, FOLDER_MODE);
      } catch (e) {
        throw new StoreError(`cannot make ${conv.dir} private (mode 0700): ${(e as Error).message}`, conv.dir);
      }
    } catch (e) {
      // Nothing of a folder that can't be used is kept open.
      if (fd !== undefined) closeSync(fd);
      throw e;
    } finally {
      closeSync(parent);
    }
    const folder = new ConversationFolder(conv, fd, st, viaProc ? `/proc/self/fd/${fd}` : conv.dir);
    try {
      folder.verify();
    } catch (e) {
      folder.close();
      throw e;
    }
    return folder;
  }

  /** The path of a file of the folder, as writes name it. */
  at(name: string): string {
    return `${this.base}/${name}`;
  }

  /**
   * Before each write: the folder is still where it was opened (chats/ no link, the conversation's
   * folder the same one), and the guard holds.
   */
  check(): void {
    this.verify();
    this.guard?.();
  }

  private verify(): void {
    const chats = dirname(this.conv.dir);
    let st: Stats;
    try {
      const up = lstatSync(chats);
      if (!up.isDirectory()) throw new StoreError(`refused: ${chats} is no longer a folder`, chats);
      st = lstatSync(this.conv.dir);
    } catch (e) {
      if (e instanceof StoreError) throw e;
      throw new StoreError(`refused: ${this.conv.dir} was moved while it was written: ${(e as Error).message}`, this.conv.dir);
    }
    if (!st.isDirectory() || !sameFolder(st, this.stat)) {
      throw new StoreError(`refused: ${this.conv.dir} was replaced while it was written`, this.conv.dir);
    }
  }

  /** A file was linked in it: its name is on disk once the folder is flushed. */
  linked(): void {
    this.unflushed = true;
  }

  /**
   * Flushes the folder itself (fsync of its descriptor, off the event loop), so that the names linked
   * in it since the last flush survive the machine going down, not only the process: an event's own
   * data is flushed before it is linked, and its name is not on disk until this. Once per turn.
   * The only folder held, with none made above it to flush too, is flushed on the event loop: its
   * turn waits for it with nothing else under way (ConversationFolder.alone).
   */
  async flush(): Promise<void> {
    if (!this.unflushed || this.fd === undefined) return;
    this.unflushed = false;
    const fd = this.fd;
    try {
      const above = this.above;
      this.above = undefined;
      await above;
      if (this.alone && !madeAbove(this.conv.dir)) {
        fsyncSync(fd);
        return;
      }
      // With the folders on the way to it that were made since they were last flushed (a new
      // conversation's, chats/ too when it was new): their names, and so this one's, are on disk.
      await Promise.all([new Promise<void>((resolve, reject) => fsync(fd, (err) => (err ? reject(err) : resolve()))), flushMadeAbove(this.conv.dir)]);
    } catch (e) {
      this.unflushed = true;
      throw new StoreError(`cannot flush ${this.conv.dir}: ${(e as Error).message}`, this.conv.dir);
    }
  }

  /**
   * Begins flushing, in the thread pool, the folders made on the way to it that no flush has taken
   * yet (a new conversation's folder is a new name in chats/, and chats/ may be a new one in the
   * agent's folder): while its turn asks the model, so that its flush at the end is of itself alone.
   */
  flushAboveAhead(): void {
    if (this.above !== undefined || !madeAbove(this.conv.dir)) return;
    this.above = flushMadeAbove(this.conv.dir);
    // Failed, it fails the flush that awaits it; the folders are still remembered, to be flushed again.
    this.above.catch(() => undefined);
  }

  /** Resolves once the flush begun by flushAboveAhead is over, however it ended: nothing of it outlives the lock. */
  async aboveDone(): Promise<void> {
    await this.above?.catch(() => undefined);
  }

  close(): void {
    if (this.fd === undefined) return;
    closeSync(this.fd);
    this.fd = undefined;
  }
}

function refusedOrFailed(e: unknown, path: string): StoreError {
  if (isErrno(e, "ELOOP") || isErrno(e, "ENOTDIR")) return new StoreError(`refused: ${path} is a symbolic link or not a folder`, path);
  return new StoreError(`cannot open ${path}: ${(e as Error).message}`, path);
}

/**
 * The folder each held lock writes through, by the very paths object the lock was taken with: the
 * code a lock runs passes that object to every write it makes, and nothing else holds it. A write
 * made elsewhere meanwhile (a command's, which takes no lock) names the conversation through paths of
 * its own, so it opens a folder of its own: it is neither refused by the guard of a lock it never
 * held, nor left with a descriptor closed under it when the lock is let go. Kept by identity rather
 * than by an async context: Node 20's AsyncLocalStorage hooks every promise of the process, and a
 * turn makes thousands.
 */
const held = new WeakMap<ConversationPaths, ConversationFolder>();
/** How many folders are held now, by this process's locks. */
let holding = 0;

/** Runs `fn` with `folder` as the one every write through its paths object goes through. */
export async function holdWhile<T>(folder: ConversationFolder, fn: () => Promise<T>): Promise<T> {
  if (held.has(folder.conv)) throw new Error(`${folder.conv.dir} is already held through these paths`);
  held.set(folder.conv, folder);
  holding++;
  folder.flushAboveAhead();
  try {
    const result = await fn();
    // What fn wrote and didn't flush itself is on disk before its caller hears of it.
    await folder.flush();
    return result;
  } finally {
    await folder.aboveDone();
    held.delete(folder.conv);
    holding--;
  }
}

/**
 * The held folder a conversation's files are read through, as its descriptor names it
 * (`/proc/self/fd/<fd>`): the folder checked as it was opened, which no link or swap of its path
 * since can change, so a read through it needs no look at the path first. Undefined when no lock of
 * this process holds it through these paths. Its `base` is the conversation's path itself where files
 * are named by their path here (no /proc).
 */
export function heldFolder(conv: ConversationPaths): ConversationFolder | undefined {
  return held.get(conv);
}

/** Which folder (folderIdentity) a lock of this process holds for the conversation, through these paths. */
export function heldFolderId(conv: ConversationPaths): string | undefined {
  return held.get(conv)?.identity;
}

/**
 * Flushes the names written through a held lock's folder so far (see ConversationFolder.flush): what
 * a turn that answers before its lock is let go calls first.
 */
export async function flushHeld(conv: ConversationPaths): Promise<void> {
  await held.get(conv)?.flush();
}

/**
 * Removes the file `name` of the conversation's folder, if it is there, in the checked folder: never
 * through a link, and never making the folder again. A folder that is gone, or is a link now, has
 * nothing of it removed.
 */
export function removeQuiet(conv: ConversationPaths, name: string): void {
  try {
    withFolder(conv, (folder) => unlinkQuiet(folder.at(name)), { make: false });
  } catch {
    // The folder is gone, or is a link now: nothing of it is removed.
  }
}

/**
 * Runs `fn` with the conversation's folder: the one the lock the caller runs under holds (checked,
 * with its guard), else one opened for this call alone, and made where missing unless `make` is false
 * (a removal: a folder that is gone has nothing to remove, and is not made again).
 */
export function withFolder<T>(conv: ConversationPaths, fn: (folder: ConversationFolder) => T, o: { make?: boolean } = {}): T {
  const kept = held.get(conv);
  if (kept) return fn(kept);
  const folder = ConversationFolder.open(conv, o);
  let result: T;
  try {
    result = fn(folder);
  } catch (e) {
    folder.close();
    throw e;
  }
  if (result instanceof Promise) return result.finally(() => folder.close()) as T;
  folder.close();
  return result;
}
