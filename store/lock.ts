// One turn at a time per conversation: an async mutex inside the process, a lock file across processes.
import { randomUUID } from "node:crypto";
import * as fs from "node:fs";
import { renameSync, rmSync } from "node:fs";
import { hostname } from "node:os";
import { dirname, join } from "node:path";
import lockfile from "proper-lockfile";
import { z } from "zod";
import { StoreError } from "../protocol/index.js";
import { isErrno } from "./errno.js";
import { FILE_MODE, LIMITS, readNoFollow, removeTempsOf, writeAll } from "./files.js";
import { ConversationFolder, holdWhile } from "./folder.js";
export { flushHeld } from "./folder.js";
import type { ConversationPaths } from "./paths.js";

export interface LockOptions {
  /** A lock not refreshed for this long is taken over (ms, at least 2000). */
  stale?: number;
  /** Gives up waiting after this long (ms). */
  wait?: number;
  /** Called when the lock was lost while held (its file was removed or taken over). */
  onCompromised?: (err: Error) => void;
  signal?: AbortSignal;
}

/** The lock was lost while held (taken over after the process was paused, or removed): nothing more is written. */
export class LockLostError extends StoreError {
  constructor(conv: ConversationPaths, why: string) {
    super(`conversation ${conv.thread}: its lock was lost (${why}): nothing more is written to it`, conv.lock);
    this.name = "LockLostError";
  }
}

export class LockTimeoutError extends Error {
  constructor(thread: string) {
    super(`conversation ${thread} is busy: another turn holds its lock`);
    this.name = "LockTimeoutError";
  }
}

const inProcess = new Map<string, Promise<void>>();

