// One turn at a time per conversation: an async mutex inside the process, a lock file across processes.
import * as fs from "node:fs";
import { readFileSync, renameSync, rmSync } from "node:fs";
import { hostname } from "node:os";
import { dirname, join } from "node:path";
import lockfile from "proper-lockfile";
import { z } from "zod";
import { isErrno } from "./errno.js";
import { ensureConversation } from "./events.js";
import { removeTempsOf, writeAll } from "./files.js";
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

const CREATE = fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL;

/** The lock file's text: who holds it. */
function ownerText(): string {
  return JSON.stringify({ pid: process.pid, host: hostname() });
}

/** Removes a lock: the file, or the folder (holding its owner file) that earlier versions made. */
function removeLock(path: string): void {
  try {
    fs.unlinkSync(path);
  } catch (e) {
    if (!isErrno(e, "EISDIR") && !isErrno(e, "EPERM")) throw e;
    fs.rmSync(path, { recursive: true, force: true });
  }
}

/**
 * The file calls proper-lockfile makes, with the lock a file rather than a folder: made exclusively
 * (O_EXCL) with its holder's pid and host in it, its time refreshed, and unlinked. Removing a
 * folder costs this file system about half a millisecond more than unlinking a file, at every
 * turn. Each is a quick metadata call, made at once rather than through the thread pool, where
 * each would wait its turn behind the disk's flushes.
 */
const lockFs = {
  ...fs,
  mkdir: (path: string, cb: Callback<void>) =>
    now(() => {
      const fd = fs.openSync(path, CREATE, 0o644);
      try {
        writeAll(fd, ownerText());
      } catch (e) {
        // A lock that names no one could only go stale: none is left.
        fs.closeSync(fd);
        fs.unlinkSync(path);
        throw e;
      }
      fs.closeSync(fd);
    }, cb),
  stat: (path: string, cb: Callback<fs.Stats>) => now(() => fs.statSync(path), cb),
  utimes: (path: string, atime: Date, mtime: Date, cb: Callback<void>) => now(() => fs.utimesSync(path, atime, mtime), cb),
  rmdir: (path: string, cb: Callback<void>) => now(() => removeLock(path), cb),
  rmdirSync: (path: string) => removeLock(path),
};

const Owner = z.object({ pid: z.number().int(), host: z.string() });

function alive(pid: number): boolean {
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
      const text = readFileSync(path, "utf8");
      return Owner.safeParse(JSON.parse(text)).success ? text : undefined;
    } catch (e) {
      if (!isErrno(e, "EISDIR")) return undefined;
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
  if (owner.host !== hostname() || owner.pid === process.pid || alive(owner.pid)) return false;
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
  // What it was writing when it died is of no use to anyone: its temporary files go too.
  removeTempsOf(dirname(lock), owner.pid);
  return true;
}

/** Runs fn holding the conversation's lock, in this process and across processes. */
export async function withConversationLock<T>(conv: ConversationPaths, fn: () => Promise<T>, opts: LockOptions = {}): Promise<T> {
  const stale = Math.max(2000, opts.stale ?? 10_000);
  return mutex(conv.dir, async () => {
    ensureConversation(conv);
    const deadline = Date.now() + (opts.wait ?? 10 * 60_000);
    let release: (() => Promise<void>) | undefined;
    for (let delay = 20; ; delay = Math.min(delay * 2, 250)) {
      try {
        release = await lockfile.lock(conv.dir, {
          lockfilePath: conv.lock,
          fs: lockFs,
          stale,
          realpath: false,
          onCompromised: (err) => {
            // The default throws, which would take the daemon down: report it to the turn instead.
            opts.onCompromised?.(err);
          },
        });
        break;
      } catch (e) {
        if ((e as { code?: string }).code !== "ELOCKED") throw e;
        if (takeOverDead(conv.lock)) continue;
        if (opts.signal?.aborted) throw opts.signal.reason ?? new Error("aborted");
        if (Date.now() > deadline) throw new LockTimeoutError(conv.thread);
        await sleep(delay);
      }
    }
    try {
      return await fn();
    } finally {
      await release().catch(() => undefined);
    }
  });
}
