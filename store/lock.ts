// One turn at a time per conversation: an async mutex inside the process, a lock file across processes.
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import { renameSync, rmSync } from "node:fs";
import { hostname } from "node:os";
import { dirname, join } from "node:path";
import lockfile from "proper-lockfile";
import { z } from "zod";
import { StoreError } from "../protocol/index.js";
import { isErrno } from "./errno.js";
import { FILE_MODE, LIMITS, PROCESS_TAG, PROCESS_TOKEN, readNoFollow, removeTempsIn, removeTempsOf, TEMP_NAME, tempPrefix, tokenTag, unlinkQuiet, writeAll } from "./files.js";
import { ConversationFolder, holdWhile, withFolder } from "./folder.js";
export { flushHeld, heldFolderId } from "./folder.js";
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
 * `folder`, the conversation's folder it was made in (ConversationFolder.id): a lock found in
 * another folder is a copy's (`cp -al` of a folder while a turn held it, whose lock is then a name
 * of the live process's holder, refreshed at each of its turns there), which no one holds.
 */
const OWNER = { pid: process.pid, host: hostname(), token: PROCESS_TOKEN };

/** This process's owner text for a lock or holder made in the folder `folder` (its id), where known. */
function ownerText(folder: string | undefined): string {
  return JSON.stringify(folder === undefined ? OWNER : { ...OWNER, folder });
}

/**
 * The name of this process's holder in a conversation's folder, named by `dir`: the one file its
 * locks of that conversation are, each a second name linked to it (see holderLock). Its pid, so
 * what a process that is gone left can be told apart; its token, so no other process's (on another
 * machine sharing the folder, or one that had its pid before) is ever taken for it; and a hash of
 * the path the folder is named by, so that two turns of the process that name one folder by two
 * paths (a link to the agent's folder) hold locks that are files of their own, told apart as any
 * two processes' are.
 */
function holderName(dir: string): string {
  let name = holderNames.get(dir);
  if (name === undefined) {
    name = `${holderPrefix(process.pid, PROCESS_TAG)}-${createHash("sha256").update(dir).digest("hex").slice(0, 8)}`;
    if (holderNames.size >= HOLDER_NAMES_KEPT) holderNames.clear();
    holderNames.set(dir, name);
  }
  return name;
}
const holderNames = new Map<string, string>();
const HOLDER_NAMES_KEPT = 4096;
const HOLDER_NAME = /^\.holder-(\d{1,10})-([0-9a-f]{12})-[0-9a-f]{8}$/;

/** The start of the holders' names a process of this pid made (of the one of this token, with it). */
export function holderPrefix(pid: number, token?: string): string {
  return token === undefined ? `.holder-${pid}-` : `.holder-${pid}-${token}`;
}

/**
 * Whether a lock is made as a second name of the holder (a hard link, no new file) or, where the
 * file system takes no hard link, as a file of its own: found at the first lock that tries.
 */
let linking = true;

/**
 * Whether this process's locks are names of its holders (the file system takes hard links): where
 * they are not, no holder is left in a folder, and nothing the process leaves there is looked for
 * by the processes after it but with a lock it left.
 */
export function hardLinksWork(): boolean {
  return linking;
}

/** The conversations, and their locks' stale periods, by the path their lock is being taken at, while it is. */
const taking = new Map<string, { conv: ConversationPaths; stale: number; folder: string }>();

/**
 * When this process last looked in a conversation's folder for the holders gone processes left, by
 * its path: it looks again at a lock it takes a stale period after (a process killed between turns
 * leaves its holder, and no lock to take over).
 */
const swept = new Map<string, number>();

/** The holders this process made, by their path through the conversation's path: removed as it exits. */
const holders = new Set<string>();
let exitHooked = false;

function removeHoldersAtExit(): void {
  for (const path of holders) unlinkQuiet(path);
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
  // Another's, gone stale (proper-lockfile found it not refreshed for the stale period): what its
  // process left here goes with it (removeLeftBy), which nothing else would ever remove were its
  // pid another process's since, or the process another machine's. One only paused has lost the
  // lock, writes nothing here again, and makes its holder again at its next lock.
  const text = readOwner(path);
  try {
    fs.unlinkSync(path);
  } catch (e) {
    if (!isErrno(e, "EISDIR") && !isErrno(e, "EPERM")) throw e;
    fs.rmSync(path, { recursive: true, force: true });
  }
  if (text !== undefined) removeLeftBy(dirname(path), text, false);
}

