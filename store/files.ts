// Reading and writing files of the agent's folder: never through a link, always whole.
import { randomUUID } from "node:crypto";
import { chmodSync, close as closeAsync, closeSync, constants, fchmodSync, fdatasync, fdatasyncSync, fstatSync, fsync, fsyncSync, lstatSync, mkdirSync, open, openSync, readdirSync, readSync, renameSync, rmSync, statSync, unlinkSync, writeSync, type Stats } from "node:fs";
import { dirname, join, relative, sep } from "node:path";
import { StoreError } from "../protocol/index.js";
import { isErrno } from "./errno.js";

export { isErrno };

// A file is opened without following a link, and without waiting: a FIFO planted where a file is
// expected would otherwise block the open, and with it the whole process.
const NOFOLLOW = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK;

/** Folders the store makes, and the conversations' files: private to the agent's user, whatever the umask. */
export const FOLDER_MODE = 0o700;
export const FILE_MODE = 0o600;

/** The most of each kind of file the store reads, in bytes (man lnk-link-harness-folder(5), "Limits"). */
export const LIMITS = {
  /** An event: a message with its parts fits (a prompt is at most 32 MiB on the wire by default). */
  event: 64 * 1024 * 1024,
  /** config.json. */
  settings: 1024 * 1024,
  /** A subagent's tools.json. */
  tools: 1024 * 1024,
  /** window.json, derived: one over this is made again. */
  mark: 64 * 1024,
  /** usage.json, derived: one over this is not written, and the count starts from the first event. */
  usage: 4 * 1024 * 1024,
  /** A lock file: who holds it. */
  lock: 4096,
} as const;

/** A symbolic link refused where a file or a folder of the agent's should be. */
export class LinkRefused extends StoreError {
  constructor(path: string) {
    super(`refused: ${path} is a symbolic link`, path);
    this.name = "LinkRefused";
  }
}

/**
 * Refuses a path whose folders below `root` hold a symbolic link, or something that is not a folder:
 * a file planted in the agent's folder can't pull another file of the machine into a prompt. Whether
 * they are all there: where one is missing, so is the file, and a reader need not look for it (a
 * missing file costs Node an error made, some 3 us, where the look that finds it missing cost 0.4).
 */
export function checkNoLinks(root: string, path: string): boolean {
  return foldersOnTheWay(root, path) !== undefined;
}

/**
 * checkNoLinks, saying how the folder `path` is in stands (its own lstat, from the same looks):
 * undefined where a folder on the way is missing; null where that folder is `root` itself.
 */
export function foldersOnTheWay(root: string, path: string): Stats | null | undefined {
  const rel = relative(root, dirname(path));
  if (rel.startsWith("..")) throw new StoreError(`refused: ${path} is outside ${root}`, path);
  let at = root;
  let st: Stats | null | undefined = null;
  for (const part of rel === "" ? [] : rel.split(sep)) {
    at = join(at, part);
    st = lstatSync(at, { throwIfNoEntry: false });
    if (st === undefined) return undefined;
    if (st.isSymbolicLink()) throw new LinkRefused(at);
    if (!st.isDirectory()) throw new StoreError(`refused: ${at} is not a folder`, at);
  }
  return st;
}

/** Where files are read into: one buffer for the process. A larger file gets a buffer of its own. */
const SCRATCH = 64 * 1024;
const scratch = Buffer.allocUnsafeSlow(SCRATCH);

function describeSize(bytes: number): string {
  return bytes >= 1024 * 1024 ? `${Math.round(bytes / (1024 * 1024))} MiB` : bytes >= 1024 ? `${Math.round(bytes / 1024)} KiB` : `${bytes} bytes`;
}

