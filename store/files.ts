// Reading and writing files of the agent's folder: never through a link, always whole.
import { closeSync, constants, fsyncSync, lstatSync, mkdirSync, openSync, readFileSync, renameSync, unlinkSync, writeSync } from "node:fs";
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

/** Reads a whole file, refusing a symbolic link (ELOOP) rather than following it. */
export function readNoFollow(path: string): string {
  const fd = openSync(path, NOFOLLOW);
  try {
    return readFileSync(fd, "utf8");
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

let tmpCounter = 0;
export function tempName(dir: string): string {
  tmpCounter += 1;
  return join(dir, `.tmp-${process.pid}-${Date.now().toString(36)}-${tmpCounter}`);
}

/** Writes a temp file in the same folder, flushed, and returns its path. */
export function writeTemp(dir: string, text: string, mode = 0o644): string {
  mkdirSync(dir, { recursive: true });
  const tmp = tempName(dir);
  const fd = openSync(tmp, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL, mode);
  try {
    writeSync(fd, text);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  return tmp;
}

/** Replaces a derived or settings file whole: temp file, then rename. */
export function replaceFile(path: string, text: string, mode = 0o644): void {
  const tmp = writeTemp(dirname(path), text, mode);
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