/**
 * Makes a file holding this process's owner text, exclusively (O_EXCL), private; open, with how it
 * stands. One that could not be written is removed: a lock or a holder that names no one could only
 * go stale.
 */
function makeOwnerFile(path: string, text: string): { fd: number; st: fs.Stats } {
  const fd = fs.openSync(path, CREATE, FILE_MODE);
  try {
    fs.fchmodSync(fd, FILE_MODE);
    writeAll(fd, text);
    return { fd, st: fs.fstatSync(fd) };
  } catch (e) {
    fs.closeSync(fd);
    fs.unlinkSync(path);
    throw e;
  }
}

/** Makes a lock as a file of its own, with its holder's pid and host in it, and keeps it open. */
function createLock(path: string): void {
  const { fd, st } = makeOwnerFile(path, ownerText(taking.get(path)?.folder));
  letGo(path);
  kept.set(path, { fd, dev: st.dev, ino: st.ino });
}

/** Whether a lock this process holds now is the file of `st`. */
function heldHere(st: fs.Stats): boolean {
  for (const k of kept.values()) if (k.dev === st.dev && k.ino === st.ino) return true;
  return false;
}

/** Whether the file open at `fd` holds this process's holder's text exactly (`text`). */
function holdsOwnText(fd: number, text: string): boolean {
  const want = Buffer.from(text);
  const got = Buffer.alloc(want.length + 1);
  return fs.readSync(fd, got, 0, got.length, 0) === want.length && got.subarray(0, want.length).equals(want);
}

/**
 * Opens this process's holder in the lock's folder: the plain file of its text (its other names are
 * owed files of this process's prompts, and the lock while a turn holds it), where a lock no turn of
 * this process holds (one its release could not remove, or a name another gave it) is removed. Made
 * again where it is missing or anything else (a FIFO, a link, another text, one a second name of
 * another's): whether it was made.
 */
function openHolder(path: string, lock: string, text: string): { fd: number; st: fs.Stats; made: boolean } {
  try {
    const fd = fs.openSync(path, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK);
    try {
      const st = fs.fstatSync(fd);
      if (st.isFile() && st.size === Buffer.byteLength(text) && holdsOwnText(fd, text)) {
        if (st.nlink > 1 && !heldHere(st)) {
          const there = lstatOrUndefined(lock);
          if (there !== undefined && there.dev === st.dev && there.ino === st.ino) unlinkQuiet(lock);
        }
        return { fd, st, made: false };
      }
    } catch (e) {
      fs.closeSync(fd);
      throw e;
    }
    fs.closeSync(fd);
    fs.unlinkSync(path);
  } catch (e) {
    // A FIFO, a folder or a link there is refused by the open (ELOOP, ENXIO, EISDIR): replaced.
    if (!isErrno(e, "ENOENT") && !isErrno(e, "ELOOP") && !isErrno(e, "EISDIR") && !isErrno(e, "ENXIO")) throw e;
    if (!isErrno(e, "ENOENT")) fs.rmSync(path, { recursive: true, force: true });
  }
  return { ...makeOwnerFile(path, text), made: true };
}

function lstatOrUndefined(path: string): fs.Stats | undefined {
  try {
    return fs.lstatSync(path);
  } catch {
    return undefined;
  }
}

/** The error a lock held already is: what making it exclusively says. */
function taken(path: string, why: string): NodeJS.ErrnoException {
  return Object.assign(new Error(`EEXIST: ${path} ${why}`), { code: "EEXIST" });
}

/**
 * Makes a lock as a second name of this process's holder in the conversation's folder: one link,
 * where a file of its own cost a new inode at every turn and freed one at its end. On a file
 * system without a journal, ext4 passes over each inode freed in the last minute or more when it
 * makes a file, so a turn's new files cost more the more turns came before (up to a millisecond
 * each, seen here). The holder's time is set first, so the lock is fresh the moment it is there; a
 * link that fails as the name is taken is the lock held by another (EEXIST). Keeps the holder open
 * while the lock is held: no other file can take its inode meanwhile (see stillHeld). A holder
 * removed between its open and its link is made again, once.
 */