export interface ReadOptions {
  /** The most it reads, in bytes. */
  max: number;
  /** Over `max`: false refuses the file; true reads its first `max` bytes (a section is cut anyway). */
  cut?: boolean;
  /** Called when the file was cut (`cut`): it holds more than `max` bytes. */
  onCut?: () => void;
  /** Refuse a file with more than one name (a hard link): for the files the harness reads but never writes. */
  single?: boolean;
  /** Follow a symbolic link: for a file of the user's outside the agent's folder (their facts file). */
  follow?: boolean;
  /** The path said of the file, where it is opened by another name (through a held folder's descriptor). */
  named?: string;
  /** Told what the file is once it is looked at and not refused (with `single`, before it is read). */
  onStat?: (st: Stats) => void;
}

/** What is wrong with an open file for reading it, if anything. */
function refusal(path: string, st: Stats, o: ReadOptions): string | undefined {
  if (!st.isFile()) return `refused: ${path} is not a regular file`;
  if (o.single && st.nlink > 1) {
    return `refused: ${path} has ${st.nlink} names (a hard link): copy it to give it one (cp ${path} ${path}.new && mv ${path}.new ${path})`;
  }
  if (!o.cut && st.size > o.max) return `refused: ${path} is ${describeSize(st.size)}, over the limit of ${describeSize(o.max)}`;
  return undefined;
}

/**
 * Reads a whole file as UTF-8, refusing a symbolic link (ELOOP) rather than following it, anything
 * that is not a regular file, and a file over `max`. A turn reads up to thousands of small files, so
 * each costs three system calls: open, one read into a buffer kept for the purpose (a regular file
 * on a local file system gives less than asked only at its end), and close. The file is looked at
 * (fstat) only when that read comes back empty or full, or when it must have one name.
 */
export function readNoFollow(at: string, o: ReadOptions = { max: LIMITS.event }): string {
  const fd = openSync(at, o.follow ? NOFOLLOW & ~constants.O_NOFOLLOW : NOFOLLOW);
  const path = o.named ?? at;
  let checked = false;
  /** The file's size as looked at: what a buffer grows to at once, rather than by doubling. */
  let size = 0;
  const check = () => {
    checked = true;
    const st = fstatSync(fd);
    size = st.size;
    const why = refusal(path, st, o);
    if (why) throw new StoreError(why, path);
    o.onStat?.(st);
  };
  try {
    if (o.single) check();
    let buffer = scratch;
    let length = 0;
    for (;;) {
      const room = Math.min(buffer.length, o.max + 1) - length;
      let got: number;
      try {
        got = readSync(fd, buffer, length, room, length);
      } catch (e) {
        // EISDIR, EAGAIN (a FIFO with a writer): say what it is rather than how reading it failed.
        if (!checked) check();
        throw e;
      }
      length += got;
      const ended = got < room;
      // Empty (a FIFO with no writer reads so too) or more to come: what is it, and how large?
      if (!checked && (length === 0 || !ended)) check();
      if (length > o.max) {
        if (o.cut) {
          o.onCut?.();
          return utf8(buffer, o.max);
        }
        throw new StoreError(`refused: ${path} is over the limit of ${describeSize(o.max)}`, path);
      }
      if (ended) return buffer.toString("utf8", 0, length);
      // Filled: the file holds more (one read past its size says whether it grew meanwhile).
      const grown = Buffer.allocUnsafe(Math.min(Math.max(buffer.length * 2, size + 1), o.max + 1));
      buffer.copy(grown, 0, 0, length);
      buffer = grown;
    }
  } finally {
    closeSync(fd);
  }
}

/** Where the heads of files are read into. */
const HEAD = Buffer.allocUnsafeSlow(SCRATCH + 1);

/**
 * The first `max` bytes of a file (at most 64 KiB), read as readNoFollow reads a file (a link, a FIFO
 * or a folder refused), and whether they are all of it: one read, for telling many files apart
 * without reading each whole.
 */
