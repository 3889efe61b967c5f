// Reading and writing files of the agent's folder: never through a link, always whole.
import { closeSync, constants, fdatasync, fsyncSync, lstatSync, mkdirSync, openSync, readdirSync, readSync, renameSync, unlinkSync, writeSync } from "node:fs";
import { dirname, join, relative, sep } from "node:path";
import { StoreError } from "../protocol/index.js";
import { isErrno } from "./errno.js";

export { isErrno };

const NOFOLLOW = constants.O_RDONLY | constants.O_NOFOLLOW;

/**
 * Refuses a path whose folders below `root` hold a symbolic link: a file planted in the agent's
 * folder can't pull another file of the machine into a prompt.
 */
export function checkNoLinks(root: string, path: string): void {
  const rel = relative(root, dirname(path));
  if (rel.startsWith("..")) throw new StoreError(`refused: ${path} is outside ${root}`, path);
  let at = root;
  for (const part of rel === "" ? [] : rel.split(sep)) {
    at = join(at, part);
    try {
      if (lstatSync(at).isSymbolicLink()) throw new StoreError(`refused: ${at} is a symbolic link`, at);
    } catch (e) {
      if (isErrno(e, "ENOENT")) return;
      throw e;
    }
  }
}

/** Where files are read into: one buffer for the process. A larger file gets a buffer of its own. */
const SCRATCH = 64 * 1024;
const scratch = Buffer.allocUnsafeSlow(SCRATCH);

/**
 * Reads a whole file as UTF-8, refusing a symbolic link (ELOOP) rather than following it. A turn
 * reads up to thousands of small files, so each costs three system calls: open, one read into a
 * buffer kept for the purpose (a regular file on a local file system gives less than asked only
 * at its end), and close.
 * `readFileSync` makes four, reading once more to find the end.
 */
export function readNoFollow(path: string): string {
  const fd = openSync(path, NOFOLLOW);
  try {
    let buffer = scratch;
    let length = 0;
    for (;;) {
      length += readSync(fd, buffer, length, buffer.length - length, length);
      if (length < buffer.length) return buffer.toString("utf8", 0, length);
      // Filled: the file may hold more.
      const grown = Buffer.allocUnsafe(buffer.length * 2);
      buffer.copy(grown, 0, 0, length);
      buffer = grown;
    }
  } finally {
    closeSync(fd);
  }
}

/** The file's text, or undefined when it doesn't exist. A link is refused, not followed. */
export function readText(path: string): string | undefined {
  try {
    return readNoFollow(path);
  } catch (e) {
    if (isErrno(e, "ENOENT") || isErrno(e, "ENOTDIR")) return undefined;
    if (isErrno(e, "ELOOP")) throw new StoreError(`refused: ${path} is a symbolic link`, path);
    throw new StoreError(`cannot read ${path}: ${(e as Error).message}`, path);
  }
}

/** Writes all of `text`: a single write may write less (a full disk, a signal) and say so only by its count. */
export function writeAll(fd: number, text: string): void {
  const bytes = Buffer.from(text, "utf8");
  for (let at = 0; at < bytes.length; ) {
    const wrote = writeSync(fd, bytes, at, bytes.length - at);
    if (wrote <= 0) throw new Error(`wrote ${at} of ${bytes.length} bytes`);
    at += wrote;
  }
}

let tmpCounter = 0;
/** A temporary file's name holds its writer's pid, so what a process that died left can be told apart. */
export function tempName(dir: string): string {
  tmpCounter += 1;
  return join(dir, `${tempPrefix(process.pid)}${Date.now().toString(36)}-${tmpCounter}`);
}

function tempPrefix(pid: number): string {
  return `.tmp-${pid}-`;
}

/**
 * Removes the temporary files a process of this machine that is gone left in a folder (a kill
 * between writing one and linking or renaming it). Lists the folder: for recovery, not every turn.
 * Returns how many it removed.
 */
export function removeTempsOf(dir: string, pid: number): number {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return 0;
  }
  const prefix = tempPrefix(pid);
  let removed = 0;
  for (const name of names) {
    if (!name.startsWith(prefix)) continue;
    unlinkQuiet(join(dir, name));
    removed++;
  }
  return removed;
}

const CREATE = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL;

/** Writes a temp file in the same folder, flushed to disk unless `flush` is false, and returns its path. */
export function writeTemp(dir: string, text: string, mode = 0o644, flush = true): string {
  mkdirSync(dir, { recursive: true });
  const tmp = tempName(dir);
  const fd = openSync(tmp, CREATE, mode);
  try {
    writeAll(fd, text);
    if (flush) fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  return tmp;
}

/**
 * The same, with the flush off the event loop: it takes from half a millisecond to several when the
 * disk is busy, and a daemon streaming many conversations must not stop for it. Opening and writing
 * a small file are quick and done at once; only the flush waits in the thread pool. It flushes the
 * data and what reading it back needs (fdatasync: the file's size), not its times.
 */
export async function writeTempAsync(dir: string, text: string, mode = 0o644): Promise<string> {
  const tmp = tempName(dir);
  const fd = openSync(tmp, CREATE, mode);
  try {
    writeAll(fd, text);
    await new Promise<void>((resolve, reject) => fdatasync(fd, (err) => (err ? reject(err) : resolve())));
  } catch (e) {
    closeSync(fd);
    unlinkQuiet(tmp);
    throw e;
  }
  closeSync(fd);
  return tmp;
}

/**
 * Replaces a file whole: temp file, then rename. A derived file (the window's mark, the copy) isn't
 * flushed: it is made again when missing or stale. Settings and a subagent's tools are.
 */
export function replaceFile(path: string, text: string, mode = 0o644, flush = true): void {
  const tmp = writeTemp(dirname(path), text, mode, flush);
  try {
    renameSync(tmp, path);
  } catch (e) {
    unlinkQuiet(tmp);
    throw e;
  }
}

export function unlinkQuiet(path: string): void {
  try {
    unlinkSync(path);
  } catch {
    // already gone
  }
}