function holderLock(path: string): void {
  const pending = taking.get(path);
  const conv = pending?.conv;
  const stale = pending?.stale ?? defaultStale();
  const holderPath = `${path.slice(0, path.lastIndexOf("/"))}/${holderName(conv?.dir ?? path)}`;
  for (let again = true; ; again = false) {
    const { fd, st, made } = openHolder(holderPath, path, ownerText(pending?.folder));
    if (made && conv !== undefined) madeHolder(conv, stale);
    try {
      // Held by this process already (a turn of it waits its turn): its time is left as it is, which
      // that lock's refresh would find changed and take for lost.
      if (heldHere(st)) throw taken(path, "is held by this process");
      const t = new Date();
      fs.futimesSync(fd, t, t);
      fs.linkSync(holderPath, path);
      letGo(path);
      kept.set(path, { fd, dev: st.dev, ino: st.ino });
    } catch (e) {
      fs.closeSync(fd);
      if (again && isErrno(e, "ENOENT")) continue;
      throw e;
    }
    if (!made && conv !== undefined && Date.now() - (swept.get(conv.dir) ?? 0) > stale) sweepLater(conv, stale);
    return;
  }
}

/**
 * Gives this process's holder in a conversation's folder one more name (no file made): an owed file
 * (store/owed.ts), while the process's lock of the folder holds it, the holder at its name still
 * the file the lock is. False where it has none there: locks made as files of their own, a folder
 * it holds no lock of, or a holder someone put something else in place of.
 */
export function linkHolder(folderBase: string, conv: ConversationPaths, name: string): boolean {
  if (!linking) return false;
  const own = kept.get(`${folderBase}/.lock`);
  const holderPath = `${folderBase}/${holderName(conv.dir)}`;
  const there = lstatOrUndefined(holderPath);
  if (own === undefined || there === undefined || !there.isFile() || there.dev !== own.dev || there.ino !== own.ino) return false;
  const lock = lstatOrUndefined(`${folderBase}/.lock`);
  if (lock === undefined || lock.dev !== own.dev || lock.ino !== own.ino) return false;
  try {
    fs.linkSync(holderPath, `${folderBase}/${name}`);
    return true;
  } catch (e) {
    if (isErrno(e, "ENOENT") || isErrno(e, "EPERM") || isErrno(e, "EXDEV") || isErrno(e, "EMLINK")) return false;
    throw e;
  }
}

/** Notes a holder made in a conversation's folder: removed as the process exits; and looks for those gone processes left beside it. */
function madeHolder(conv: ConversationPaths, stale: number): void {
  holders.add(`${conv.dir}/${holderName(conv.dir)}`);
  if (!exitHooked) {
    exitHooked = true;
    process.once("exit", removeHoldersAtExit);
  }
  sweepLater(conv, stale);
}

/** Looks for the holders gone processes left in a conversation's folder, once the event loop comes round, off the turn's way. */
function sweepLater(conv: ConversationPaths, stale: number): void {
  if (swept.size >= HOLDER_NAMES_KEPT) swept.clear();
  swept.set(conv.dir, Date.now());
  const sweep = new Promise<void>((resolve) => setImmediate(() => void sweepHolders(conv, stale).catch(() => undefined).finally(resolve)));
  sweeping.add(sweep);
  void sweep.finally(() => sweeping.delete(sweep));
}

/** The sweeps under way, each holding a folder open for a moment. */
const sweeping = new Set<Promise<void>>();

/** Resolves once the sweeps of holders under way are done (each holds a folder open meanwhile). */
export async function sweepsSettled(): Promise<void> {
  await Promise.allSettled([...sweeping]);
}

/**
 * Removes the holders processes of this machine that are gone left in a conversation's folder (a
 * kill between turns leaves its holder; one during a turn, its lock too, which takeOverDead takes),
 * and one a process was killed while making (empty: at once; one with a text that is no owner's,
 * once it is older than the stale period). Another machine's are left: whether its process lives
 * can't be known from here. Through the folder as checked (never a link), made never again.
 */