/** Runs fn alone in this process for this key: each caller waits for the one before it. */
async function mutex<T>(key: string, fn: () => Promise<T>): Promise<T> {
  const before = inProcess.get(key) ?? Promise.resolve();
  let release!: () => void;
  const mine = new Promise<void>((r) => (release = r));
  const chain = before.then(() => mine);
  inProcess.set(key, chain);
  await before;
  try {
    return await fn();
  } finally {
    release();
    if (inProcess.get(key) === chain) inProcess.delete(key);
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

type Callback<T> = (err: NodeJS.ErrnoException | null, value?: T) => void;

/** Runs a quick metadata call at once and answers its callback on the next tick. */
function now<T>(call: () => T, cb: Callback<T>): void {
  let value: T;
  try {
    value = call();
  } catch (e) {
    process.nextTick(cb, e as NodeJS.ErrnoException);
    return;
  }
  process.nextTick(cb, null, value);
}

const CREATE = fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL | fs.constants.O_NOFOLLOW;

/**
 * The lock file's text: who holds it. The token tells this process's locks from those of a process
 * that had its pid before; within the process, one turn at a time holds a conversation's lock.
 */
const TOKEN = randomUUID();
const OWNER_TEXT = JSON.stringify({ pid: process.pid, host: hostname(), token: TOKEN });

/**
 * The name of this process's holder in a conversation's folder: the one file its locks of that
 * conversation are, each a second name linked to it (see holderLock). Its pid, so what a process
 * that is gone left can be told apart, and its token, so no other process's (on another machine
 * sharing the folder, or one that had its pid before) is ever taken for it.
 */
const HOLDER = `.holder-${process.pid}-${TOKEN.replaceAll("-", "").slice(0, 12)}`;
const HOLDER_NAME = /^\.holder-(\d{1,10})-[0-9a-f]{12}$/;

/** The start of the holders' names a process of this pid made. */
export function holderPrefix(pid: number): string {
  return `.holder-${pid}-`;
}

/**
 * Whether a lock is made as a second name of the holder (a hard link, no new file) or, where the
 * file system takes no hard link, as a file of its own: found at the first lock that tries.
 */
let linking = true;

/** The conversations' folders (their paths) by the path their lock is being taken at, while it is. */
const taking = new Map<string, string>();

/** The holders this process made, by their path through the conversation's path: removed as it exits. */
const holders = new Set<string>();
let exitHooked = false;

function removeHoldersAtExit(): void {
  for (const path of holders) {
    try {
      fs.unlinkSync(path);
    } catch {
      // gone already
    }
  }
}

/**
 * The lock files this process made and holds, kept open: while a descriptor holds a file, no other
 * file can take its inode, so the file at a lock's path is this process's own exactly when it has
 * the inode kept here (see stillHeld). By the path the lock was made at.
 */
const kept = new Map<string, { fd: number; dev: number; ino: number }>();

/** Lets go of a lock file kept open. */
function letGo(path: string): void {
  const own = kept.get(path);
  if (!own) return;
  kept.delete(path);
  fs.closeSync(own.fd);
}

/**
 * Removes a lock: the file, or the folder (holding its owner file) that earlier versions made. One
 * this process made is removed only while it is still the file there: a lock lost is another
 * process's now, and removing it would let a third turn in beside that process's.
 */
function removeLock(path: string): void {
  const own = kept.get(path);
  if (own) {
    let st: fs.Stats | undefined;
    try {
      st = fs.lstatSync(path);
    } catch {
      st = undefined;
    }
    // Looked at while its descriptor still holds the inode, so no other file can have it.
    const mine = st !== undefined && st.ino === own.ino && st.dev === own.dev;
    try {
      if (mine) fs.unlinkSync(path);
    } finally {
      letGo(path);
    }
    return;
  }
  try {
    fs.unlinkSync(path);
  } catch (e) {
    if (!isErrno(e, "EISDIR") && !isErrno(e, "EPERM")) throw e;
    fs.rmSync(path, { recursive: true, force: true });
  }
}

/** Makes a lock as a file of its own, made exclusively (O_EXCL) with its holder's pid and host in it, and keeps it open. */
function createLock(path: string): void {
  const fd = fs.openSync(path, CREATE, FILE_MODE);
  try {
    fs.fchmodSync(fd, FILE_MODE);
    writeAll(fd, OWNER_TEXT);
    const st = fs.fstatSync(fd);
    letGo(path);
    kept.set(path, { fd, dev: st.dev, ino: st.ino });
  } catch (e) {
    // A lock that names no one could only go stale: none is left.
    fs.closeSync(fd);
    fs.unlinkSync(path);
    throw e;
  }
}

/** Whether a lock this process holds now is the file of `st`. */
function heldHere(st: fs.Stats): boolean {
  for (const k of kept.values()) if (k.dev === st.dev && k.ino === st.ino) return true;
  return false;
}

/**
 * Opens this process's holder in the lock's folder: the plain file of its text (its other names are
 * owed files of this process's prompts, and the lock while a turn holds it), where a lock no turn of
 * this process holds (one its release could not remove, or a name another gave it) is removed. Made
 * again where it is missing or anything else (a FIFO, a link, another text): whether it was made.
 */
function openHolder(path: string, lock: string): { fd: number; made: boolean } {
  try {
    const fd = fs.openSync(path, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK);
    const st = fs.fstatSync(fd);
    if (st.isFile() && st.size === Buffer.byteLength(OWNER_TEXT)) {
      if (st.nlink > 1 && !heldHere(st)) {
        const there = lstatOrUndefined(lock);
        if (there !== undefined && there.dev === st.dev && there.ino === st.ino) fs.unlinkSync(lock);
      }
      return { fd, made: false };
    }
    fs.closeSync(fd);
    fs.unlinkSync(path);
  } catch (e) {
    // A FIFO, a folder or a link there is refused by the open (ELOOP, ENXIO, EISDIR): replaced.
    if (!isErrno(e, "ENOENT") && !isErrno(e, "ELOOP") && !isErrno(e, "EISDIR") && !isErrno(e, "ENXIO")) throw e;
    if (!isErrno(e, "ENOENT")) fs.rmSync(path, { recursive: true, force: true });
  }
  const fd = fs.openSync(path, CREATE, FILE_MODE);
  try {
    fs.fchmodSync(fd, FILE_MODE);
    writeAll(fd, OWNER_TEXT);
  } catch (e) {
    fs.closeSync(fd);
    fs.unlinkSync(path);
    throw e;
  }
  return { fd, made: true };
}

function lstatOrUndefined(path: string): fs.Stats | undefined {
  try {
    return fs.lstatSync(path);
  } catch {
    return undefined;
  }
}

/**
 * Makes a lock as a second name of this process's holder in the conversation's folder: one link,
 * where a file of its own cost a new inode at every turn and freed one at its end. On a file
 * system without a journal, ext4 skips each inode freed in the last minute or more when it makes a
 * file, so a turn's new files cost more the more turns came before (up to a millisecond each, seen
 * here). The holder's time is set first, so the lock is fresh the moment it is there; a link that
 * fails as the name is taken is the lock held by another (EEXIST). Keeps the holder open while the
 * lock is held: no other file can take its inode meanwhile (see stillHeld).
 */
function holderLock(path: string): void {
  const holderPath = `${path.slice(0, path.lastIndexOf("/"))}/${HOLDER}`;
  const { fd, made } = openHolder(holderPath, path);
  if (made) madeHolder(path);
  try {
    const st = fs.fstatSync(fd);
    // Held by another turn of this process (the folder named by another path): taken, and its time
    // left as it is, which that lock's refresh would find changed and take for lost.
    if (heldHere(st)) throw Object.assign(new Error(`EEXIST: ${path} is held by another turn of this process`), { code: "EEXIST" });
    const t = new Date();
    fs.futimesSync(fd, t, t);
    fs.linkSync(holderPath, path);
    letGo(path);
    kept.set(path, { fd, dev: st.dev, ino: st.ino });
  } catch (e) {
    fs.closeSync(fd);
    throw e;
  }
}

/**
 * Gives this process's holder in a conversation's folder one more name (no file made): an owed file
 * (store/owed.ts), while the process's lock of the folder holds it. False where it has no holder
 * there: locks made as files of their own, or a folder it holds no lock of.
 */
export function linkHolder(folderBase: string, name: string): boolean {
  if (!linking) return false;
  try {
    fs.linkSync(`${folderBase}/${HOLDER}`, `${folderBase}/${name}`);
    return true;
  } catch (e) {
    if (isErrno(e, "ENOENT") || isErrno(e, "EPERM") || isErrno(e, "EXDEV") || isErrno(e, "EMLINK")) return false;
    throw e;
  }
}

/** Notes a holder made for the lock at `path`: removed as the process exits; and looks, once, for those gone processes left beside it. */
function madeHolder(path: string): void {
  const conv = taking.get(path);
  if (conv === undefined) return;
  holders.add(`${conv}/${HOLDER}`);
  if (!exitHooked) {
    exitHooked = true;
    process.once("exit", removeHoldersAtExit);
  }
  setImmediate(() => void sweepHolders(conv).catch(() => undefined));
}

/**
 * Removes the holders processes of this machine that are gone left in a conversation's folder (a
 * kill between turns leaves its holder; one during a turn, its lock too, which takeOverDead takes).
 * Another machine's are left: whether its process lives can't be known from here.
 */
async function sweepHolders(dir: string): Promise<void> {
  for (const name of await fs.promises.readdir(dir)) {
    const m = HOLDER_NAME.exec(name);
    if (!m || name === HOLDER) continue;
    const pid = Number(m[1]);
    if (processAlive(pid)) continue;
    const path = join(dir, name);
    try {
      const owner = Owner.safeParse(JSON.parse(readNoFollow(path, { max: LIMITS.lock })));
      if (owner.success && owner.data.host === hostname() && owner.data.pid === pid) fs.unlinkSync(path);
    } catch {
      // Gone meanwhile, or not a holder's text: left.
    }
  }
}

/**
 * The file calls proper-lockfile makes, with the lock a file rather than a folder: a second name of
 * this process's holder (holderLock), or where hard links can't be made a file of its own (with its
 * holder's pid and host in it, made exclusively), its time refreshed, and unlinked. Removing a folder
 * costs this file system about half a millisecond more than unlinking a file, at every turn. Each is
 * a quick metadata call, made at once rather than through the thread pool, where each would wait its
 * turn behind the disk's flushes.
 */
const lockFs = {
  ...fs,
  mkdir: (path: string, cb: Callback<void>) =>
    now(() => {
      if (linking) {
        try {
          holderLock(path);
          return;
        } catch (e) {
          // A file system that takes no hard link (or no second one of this file): a file of its own, from now on.
          if (!isErrno(e, "EPERM") && !isErrno(e, "EXDEV") && !isErrno(e, "ENOTSUP") && !isErrno(e, "EOPNOTSUPP") && !isErrno(e, "EMLINK") && !isErrno(e, "ENOSYS")) throw e;
          linking = false;
        }
      }
      createLock(path);
    }, cb),
  // The lock itself, never what a link there points to.
  stat: (path: string, cb: Callback<fs.Stats>) => now(() => fs.lstatSync(path), cb),
  utimes: (path: string, atime: Date, mtime: Date, cb: Callback<void>) => now(() => fs.utimesSync(path, atime, mtime), cb),
  rmdir: (path: string, cb: Callback<void>) => now(() => removeLock(path), cb),
  rmdirSync: (path: string) => removeLock(path),
};

const Owner = z.object({ pid: z.number().int(), host: z.string() });

/** Whether a process of this pid is there on this machine (one of another user's included). */
export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** Who holds a lock, as its file says (or, for a folder an earlier version made, its owner file). */
function readOwner(lock: string): string | undefined {
  for (const path of [lock, join(lock, "owner")]) {
    try {
      // Never through a link, never waiting on a FIFO, never more than a lock holds.
      const text = readNoFollow(path, { max: LIMITS.lock });
      return Owner.safeParse(JSON.parse(text)).success ? text : undefined;
    } catch {
      // Unreadable: the next path, `owner` inside it, is there only when the lock is a folder.
      continue;
    }
  }
  return undefined;
}

/**
 * Puts a live lock moved aside back, unless a third process has locked meanwhile: a link fails when
 * the name is taken, where a rename would replace that lock. (A folder, an earlier version's lock,
 * can't be linked; renaming it back fails on a folder that is there.)
 */
function putBack(aside: string, lock: string): void {
  try {
    fs.linkSync(aside, lock);
  } catch (e) {
    if (isErrno(e, "EPERM") || isErrno(e, "EISDIR")) {
      try {
        renameSync(aside, lock);
        return;
      } catch {
        // taken meanwhile
      }
    }
  }
  rmSync(aside, { recursive: true, force: true });
}

/**
 * Takes over a lock whose holder was a process of this machine that is gone (a crash, a SIGKILL),
 * so the next turn needn't wait for the lock to go stale. Another machine's lock waits for staleness.
 */
function takeOverDead(lock: string): boolean {
  const text = readOwner(lock);
  if (text === undefined) return false;
  const owner = Owner.parse(JSON.parse(text));
  if (owner.host !== hostname() || owner.pid === process.pid || processAlive(owner.pid)) return false;
  const aside = `${lock}.dead-${process.pid}-${Date.now()}`;
  try {
    renameSync(lock, aside);
  } catch {
    return false;
  }
  // Another process may have taken the dead lock over and locked again between the read and the
  // rename: then what was moved is its live lock, and it goes back.
  if (readOwner(aside) !== text) {
    putBack(aside, lock);
    return false;
  }
  rmSync(aside, { recursive: true, force: true });
  // What it was writing when it died is of no use to anyone: its temporary files go too, and its holder.
  removeTempsOf(dirname(lock), owner.pid, [holderPrefix(owner.pid)]);
  return true;
}

/**
 * Removes a lock that no process could have made: a symbolic link (dangling or not), a FIFO, a
 * socket. Such a thing would hold the conversation until it went stale, or for good.
 */
function removeForeign(lock: string): boolean {
  let st;
  try {
    st = fs.lstatSync(lock);
  } catch {
    return false;
  }
  if (st.isFile() || st.isDirectory()) return false;
  try {
    fs.unlinkSync(lock);
  } catch {
    return false;
  }
  return true;
}

/** The stale period when none is given: LNK_LOCK_STALE_MS, else 10 s (at least 2 s either way). */
export function defaultStale(env: NodeJS.ProcessEnv = process.env): number {
  const raw = env.LNK_LOCK_STALE_MS;
  const n = raw !== undefined && /^\d+$/.test(raw.trim()) ? Number(raw.trim()) : 10_000;
  return Math.max(2000, Number.isSafeInteger(n) ? n : 10_000);
}

/**
 * Whether this process still holds the lock at `lock`: its file is there, is the very file this
 * process made (the inode it keeps open, which no other file can have meanwhile: one look, where
 * reading the file back took four calls), and was refreshed within the stale period (a process
 * paused longer may have been taken over, or be about to be). Checked before each write the holder
 * makes.
 */
function stillHeld(conv: ConversationPaths, lock: string, stale: number, compromised: () => Error | undefined): void {
  const lost = compromised();
  if (lost) throw new LockLostError(conv, lost.message);
  let st;
  try {
    st = fs.lstatSync(lock);
  } catch {
    throw new LockLostError(conv, "its lock file is gone");
  }
  const own = kept.get(lock);
  if (!own || st.ino !== own.ino || st.dev !== own.dev) throw new LockLostError(conv, "another process holds it");
  if (Date.now() - st.mtimeMs > stale) throw new LockLostError(conv, `not refreshed for ${Math.round(Date.now() - st.mtimeMs)} ms`);
}

/**
 * Runs fn holding the conversation's lock, in this process and across processes. The conversation's
 * folder is opened and checked once, and every write of the conversation while fn runs goes through
 * it, checking first that the lock is still held.
 */
export async function withConversationLock<T>(conv: ConversationPaths, fn: () => Promise<T>, opts: LockOptions = {}): Promise<T> {
  const stale = Math.max(2000, opts.stale ?? defaultStale());
  return mutex(conv.dir, async () => {
    const folder = ConversationFolder.open(conv);
    const lock = folder.at(".lock");
    const deadline = Date.now() + (opts.wait ?? 10 * 60_000);
    let release: (() => Promise<void>) | undefined;
    let compromised: Error | undefined;
    try {
      for (let delay = 20; ; delay = Math.min(delay * 2, 250)) {
        try {
          taking.set(lock, conv.dir);
          release = await lockfile.lock(conv.dir, {
            lockfilePath: lock,
            fs: lockFs,
            stale,
            realpath: false,
            onCompromised: (err) => {
              // The default throws, which would take the daemon down: report it to the turn instead.
              compromised = err;
              opts.onCompromised?.(err);
            },
          });
          break;
        } catch (e) {
          if ((e as { code?: string }).code !== "ELOCKED") throw e;
          if (removeForeign(lock) || takeOverDead(lock)) continue;
          if (opts.signal?.aborted) throw opts.signal.reason ?? new Error("aborted");
          if (Date.now() > deadline) throw new LockTimeoutError(conv.thread);
          await sleep(delay);
        }
      }
    } catch (e) {
      taking.delete(lock);
      folder.close();
      throw e;
    }
    taking.delete(lock);
    folder.guard = () => stillHeld(conv, lock, stale, () => compromised);
    try {
      return await holdWhile(folder, fn);
    } finally {
      // Released before the folder it is named through is closed; its file let go even when the
      // release couldn't remove it (the lock was compromised).
      await release().catch(() => undefined);
      letGo(lock);
      folder.close();
    }
  });
}
