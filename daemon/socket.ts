// The Unix control socket: created mode 0600, a stale one from a dead process replaced, a live one
// never taken. Taking it is one step for the processes starting on it at once: a lock file beside it,
// `<path>.lock`, is held while the socket is probed, a stale one removed and the new one listened on.
// Without it, two daemons could each find the socket stale, and the second remove the first's new
// socket and serve in its place, the first left serving on a socket no one can reach.
import { chmodSync, closeSync, constants, fstatSync, linkSync, lstatSync, openSync, readSync, renameSync, statSync, unlinkSync, writeSync } from "node:fs";
import { connect, createServer, type Server, type Socket } from "node:net";
import { dirname } from "node:path";
import { isErrno } from "../store/errno.js";

/** A serving failure the person starting the daemon must fix: one line on stderr, exit 2. */
export class ServeError extends Error {
  readonly exitCode = 2;
  constructor(message: string) {
    super(message);
    this.name = "ServeError";
  }
}

const PROBE_MS = 2000;
/**
 * A lock is held for a probe (at most PROBE_MS) and a listen. One older than this was left by a
 * process that hangs, or names a pid used again since: it is stale, as is one whose process is gone.
 */
export const LOCK_STALE_MS = 30_000;
/** How often a lock held by another process is looked at again. */
const LOCK_POLL_MS = 50;

/** The lock file beside the socket at `path`. */
export const lockPath = (path: string): string => `${path}.lock`;

/** Whether a process of this pid is running (one of another user's counts). */
function running(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return !isErrno(e, "ESRCH");
  }
}

/** Makes the lock, holding this process's pid; its inode, or undefined when another holds it. */
function makeLock(lock: string): number | undefined {
  let fd: number;
  try {
    fd = openSync(lock, "wx", 0o600);
  } catch (e) {
    if (isErrno(e, "EEXIST")) return undefined;
    throw new ServeError(`cannot make the lock ${lock}: ${(e as Error).message}`);
  }
  try {
    writeSync(fd, `${process.pid}\n`);
  } finally {
    closeSync(fd);
  }
  return lstatSync(lock).ino;
}

/** Opened without following a link or waiting: a FIFO there would block the start, and SIGTERM with it. */
const READ_LOCK = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK;

/** Who holds the socket's lock, as its file says. */
interface HeldLock {
  pid: number;
  ino: number;
  age: number;
  foreign?: true;
}

/** A lock that is no file a process could have made, by its inode: no one holds it. */
function foreign(ino: number): HeldLock {
  return { pid: NaN, ino, age: 0, foreign: true };
}

/**
 * The lock another process holds: its pid (NaN while it is being written), inode and age; undefined
 * once gone. `foreign` where it is no file a process could have made (a link, a FIFO, a socket, a
 * device): no one holds it.
 */
function readLock(lock: string): HeldLock | undefined {
  let fd: number;
  try {
    fd = openSync(lock, READ_LOCK);
  } catch (e) {
    if (isErrno(e, "ENOENT")) return undefined;
    // A link (ELOOP) or a socket (ENXIO) there: looked at, not opened.
    if (isErrno(e, "ELOOP") || isErrno(e, "ENXIO")) return foreignLock(lock);
    throw new ServeError(`cannot read the lock ${lock}: ${(e as Error).message}`);
  }
  try {
    const st = fstatSync(fd);
    if (st.isDirectory()) throw new ServeError(`the lock ${lock} is a folder: not removed`);
    if (!st.isFile()) return foreign(st.ino);
    const buf = Buffer.alloc(32);
    const text = buf.subarray(0, readSync(fd, buf, 0, buf.length, 0)).toString("utf8").trim();
    return { pid: /^\d+$/.test(text) ? Number(text) : NaN, ino: st.ino, age: Date.now() - st.mtimeMs };
  } catch (e) {
    if (e instanceof ServeError) throw e;
    throw new ServeError(`cannot read the lock ${lock}: ${(e as Error).message}`);
  } finally {
    closeSync(fd);
  }
}

/** A lock that can't be opened as a file (a link, a socket): foreign, by its own inode; undefined once gone. */
function foreignLock(lock: string): HeldLock | undefined {
  const st = lstatSync(lock, { throwIfNoEntry: false });
  return st === undefined ? undefined : foreign(st.ino);
}

/**
 * Removes a stale lock, and only that one: it is moved aside first, in one step, and looked at
 * there; a lock made in its place meanwhile, by a process that found it stale too, is put back.
 */
function breakLock(lock: string, stale: { ino: number }): void {
  const aside = `${lock}.${process.pid}.stale`;
  try {
    renameSync(lock, aside);
  } catch (e) {
    if (isErrno(e, "ENOENT")) return;
    throw new ServeError(`cannot remove the stale lock ${lock}: ${(e as Error).message}`);
  }
  try {
    if (lstatSync(aside).ino !== stale.ino) linkSync(aside, lock);
  } catch {
    // Another lock is there already: it holds.
  } finally {
    try {
      unlinkSync(aside);
    } catch {
      // already gone
    }
  }
}