async function sweepHolders(conv: ConversationPaths, stale: number): Promise<void> {
  const names = await fs.promises.readdir(conv.dir);
  // Holders and temporary files are dot files: a folder of 100,000 events is gone through once.
  const dotted = names.filter((n) => n.charCodeAt(0) === 46);
  withFolder(
    conv,
    (folder) => {
      const own = holderName(conv.dir);
      /** The holders removed here: their temporary files are no longer theirs to keep. */
      const removed = new Set<string>();
      for (const name of dotted) {
        const m = HOLDER_NAME.exec(name);
        if (!m || name === own) continue;
        const pid = Number(m[1]);
        const path = folder.at(name);
        try {
          const st = fs.lstatSync(path);
          const old = Date.now() - st.mtimeMs > stale;
          const owner = ownerIn(path);
          // A name a copy of another folder brought (`cp -al`): the holder is that folder's, live or not.
          if (owner !== undefined && broughtByCopy(owner, path, folder.id, names)) {
            fs.unlinkSync(path);
            continue;
          }
          if (!holderGone(pid, m[2] as string, old, st.birthtimeMs)) continue;
          // One with no text yet is one its process was killed while making (making a file alone
          // takes up to a millisecond on a busy disk): empty, it goes at once, for a process that
          // runs a while looks here once. Another machine's process of that pid, making its own
          // holder at this very moment, loses only that file, and makes it again (holderLock).
          const half = st.isFile() && st.size === 0 && stillEmpty(path, st);
          const gone = owner !== undefined ? owner.host === hostname() && owner.pid === pid : old || half;
          if (!gone) continue;
          fs.unlinkSync(path);
          // What it was writing when it was killed (an owed mark made as a file of its own after its
          // lock went, say) goes too: a process of this machine that is gone, its temporary files told
          // by its pid and its tag. Not where the pid is this process's own.
          removed.add(name);
          if (owner !== undefined && pid !== process.pid) removeTempsIn(dotted, (n) => folder.at(n), pid, m[2]);
        } catch {
          // Gone meanwhile: nothing to remove.
        }
      }
      // Nor is this process's own holder a keeper of any: it makes no file an earlier version named.
      removeGoneTemps(folder, dotted.filter((n) => !removed.has(n) && n !== own), stale);
    },
    { make: false },
  );
}

/** Whether the file at `path` is still the empty file of `st`, looked at again just before it is removed. */
function stillEmpty(path: string, st: fs.Stats): boolean {
  const now = lstatOrUndefined(path);
  return now !== undefined && now.dev === st.dev && now.ino === st.ino && now.size === 0;
}

/**
 * Removes the temporary files a process of this machine that is gone left where it has no holder
 * (a `usage` killed between writing its count's temp file and renaming it, a daemon's spares whose
 * holder went first, say): files only, once older than the stale period, so that another
 * machine's writer of the same pid, in a folder shared with it, is never cut short in a write.
 * Those of a process whose holder is there (its tag's; of an earlier version, its pid's) are its
 * holder's to keep, however old: spares and an answer's file wait for any time, and another
 * machine's process can't be looked at from here. Of this process's own pid, those older than the
 * process too: a gone process's that had its pid (a daemon restarted in a container is pid 1 again).
 */
function removeGoneTemps(folder: { at(name: string): string }, names: readonly string[], stale: number): void {
  const alive = new Map<number, boolean>();
  /** The pids, and pid and tag, of the holders there. */
  const held = new Set<string>();
  for (const name of names) {
    const h = HOLDER_NAME.exec(name);
    if (h) held.add(String(h[1])).add(`${h[1]}-${h[2]}`);
  }
  for (const name of names) {
    const m = TEMP_NAME.exec(name) ?? OLD_ASIDE.exec(name);
    if (!m) continue;
    if (held.has(m[2] === undefined ? String(m[1]) : `${m[1]}-${m[2]}`)) continue;
    const pid = Number(m[1]);
    let live = alive.get(pid);
    if (live === undefined) alive.set(pid, (live = pid !== process.pid && processAlive(pid)));
    if (live) continue;
    try {
      const st = fs.lstatSync(folder.at(name));
      const old = Date.now() - st.mtimeMs > stale && (pid !== process.pid || st.mtimeMs < performance.timeOrigin);
      if (!old) continue;
      if (st.isFile()) fs.unlinkSync(folder.at(name));
      // An earlier version's lock, a folder with its owner file, moved aside.
      else if (st.isDirectory() && name.startsWith(".lock.")) fs.rmSync(folder.at(name), { recursive: true, force: true });
    } catch {
      // Gone meanwhile: nothing to remove.
    }
  }
}