export function readHead(path: string, max: number): { text: string; whole: boolean } {
  const want = Math.min(max, SCRATCH);
  const fd = openSync(path, NOFOLLOW);
  try {
    let got: number;
    try {
      got = readSync(fd, HEAD, 0, want + 1, 0);
    } catch (e) {
      const why = refusal(path, fstatSync(fd), { max: LIMITS.event, cut: true });
      if (why) throw new StoreError(why, path);
      throw e;
    }
    if (got === 0 || got > want) {
      const why = refusal(path, fstatSync(fd), { max: LIMITS.event, cut: true });
      if (why) throw new StoreError(why, path);
    }
    return got > want ? { text: utf8(HEAD, want), whole: false } : { text: HEAD.toString("utf8", 0, got), whole: true };
  } finally {
    closeSync(fd);
  }
}

/** The first `bytes` of a buffer as text, a character cut at the end dropped. */
function utf8(buffer: Buffer, bytes: number): string {
  let end = bytes;
  // Back off continuation bytes (10xxxxxx) to the start of the character they belong to.
  while (end > 0 && end > bytes - 4 && ((buffer[end] ?? 0) & 0xc0) === 0x80) end--;
  return buffer.toString("utf8", 0, end);
}

/**
 * What each file's text gave when it was last read, by path: a file read whole again with the same
 * text gives the same value (frozen, so every caller may be given it), not parsed and checked again.
 * At most `most` files are kept, and no text longer than `longest`.
 */
export class ParsedTexts<V> {
  private readonly kept = new Map<string, { text: string; value: V }>();

  constructor(
    private readonly most: number,
    private readonly longest = Number.POSITIVE_INFINITY,
  ) {}

  /** What `text`, read from `path`, gave the last time it was read: `{ value }`, or undefined when not known. */
  known(path: string, text: string): { value: V } | undefined {
    const kept = this.kept.get(path);
    return kept?.text === text ? kept : undefined;
  }

  keep(path: string, text: string, value: V): void {
    if (text.length > this.longest) return;
    if (this.kept.size >= this.most) this.kept.clear();
    this.kept.set(path, { text, value });
  }

  clear(): void {
    this.kept.clear();
  }
}

/** The file's text, or undefined when it doesn't exist. A link is refused, not followed. */
export function readText(at: string, o: ReadOptions = { max: LIMITS.event }): string | undefined {
  const path = o.named ?? at;
  try {
    return readNoFollow(at, o);
  } catch (e) {
    if (e instanceof StoreError) throw e;
    if (isErrno(e, "ENOENT") || isErrno(e, "ENOTDIR")) return undefined;
    if (isErrno(e, "ELOOP")) throw new LinkRefused(path);
    throw new StoreError(`cannot read ${path}: ${(e as Error).message}`, path);
  }
}

/**
 * What is wrong with text that is not JSON, by line and column, never quoting it: V8 quotes a
 * stretch of the input in some of its messages, and a file may hold a secret.
 */