/** Takes the socket's lock, waiting while another live process holds it; gives the way to let it go. */
async function takeLock(path: string): Promise<() => void> {
  const lock = lockPath(path);
  for (;;) {
    const ino = makeLock(lock);
    if (ino !== undefined) {
      return () => {
        try {
          if (lstatSync(lock).ino === ino) unlinkSync(lock);
        } catch {
          // already gone
        }
      };
    }
    const held = readLock(lock);
    if (held === undefined) continue;
    const gone = Number.isInteger(held.pid) && (held.pid === process.pid || !running(held.pid));
    // One no process could have made is removed at once.
    if (held.foreign || gone || held.age > LOCK_STALE_MS) breakLock(lock, held);
    else await new Promise((resolve) => setTimeout(resolve, LOCK_POLL_MS));
  }
}

/** Whether a process answers on the socket at `path`. */
function answers(path: string): Promise<boolean> {
  return new Promise((resolve, reject) => {
    const probe = connect(path);
    const done = (alive: boolean) => {
      clearTimeout(timer);
      probe.destroy();
      resolve(alive);
    };
    // A process that accepts but is too busy to finish connecting is still alive.
    const timer = setTimeout(() => done(true), PROBE_MS);
    probe.once("connect", () => done(true));
    probe.once("error", (e) => {
      if (isErrno(e, "ECONNREFUSED") || isErrno(e, "ENOENT")) return done(false);
      clearTimeout(timer);
      reject(new ServeError(`cannot tell whether ${path} is in use: ${e.message}`));
    });
  });
}

async function clearStale(path: string): Promise<void> {
  let st;
  try {
    st = lstatSync(path);
  } catch (e) {
    if (isErrno(e, "ENOENT")) return;
    throw new ServeError(`cannot use ${path}: ${(e as Error).message}`);
  }
  if (!st.isSocket()) throw new ServeError(`${path} exists and is not a socket: not replaced`);
  if (await answers(path)) throw new ServeError(`${path} is in use by a running process: not taken`);
  try {
    unlinkSync(path);
  } catch (e) {
    if (!isErrno(e, "ENOENT")) throw new ServeError(`cannot remove the stale socket ${path}: ${(e as Error).message}`);
  }
}

export interface ControlSocket {
  readonly server: Server;
  /** Removes the socket file, if it is still this process's. */
  remove(): void;
}

/**
 * Listens on `path` with mode 0600 from the start: the umask is narrowed while the socket is made.
 * The socket's lock is held from the probe to the listen, and let go once the socket answers.
 */
/** The longest path a Unix socket may have here: sun_path holds 108 bytes with its final NUL. */
export const SOCKET_PATH_MAX = 107;

/** What stands in the way of a socket at `path` before anything is made: said as the real cause. */
function checkPlace(path: string): void {
  const bytes = Buffer.byteLength(path);
  if (bytes > SOCKET_PATH_MAX) {
    throw new ServeError(`${path} is ${bytes} bytes long: a Unix socket's path is at most ${SOCKET_PATH_MAX} bytes, so choose a shorter one`);
  }
  const folder = dirname(path);
  let st;
  try {
    st = statSync(folder);
  } catch (e) {
    if (isErrno(e, "ENOENT")) throw new ServeError(`the folder ${folder} does not exist: make it first (mkdir -p ${folder})`);
    throw new ServeError(`cannot use the folder ${folder}: ${(e as Error).message}`);
  }
  if (!st.isDirectory()) throw new ServeError(`${folder} is not a folder: the socket can't be made in it`);
}

export async function listenSocket(path: string, onConnection: (socket: Socket) => void): Promise<ControlSocket> {
  checkPlace(path);
  const release = await takeLock(path);
  try {
    return await listenLocked(path, onConnection);
  } finally {
    release();
  }
}

async function listenLocked(path: string, onConnection: (socket: Socket) => void): Promise<ControlSocket> {
  await clearStale(path);
  // Half open: a client that ends its side right after asking is still sent every answer (serve.ts ends the connection once they are).
  const server = createServer({ allowHalfOpen: true }, onConnection);
  const umask = process.umask(0o177);
  try {
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(path, () => {
        server.off("error", reject);
        resolve();
      });
    });
  } catch (e) {
    if (isErrno(e, "EADDRINUSE")) throw new ServeError(`${path} is in use by a running process: not taken`);
    throw new ServeError(`cannot listen on ${path}: ${(e as Error).message}`);
  } finally {
    process.umask(umask);
  }
  chmodSync(path, 0o600);
  const ino = lstatSync(path).ino;
  return {
    server,
    remove() {
      try {
        if (lstatSync(path).ino === ino) unlinkSync(path);
      } catch {
        // already gone
      }
    },
  };
}