/** A dead lock an earlier version moved aside to remove it (`.lock.dead-<pid>-<ms>`), left where it was killed just then. */
const OLD_ASIDE = /^\.lock\.dead-(\d{1,10})-\d+$/;

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
          // A holder with as many names as the file system takes: a file of its own, this time.
          if (isErrno(e, "EMLINK")) return createLock(path);
          // A file system that takes no hard link: a file of its own, from now on.
          if (!isErrno(e, "EPERM") && !isErrno(e, "EXDEV") && !isErrno(e, "ENOTSUP") && !isErrno(e, "EOPNOTSUPP") && !isErrno(e, "ENOSYS")) throw e;
          linking = false;
        }
      }
      createLock(path);
    }, cb),
  // The lock itself, never what a link there points to.
  stat: (path: string, cb: Callback<fs.Stats>) => now(() => fs.lstatSync(path), cb),
  utimes: (path: string, atime: Date, mtime: Date, cb: Callback<void>) => now(() => refreshLock(path, atime, mtime), cb),
  rmdir: (path: string, cb: Callback<void>) => now(() => removeLock(path), cb),
  rmdirSync: (path: string) => removeLock(path),
};

/**
 * Sets a lock's times (proper-lockfile's refresh, and its first probe of the time's precision)
 * through the descriptor this process keeps of it, never through its path: a link put in the lock's
 * place would have its target's times set. A lock that is no longer the file kept (swapped, removed)
 * is lost (ENOENT, which proper-lockfile takes as the lock compromised). One more lstat a refresh,
 * every half stale period, not a turn's.
 */
function refreshLock(path: string, atime: Date, mtime: Date): void {
  const own = kept.get(path);
  const there = lstatOrUndefined(path);
  if (own === undefined || there === undefined || there.dev !== own.dev || there.ino !== own.ino) {
    throw Object.assign(new Error("the lock file was replaced or removed"), { code: "ENOENT" });
  }
  fs.futimesSync(own.fd, atime, mtime);
}

const Owner = z.object({ pid: z.number().int(), host: z.string(), folder: z.string().optional() });
type Owner = z.infer<typeof Owner>;
const TokenOf = z.object({ token: z.string() });

/**
 * Whether a holder (its pid, its token's tag, whether it is older than the stale period, and when
 * it was made) is of a process of this machine that is gone: no process has its pid, or the one
 * that has it started after the holder was made (see startedAfter) and it is older than the stale
 * period (a live process's lock keeps its holder fresh, so a clock set forward since it was made
 * costs a live process at most its holder between turns, made again at its next lock); or this
 * one has it, its tag is not this one's, and it is older than the stale period (a process that had
 * the pid before, as a daemon restarted in a container is pid 1 again; or a live one of another
 * pid namespace that shares the host's name, whose holder, made again at its next lock, is all it
 * loses). A lock's holder is taken over only by the first rule: one of this pid and another token
 * may be a live process of another namespace, and waits to go stale.
 */
function holderGone(pid: number, tag: string, old: boolean, born: number): boolean {
  if (pid !== process.pid) return !processAlive(pid) || (old && startedAfter(pid, born));
  return tag !== PROCESS_TAG && old;
}

/**
 * Whether the process that made a file of a conversation's folder (an owed file, store/owed.ts) is
 * gone, judged as a holder's is (holderGone): its pid; the host and token its text names, where it
 * names them (a file an earlier version made names neither: one of this machine, as it was then);
 * and the file as it stands. One of another machine can't be looked at from here: gone once it is
 * older than the stale period and no fresh lock of the folder's conversation is there (its process
 * writes a prompt's answer before it lets the lock go, and a lock it holds keeps fresh the holder
 * an owed file is a name of), as a lock of another machine is taken over once stale. One of this
 * machine and of this process's pid is taken for gone: this process's own, or one's that had its
 * pid before, whose file it takes for its own.
 */
export function writerGone(conv: ConversationPaths, pid: number, owner: { host?: string | undefined; token?: string | undefined }, st: fs.Stats, stale = defaultStale()): boolean {
  const old = Date.now() - st.mtimeMs > stale;
  if (owner.host !== undefined && owner.host !== hostname()) return old && !lockedElsewhere(conv, stale);
  if (pid === process.pid) return true;
  return holderGone(pid, owner.token === undefined ? "" : tokenTag(owner.token), old, st.birthtimeMs);
}