export function jsonFault(e: unknown, text: string): string {
  const message = e instanceof Error ? e.message : String(e);
  const at = /^([^"]*?)(?: in JSON)? at position (\d+)/.exec(message);
  if (at?.[1] !== undefined && at[2] !== undefined) {
    const before = text.slice(0, Number(at[2])).split("\n");
    return `${at[1]} at line ${before.length}, column ${(before.at(-1)?.length ?? 0) + 1}`;
  }
  if (/^Unexpected end of JSON input$/.test(message)) return "it ends too soon";
  return "an unexpected token, such as a word without quotes";
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

/**
 * This process's token, told apart from any other process's, of this machine or another, that has
 * or had its pid (store/lock.ts writes it in its locks); and its tag, as names carry it.
 */
export const PROCESS_TOKEN = randomUUID();

/** A token as names carry it: its first 12 hex digits. */
export function tokenTag(token: string): string {
  return token.replaceAll("-", "").slice(0, 12);
}
export const PROCESS_TAG = tokenTag(PROCESS_TOKEN);

let tmpCounter = 0;
/**
 * A temporary file's name holds its writer's pid and its token's tag, so what a process that died
 * left can be told apart, and told to be the files of the process whose holder names the same two
 * (store/lock.ts): another machine's, whose process can't be looked at from here.
 */
export function tempName(dir: string): string {
  tmpCounter += 1;
  return join(dir, `${tempPrefix(process.pid, PROCESS_TAG)}${Date.now().toString(36)}-${tmpCounter}`);
}

/** The start of the names of the temporary files a process of this pid makes (of the one of this tag, with it). */
export function tempPrefix(pid: number, tag?: string): string {
  return tag === undefined ? `.tmp-${pid}-` : `.tmp-${pid}-${tag}-`;
}

/** A temporary file's name: the pid of the process that made it, and its token's tag (earlier versions' carry none). */
export const TEMP_NAME = /^\.tmp-(\d{1,10})-(?:([0-9a-f]{12})-)?/;

/**
 * Removes the temporary files a process of this machine that is gone left in a folder (a kill
 * between writing one and linking or renaming it): those of its tag's, or where its tag is not
 * known (an earlier version's process, whose names carried none) those of its pid that carry no
 * tag; and the names starting with `also` (its lock's holder). Lists the folder: for recovery, not
 * every turn. Returns how many it removed.
 */
export function removeTempsOf(dir: string, pid: number, tag: string | undefined, also: readonly string[] = []): number {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return 0;
  }
  return removeTempsIn(names, (name) => join(dir, name), pid, tag, also);
}

/** removeTempsOf over a folder's names as listed already, each removed at `at(name)`. */
export function removeTempsIn(names: readonly string[], at: (name: string) => string, pid: number, tag: string | undefined, also: readonly string[] = []): number {
  const temps = tempPrefix(pid, tag);
  let removed = 0;
  for (const name of names) {
    const temp = name.startsWith(temps) && (tag !== undefined || TEMP_NAME.exec(name)?.[2] === undefined);
    if (!temp && !also.some((prefix) => name.startsWith(prefix))) continue;
    unlinkQuiet(at(name));
    removed++;
  }
  return removed;
}

const CREATE = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW;

/** Whether `path` is a folder (or a link to one): false for anything else, or nothing there. */
export function isFolder(path: string): boolean {
  try {
    return statSync(path).isDirectory();
  } catch {
    return false;
  }
}

/**
 * Makes a folder and those above it that are missing, each of mode 0700 exactly: the mode asked of
 * mkdir is narrowed by the umask, which may as well take the owner's own access away. Each is made
 * on its own, not by Node's recursive mkdir, which answers a failure it doesn't expect (EROFS, a
 * read-only file system; ENOSPC; EDQUOT) with the ENOENT of the folder it then failed to find.
 * With `within`, only the folders below it are made: it missing is its ENOENT.
 */
export function makeFolder(dir: string, within?: string): void {
  const missing: string[] = [];
  for (let at = dir; ; at = dirname(at)) {
    try {
      lstatSync(at);
      break;
    } catch (e) {
      if (!isErrno(e, "ENOENT") || dirname(at) === at || at === within) throw e;
      missing.push(at);
    }
  }
  for (const at of missing.reverse()) {
    try {
      makeNewFolder(at);
    } catch (e) {
      // Made meanwhile by another writer: the same.
      if (!isErrno(e, "EEXIST")) throw e;
    }
  }
}

/**
 * Makes one folder that must be new (EEXIST when something is there, so a caller can claim a
 * name), exactly 0700; its name is counted as not yet on disk (madeIn), so that the first write in
 * it flushes the folder above too.
 */
export function makeNewFolder(dir: string): void {
  mkdirSync(dir, FOLDER_MODE);
  chmodSync(dir, FOLDER_MODE);
  madeIn(dirname(dir));
}

/**
 * The folders a folder was made in (by makeFolder) whose new name is not yet flushed to disk: a
 * file's name survives the machine going down only once its folder is flushed, and the folder's
 * own name only once the folder above it is. What is written in a new folder is acknowledged only
 * after `flushMadeAbove` (or its synchronous twin) flushed these, once each. Each is kept with a
 * count of the names made in it, so that a flush under way forgets it only if no other name was
 * made in it meanwhile (another conversation's, say), which that flush may have missed.
 */
const unflushedFolders = new Map<string, number>();
/** Past this many (folders made and never written in), they are flushed at once as the next is made. */
const UNFLUSHED_MAX = 256;

function madeIn(parent: string): void {
  unflushedFolders.set(parent, (unflushedFolders.get(parent) ?? 0) + 1);
  if (unflushedFolders.size <= UNFLUSHED_MAX) return;
  // Folders made long ago and never written in: flushed as well as can be, and let go.
  for (const dir of unflushedFolders.keys()) {
    try {
      flushFolderSync(dir);
    } catch {
      // Not this call's folder: what it made is flushed by its own write.
    }
  }
  unflushedFolders.clear();
  unflushedFolders.set(parent, 1);
}

/** Forgets that `dir` needs a flush, unless a name was made in it since `made` was counted. */
function flushedAt(dir: string, made: number): void {
  if (unflushedFolders.get(dir) === made) unflushedFolders.delete(dir);
}

/**
 * How a folder is opened to be flushed: following a link, which writes nothing, and flushes the
 * folder the name went into (an agent's folder may be a link, as the person named it; a held
 * folder's name, /proc/self/fd/<fd>, is one).
 */
const FLUSH_FOLDER = constants.O_RDONLY | constants.O_DIRECTORY;

/** Flushes a folder itself (its names), by its path: one gone is nothing to flush. */
export function flushFolderSync(dir: string): void {
  let fd: number;
  try {
    fd = openSync(dir, FLUSH_FOLDER);
  } catch (e) {
    if (isErrno(e, "ENOENT")) return;
    throw e;
  }
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** The folders above `path` (itself a folder, or a file) made in and not yet flushed, each with its count. */
function unflushedAbove(path: string): [string, number][] {
  if (unflushedFolders.size === 0) return [];
  return [...unflushedFolders].filter(([dir]) => path.startsWith(dir.endsWith(sep) ? dir : `${dir}${sep}`));
}

/** Whether a folder above `path` was made in and not flushed since. */
export function madeAbove(path: string): boolean {
  return unflushedAbove(path).length > 0;
}

/**
 * Flushes the folders above `path` that a folder was made in since they were last flushed, each in
 * the thread pool, all at once: so that the names of the folders on the way to `path` are on disk.
 * `path`'s own folder is the caller's to flush.
 */
export async function flushMadeAbove(path: string): Promise<void> {
  const due = unflushedAbove(path);
  if (due.length === 0) return;
  await Promise.all(
    due.map(
      ([dir, made]) =>
        new Promise<void>((resolve, reject) =>
          open(dir, FLUSH_FOLDER, (err, fd) => {
            if (err) return isErrno(err, "ENOENT") ? resolve() : reject(err);
            fsync(fd, (e) => closeAsync(fd, () => (e ? reject(e) : resolve())));
          }),
        ).then(() => flushedAt(dir, made)),
    ),
  );
}

/** The same, on the event loop. */
export function flushMadeAboveSync(path: string): void {
  for (const [dir, made] of unflushedAbove(path)) {
    flushFolderSync(dir);
    flushedAt(dir, made);
  }
}

/** Opens a new file of exactly `mode`, whatever the umask. */
function create(path: string, mode: number): number {
  return exactly(openSync(path, CREATE, mode), path, mode);
}

/**
 * The same, off the event loop: making a file is the costly metadata call on this disk (a quarter
 * of a millisecond, up to one while a flush commits), where the event loop would stand still.
 */
function createAsync(path: string, mode: number): Promise<number> {
  return new Promise((resolve, reject) =>
    open(path, CREATE, mode, (err, fd) => {
      if (err) return reject(err);
      try {
        resolve(exactly(fd, path, mode));
      } catch (e) {
        reject(e as Error);
      }
    }),
  );
}

/** A file just made, set to exactly `mode`; one that can't be is closed and removed. */
function exactly(fd: number, path: string, mode: number): number {
  try {
    fchmodSync(fd, mode);
  } catch (e) {
    closeSync(fd);
    unlinkQuiet(path);
    throw e;
  }
  return fd;
}

/** A temp file made ahead of the text it will hold: open for writing, empty, private. */
export interface MadeFile {
  path: string;
  fd: number;
}

/**
 * Makes a temp file in `dir` ahead of its text, for writeTempAsync to write (`into`), off the event
 * loop: making a file costs this disk from a quarter of a millisecond to one, best spent while
 * nothing waits for it. With `onLoop`, on the event loop: for a turn that is the only one its
 * process runs, while it waits for the model, when the loop has nothing else to do and a call into
 * the thread pool would only wake a thread to take the core the loop runs on.
 */
export async function makeTemp(dir: string, mode = FILE_MODE, path = tempName(dir), onLoop = false): Promise<MadeFile> {
  return { path, fd: onLoop ? create(path, mode) : await createAsync(path, mode) };
}

/** Lets a temp file made ahead and never written go. */
export function dropTemp(made: MadeFile): void {
  try {
    closeSync(made.fd);
  } catch {
    // Closed already.
  }
  unlinkQuiet(made.path);
}

/** Writes a temp file in the same folder, flushed to disk unless `flush` is false, and returns its path. No temp file outlives a failure. */
export function writeTemp(dir: string, text: string, mode = FILE_MODE, flush = true): string {
  makeFolder(dir);
  const tmp = tempName(dir);
  const fd = create(tmp, mode);
  try {
    writeAll(fd, text);
    if (flush) fsyncSync(fd);
  } catch (e) {
    closeSync(fd);
    unlinkQuiet(tmp);
    throw e;
  }
  closeSync(fd);
  return tmp;
}

/**
 * The same, off the event loop: it takes from half a millisecond to several when the disk is busy,
 * and a daemon streaming many conversations must not stop for it. The file is made (a costly call
 * on this disk) and flushed in the thread pool; writing a small file is quick and done at once. It
 * flushes the data and what reading it back needs (fdatasync: the file's size), not its times.
 * With `onLoop`, the flush is made on the event loop: for a write its caller waits on with nothing
 * else under way, which the thread pool's round trip (a thread woken, then the loop) only delays.
 */
export async function writeTempAsync(dir: string, text: string, mode = FILE_MODE, into?: MadeFile, onLoop = false): Promise<string> {
  const tmp = into?.path ?? tempName(dir);
  const fd = into?.fd ?? (await createAsync(tmp, mode));
  try {
    writeAll(fd, text);
    if (onLoop) fdatasyncSync(fd);
    else await new Promise<void>((resolve, reject) => fdatasync(fd, (err) => (err ? reject(err) : resolve())));
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
 * flushed: it is made again when missing or stale. Settings and a subagent's tools are: the file's
 * data before the rename, then its folder (the new name) and any folder made on the way to it.
 */
export function replaceFile(path: string, text: string, mode = FILE_MODE, flush = true): void {
  const tmp = writeTemp(dirname(path), text, mode, flush);
  try {
    renameSync(tmp, path);
  } catch (e) {
    unlinkQuiet(tmp);
    throw e;
  }
  if (!flush) return;
  flushFolderSync(dirname(path));
  flushMadeAboveSync(path);
}

/**
 * Removes, whole, each entry of `dir` that `left` says a gone process left there (a killed import's,
 * a killed warm-up's), never through a link (a link is removed itself). One that can't be looked at
 * or removed is left for the next sweep; a folder that can't be listed has none to sweep.
 */
export function sweepFolder(dir: string, left: (name: string, path: string) => boolean): void {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return;
  }
  for (const name of names) {
    const path = join(dir, name);
    try {
      if (left(name, path)) rmSync(path, { recursive: true, force: true });
    } catch {
      // Gone meanwhile, or not ours to remove: left for the next sweep.
    }
  }
}

export function unlinkQuiet(path: string): void {
  try {
    unlinkSync(path);
  } catch {
    // already gone
  }
}