/** The host and token an owner text (a holder's, parsed) names; undefined where it is none. */
export function ownerNamed(json: unknown): { host: string; token?: string } | undefined {
  const owner = Owner.safeParse(json);
  if (!owner.success) return undefined;
  const token = TokenOf.safeParse(json);
  return token.success ? { host: owner.data.host, token: token.data.token } : { host: owner.data.host };
}

/** How much later than a file a process must have started to be told apart from its maker. */
const STARTED_MARGIN_MS = 2_000;
let bootMs: number | undefined;

/**
 * When this machine booted, in ms since the epoch: the clock now less the time since the boot
 * (/proc/uptime, in hundredths of a second). /proc/stat's `btime` is the same in whole seconds,
 * cut down: up to a second early, which made a process seem to start up to a second before it did.
 */
function bootTime(): number {
  bootMs ??= Date.now() - Number(fs.readFileSync("/proc/uptime", "utf8").split(" ")[0]) * 1000;
  return bootMs;
}

/**
 * Whether the process of this pid, on this machine, started after `born` (ms since the epoch, a
 * file's birth): then it did not make that file, whose maker is gone and its pid another's since.
 * Read from /proc (the start in clock ticks of 100 a second after the boot); false wherever it
 * can't be told (no /proc, a file system that keeps no birth time), as though it were the maker.
 */
function startedAfter(pid: number, born: number): boolean {
  if (!(born > 0)) return false;
  try {
    const boot = bootTime();
    const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
    const ticks = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19]);
    if (!Number.isFinite(boot) || !Number.isFinite(ticks)) return false;
    return boot + ticks * 10 > born + STARTED_MARGIN_MS;
  } catch {
    return false;
  }
}

/** Whether a process of this pid is there on this machine (one of another user's included). */
export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM";
  }
}

/**
 * Whether another process holds the conversation's lock now, as its file says: a live process of
 * this machine (not this one), or another machine's while the lock is fresh. A turn holds it from
 * before its message is written to after its answer is, so a call of the conversation without its
 * result yet is one that turn runs. Never waits, never follows a link.
 */
export function lockedElsewhere(conv: ConversationPaths, stale = defaultStale()): boolean {
  const text = readOwner(conv.lock);
  if (text === undefined) return false;
  const owner = Owner.safeParse(JSON.parse(text));
  if (!owner.success) return false;
  // A pid of 0 or below names a group of processes, never a holder.
  if (owner.data.host === hostname()) return owner.data.pid > 0 && owner.data.pid !== process.pid && processAlive(owner.data.pid);
  const st = lstatOrUndefined(conv.lock);
  return st !== undefined && Date.now() - st.mtimeMs <= stale;
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
 * so the next turn needn't wait for the lock to go stale. Another machine's lock waits for
 * staleness; so does one whose pid a process has now (see startedAfter: a clock set forward since
 * it was made could make a live one look gone).
 */
function takeOverDead(lock: string): boolean {
  const text = readOwner(lock);
  if (text === undefined) return false;
  const owner = Owner.parse(JSON.parse(text));
  if (owner.host !== hostname() || owner.pid === process.pid || processAlive(owner.pid)) return false;
  if (!removeAsRead(lock, text)) return false;
  removeLeftBy(dirname(lock), text, true);
  return true;
}

/**
 * Removes what the process of a lock taken over (its owner text, `text`) left in the lock's folder:
 * what it was writing is of no use to anyone, its temporary files go, and its holder. Those of its
 * token's tag; where the text has no token (a version before holders and tags), its pid's
 * temporary files that carry no tag when `gone` (known gone: a process of this machine), else
 * none, and no holder (any of its pid's is another process's). Never this process's own.
 */
function removeLeftBy(dir: string, text: string, gone: boolean): void {
  const json: unknown = JSON.parse(text);
  const owner = Owner.safeParse(json);
  if (!owner.success) return;
  const token = TokenOf.safeParse(json);
  const tag = token.success ? tokenTag(token.data.token) : undefined;
  if ((tag === undefined && !gone) || (owner.data.pid === process.pid && (tag === undefined || tag === PROCESS_TAG))) return;
  removeTempsOf(dir, owner.data.pid, tag, tag === undefined ? [] : [holderPrefix(owner.data.pid, tag)]);
}

/**
 * Removes the lock at `lock` while it is still the one read (`text`): moved aside, then removed.
 * Another process may have taken it over and locked again between the read and the move: then what
 * was moved is its live lock, and it goes back.
 */
function removeAsRead(lock: string, text: string): boolean {
  // A temporary file's name of this process's: should it be killed before it removes it, it goes
  // with this process's holder, or once old, as any of a gone process's temporary files.
  const aside = join(dirname(lock), `${tempPrefix(process.pid, PROCESS_TAG)}dead-${Date.now()}`);
  try {
    renameSync(lock, aside);
  } catch {
    return false;
  }
  if (readOwner(aside) !== text) {
    putBack(aside, lock);
    return false;
  }
  rmSync(aside, { recursive: true, force: true });
  return true;
}

/**
 * Removes a lock a copy brought (`cp -al` of a folder while a turn held it), which no turn holds,
 * however fresh the live holder it is a name of keeps it: its owner text names another folder of
 * the same file system, and the file has names outside this folder (the original's). See madeElsewhere.
 */
function removeCopied(lock: string, folder: string): boolean {
  const text = readOwner(lock);
  if (text === undefined) return false;
  if (!broughtByCopy(Owner.parse(JSON.parse(text)), lock, folder)) return false;
  return removeAsRead(lock, text);
}

/**
 * Whether the file at `path`, of owner text `owner`, in the folder of id `folder` (whose `names`,
 * where read already), was brought by a copy: see madeElsewhere and namedElsewhere.
 */
function broughtByCopy(owner: Owner, path: string, folder: string, names?: readonly string[]): boolean {
  return madeElsewhere(owner, folder) && namedElsewhere(path, names);
}

/**
 * Whether an owner text names a folder other than `folder` (its id) on the same file system: only
 * one of this machine's (another numbers a file system it shares with this one, NFS, its own way),
 * only of the same device (the same files seen through another mount, a container's own, an
 * overlay, have another device number). Texts of versions that named no folder never do.
 */
function madeElsewhere(owner: Owner, folder: string): boolean {
  if (owner.host !== hostname() || owner.folder === undefined) return false;
  const [dev, ino] = owner.folder.split(":");
  const [hereDev, hereIno] = folder.split(":");
  return dev === hereDev && ino !== hereIno;
}

/**
 * Whether the file at `path` has names outside its folder: more names than the folder holds of it.
 * A copy's lock does (the original's holder, lock and owed names); a lock of this folder's does not,
 * even on a file system whose inode numbers of folders change over time (a FUSE one without stable
 * numbers), where its folder's id could seem another's. Reads the folder: only where a text said so.
 */
function namedElsewhere(path: string, names?: readonly string[]): boolean {
  try {
    const st = fs.lstatSync(path);
    const dir = dirname(path);
    let here = 0;
    for (const name of names ?? fs.readdirSync(dir)) {
      const other = lstatOrUndefined(join(dir, name));
      if (other !== undefined && other.dev === st.dev && other.ino === st.ino) here++;
    }
    return st.nlink > here;
  } catch {
    return false;
  }
}

/**
 * Whether the file at `path` (in a conversation's folder, of id `folder`) is a name of a holder or
 * lock of this machine's made in another folder, with names there: a copy brought it (`cp -al`).
 * Never through a link, never more than a lock holds; a file that is no owner text is not.
 */
export function ownerMadeElsewhere(path: string, folder: string): boolean {
  const owner = ownerIn(path);
  return owner !== undefined && broughtByCopy(owner, path, folder);
}

/** The owner text of the file at `path`: never through a link, never more than a lock holds; undefined where it is none. */
function ownerIn(path: string): Owner | undefined {
  try {
    const owner = Owner.safeParse(JSON.parse(readNoFollow(path, { max: LIMITS.lock })));
    return owner.success ? owner.data : undefined;
  } catch {
    return undefined;
  }
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
          taking.set(lock, { conv, stale, folder: folder.id });
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
          if (removeForeign(lock) || takeOverDead(lock) || removeCopied(lock, folder.id)) continue;
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
