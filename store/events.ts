// A conversation's events: one file each, numbered, written once (temp file + link), never rewritten.
import { existsSync, linkSync, lstatSync, readdirSync, type Stats } from "node:fs";
import { basename, dirname } from "node:path";
import { isDeepStrictEqual } from "node:util";
import { Event, StoreError, describeIssues, quickEvent, quickEventText, type Numbered } from "../protocol/index.js";
import { checkNoLinks, dropTemp, foldersOnTheWay, isErrno, jsonFault, LIMITS, makeTemp, readNoFollow, unlinkQuiet, writeTempAsync, type MadeFile } from "./files.js";
import { folderIdentity, heldFolder, removeQuiet, withFolder } from "./folder.js";
import { eventName, eventNumber, type ConversationPaths } from "./paths.js";
import { spareFor } from "./spares.js";

/**
 * Parsed events by number, per conversation folder. Event files never change once written, so
 * this cache is valid while the folder is the one they were read from: each is kept with its
 * folder's identity (its device, inode and birth time), and a conversation whose folder is another now (removed
 * and made again, moved in) is forgotten (confirm). Another process's new events are found by
 * probing the next numbers.
 * It is held to a number of bytes (the events' text as read), the conversations used least lately
 * forgotten first: a replay of a long conversation must not keep the process large for good.
 */
class EventCache {
  private readonly byDir = new Map<string, { events: Map<number, Event>; bytes: number }>();
  private bytes = 0;
  /** Highest number known to exist, per folder: a number each, kept for more conversations. */
  readonly last = new Map<string, number>();
  /** Which folder (folderIdentity) what is kept of each conversation was read from, or written to. */
  private readonly folders = new Map<string, string>();
  /** The window's events file of each conversation as this process last read or wrote it (WindowFile). */
  private readonly windowFiles = new Map<string, WindowFile>();
  static readonly BYTES = 64 * 1024 * 1024;
  private static readonly LAST = 4096;

  /** Whether every event of the folder from n to the highest number known is kept (and one is), without counting it as used. */
  keepsFrom(dir: string, n: number): boolean {
    const events = this.byDir.get(dir)?.events;
    const last = this.last.get(dir);
    if (!events || last === undefined || last < n) return false;
    for (let k = n; k <= last; k++) if (!events.has(k)) return false;
    return true;
  }

  /** Whether event n of the folder is kept, without counting it as used. */
  known(dir: string, n: number): boolean {
    return this.byDir.get(dir)?.events.has(n) ?? false;
  }

  of(dir: string): Map<number, Event> {
    return this.entry(dir).events;
  }

  private entry(dir: string): { events: Map<number, Event>; bytes: number } {
    let m = this.byDir.get(dir);
    if (m) {
      // Most recently used last.
      this.byDir.delete(dir);
      this.byDir.set(dir, m);
      return m;
    }
    m = { events: new Map(), bytes: 0 };
    this.byDir.set(dir, m);
    return m;
  }

  /** Keeps an event of `bytes`; then forgets the conversations used least lately while over the bound. */
  add(dir: string, n: number, event: Event, bytes: number): void {
    // Found without moving it: a read of many events moved it once already, through of().
    const m = this.byDir.get(dir) ?? this.entry(dir);
    if (m.events.has(n)) return;
    m.events.set(n, event);
    m.bytes += bytes;
    this.bytes += bytes;
    if ((this.last.get(dir) ?? 0) < n) this.setLast(dir, n);
    if (this.bytes <= EventCache.BYTES) return;
    for (const [oldest, kept] of this.byDir) {
      if (this.bytes <= EventCache.BYTES) break;
      this.byDir.delete(oldest);
      this.bytes -= kept.bytes;
    }
  }

  /** Keeps the highest number known of a folder; past the bound, the folder known first is forgotten. */
  setLast(dir: string, n: number): void {
    EventCache.setBounded(this.last, dir, n);
  }

  /** The window's events file of a folder as this process last read or wrote it, if it did. */
  windowFile(dir: string): WindowFile | undefined {
    return this.windowFiles.get(dir);
  }

  /** Notes a folder's window's events file (undefined: none known), as noted last; past the bound, the one noted first is forgotten. */
  setWindowFile(dir: string, file: WindowFile | undefined): void {
    this.windowFiles.delete(dir);
    if (file) EventCache.setBounded(this.windowFiles, dir, file);
  }

  /** Sets a folder's value in one of the maps of a value a folder: past LAST folders, the one set first is forgotten. */
  private static setBounded<V>(map: Map<string, V>, dir: string, value: V): void {
    if (!map.has(dir) && map.size >= EventCache.LAST) {
      const oldest = map.keys().next().value;
      if (oldest !== undefined) map.delete(oldest);
    }
    map.set(dir, value);
  }

  /**
   * Notes that the conversation named by `dir` is the folder `id` now (undefined: none is there):
   * what is kept of another folder by that name is forgotten. A lookup at each read of many, or of
   * one under a lock: no call to the system.
   */
  confirm(dir: string, id: string | undefined): void {
    if (this.folders.get(dir) === id) return;
    this.forget(dir);
    if (id === undefined) return;
    if (this.folders.size >= EventCache.LAST) {
      // Whatever is kept of the folder known first is forgotten with its identity.
      const oldest = this.folders.keys().next().value;
      if (oldest !== undefined) this.forget(oldest);
    }
    this.folders.set(dir, id);
  }

  private forget(dir: string): void {
    const m = this.byDir.get(dir);
    if (m) {
      this.byDir.delete(dir);
      this.bytes -= m.bytes;
    }
    this.last.delete(dir);
    this.folders.delete(dir);
    this.windowFiles.delete(dir);
  }

  get held(): number {
    return this.bytes;
  }

  clear(): void {
    this.byDir.clear();
    this.last.clear();
    this.folders.clear();
    this.windowFiles.clear();
    this.bytes = 0;
  }
}
const cache = new EventCache();

/** The bytes of events this process keeps parsed, and the most it keeps. */
export function cachedEventBytes(): { held: number; max: number } {
  return { held: cache.held, max: EventCache.BYTES };
}

/** Forgets what this process read (for measuring a fresh process). */
export function forgetEvents(): void {
  cache.clear();
}

/** Counts every file read, so a test can assert a turn's reads don't grow with the conversation. */
export const readStats = { files: 0 };

function parseEvent(path: string, text: string): Event {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (e) {
    // Never V8's own words, which quote the text: a file linked in from elsewhere may hold a secret.
    throw new StoreError(`event ${path} is not JSON: ${jsonFault(e, text)}`, path);
  }
  return checkedEvent(path, raw);
}

/** A parsed event's JSON held to the schema of events. */
function checkedEvent(path: string, raw: unknown): Event {
  // The plainest messages are checked by quickEvent, the rest (and any it doubts) by the schema.
  if (quickEvent(raw)) return raw as Event;
  const parsed = Event.safeParse(raw);
  if (!parsed.success) throw new StoreError(`event ${path} fails its schema: ${describeIssues(parsed.error)}`, path);
  // The schema changes nothing it accepts (no defaults, no transforms, strict objects), so the parsed
  // JSON is kept and the schema's copy left to die young: a fresh turn keeps thousands of these.
  return raw as Event;
}

/** The event numbered n, or undefined when there is none yet. `keep: false`: read once, for a reader of a whole conversation, and not kept. */
export function readEvent(conv: ConversationPaths, n: number, keep = true): Event | undefined {
  // Under a lock, checked to be of the folder it holds; outside one, a kept event is taken once a look
  // at the folder says it is the one the event was read from (lookAtFolder).
  const held = heldChecked(conv);
  if (heldFolder(conv) === undefined && cache.known(conv.dir, n)) lookAtFolder(conv);
  const events = cache.of(conv.dir);
  const known = events.get(n);
  if (known) return known;
  return readCached(conv, held ?? pathBase(conv), events, n, keep);
}

/**
 * One look at a conversation's folder, by its path (one lstat, no check for links: nothing is read
 * through it): what is kept of another folder by that name, or of one that is gone, is forgotten.
 */
function lookAtFolder(conv: ConversationPaths): void {
  cache.confirm(conv.dir, conversationFolderId(conv));
}

/**
 * Which folder (folderIdentity) is at the conversation's path now, by one look at it: undefined where
 * none is. What a process keeps of a conversation is kept with it, and holds only while it is the same.
 */
export function conversationFolderId(conv: ConversationPaths): string | undefined {
  const st = lstatSync(conv.dir, { throwIfNoEntry: false });
  return st?.isDirectory() ? folderIdentity(st) : undefined;
}

/**
 * The base of the folder a lock of this process holds (heldFolder), where it is named by its
 * descriptor; what is kept of the conversation confirmed to be of that folder.
 */
function heldChecked(conv: ConversationPaths): string | undefined {
  const folder = heldFolder(conv);
  if (folder === undefined) return undefined;
  cache.confirm(conv.dir, folder.identity);
  return folder.base !== conv.dir ? folder.base : undefined;
}

/**
 * Where a conversation's files are opened from (`<base>/<name>`), for a read of one or a few: the
 * folder its lock holds, through the descriptor that holds it (heldChecked: checked as it was opened);
 * else its path, checked first for links (checkConversationLinks). A read of many goes by the path, checked once
 * (pathBase): a name through /proc costs the kernel more each time than the check costs once, some
 * 0.8 us a file, 1.6 ms of a fresh turn's 2,000.
 */
export function readBase(conv: ConversationPaths): string {
  return heldChecked(conv) ?? pathBase(conv);
}

/**
 * The conversation's path, checked for links first (checkConversationLinks): where a read of many
 * files opens them. The last look of that check says which folder is there: what is kept of
 * another by that name is forgotten.
 */
function pathBase(conv: ConversationPaths): string {
  const st = foldersOnTheWay(dirname(dirname(conv.dir)), conv.event(1));
  cache.confirm(conv.dir, st ? folderIdentity(st) : undefined);
  return conv.dir;
}

function readCached(conv: ConversationPaths, base: string, events: Map<number, Event>, n: number, keep = true): Event | undefined {
  const known = events.get(n);
  if (known) return known;
  const path = conv.event(n);
  let text: string;
  try {
    text = readNoFollow(`${base}/${eventName(n)}`, { max: LIMITS.event, named: path });
  } catch (e) {
    if (e instanceof StoreError) throw e;
    if (isErrno(e, "ENOENT") || isErrno(e, "ENOTDIR")) return undefined;
    if (isErrno(e, "ELOOP")) throw new StoreError(`refused: event ${path} is a symbolic link`, path);
    throw new StoreError(`cannot read event ${path}: ${(e as Error).message}`, path);
  }
  readStats.files += 1;
  const event = parseEvent(path, text);
  if (keep) cache.add(conv.dir, n, event, text.length);
  return event;
}

/**
 * Refuses a conversation whose folder, or chats/ above it, is a symbolic link: an event file is
 * opened without following a link, but only its last component is checked by that.
 */
export function checkConversationLinks(conv: ConversationPaths): void {
  // conv.dir is <agent>/chats/<thread>, and a thread name holds no separator.
  checkNoLinks(dirname(dirname(conv.dir)), conv.event(1));
}

/** Events from number `from` on, in order, until the first number not yet written. */
export function readEventsFrom(conv: ConversationPaths, from: number): Numbered[] {
  // Past the last number known (a turn's look for events written since its last): one or a few,
  // and most often none, which a look says without the error a failed open makes (some 3 us).
  const held = heldChecked(conv);
  const past = from > (cache.last.get(conv.dir) ?? 0);
  const base = past ? (held ?? pathBase(conv)) : pathBase(conv);
  if (past && lstatSync(`${base}/${eventName(Math.max(1, from))}`, { throwIfNoEntry: false }) === undefined) return [];
  const out: Numbered[] = [];
  const events = cache.of(conv.dir);
  for (let n = Math.max(1, from); ; n++) {
    const event = readCached(conv, base, events, n);
    if (!event) return out;
    out.push({ n, event });
  }
}

/**
 * A conversation's window's events file (window.jsonl), derived: the events a load of its window reads,
 * `[n,<event>]` a line, numbered one after another, so that a process new to the conversation reads
 * them from one file rather than one file each (2,000 files: 4 ms open, read and close, where one
 * file of them all takes 0.3). What this process knows of it, as it last read or wrote it: which file
 * (its inode) of what size, holding events `start` to `end`. A writer adds to the file it knows only.
 */
export interface WindowFile {
  readonly ino: number;
  readonly size: number;
  readonly start: number;
  readonly end: number;
  /** None was written: the events from `start` were over its limit. */
  readonly over?: boolean;
}

/** The most bytes of a window's events file read, or written: past it the window is read a file an event. */
export const WINDOW_FILE_MAX = 256 * 1024 * 1024;

/** Its name in the conversation's folder. */
export const WINDOW_FILE = "window.jsonl";

/** The window's events file of a conversation as this process last read or wrote it, if it did. */
export function knownWindowFile(conv: ConversationPaths): WindowFile | undefined {
  return cache.windowFile(conv.dir);
}

/** Notes the window's events file of a conversation as its writer left it (undefined: none it knows). */
export function noteWindowFile(conv: ConversationPaths, file: WindowFile | undefined): void {
  cache.setWindowFile(conv.dir, file);
}

/** One line of the window's events file. */
export function windowLine(n: number, event: Event): string {
  return `[${n},${JSON.stringify(event)}]\n`;
}

/**
 * Reads the window's events file of a conversation whose window this process does not keep (a new
 * process, a turn on another machine), from event `from` on, into what the process keeps of it: the turn's
 * read of its window then finds them kept, and reads from their files only the events after them.
 * Derived, and read only as far as it holds: a file missing, refused (a link, not a regular file,
 * two names, over WINDOW_FILE_MAX) or that does not begin at or before `from` is not read at all;
 * one is read up to its first line that is not the next event, or not of the schema (a line cut
 * short, a line of another conversation). The events it holds first and last are the same as their
 * files, read to check (events are never rewritten: what is between them is theirs); when either is
 * not, none of it is kept. The next turn's writer makes it again unless it was read whole.
 */
export function readWindowFile(conv: ConversationPaths, from: number): void {
  const held = heldChecked(conv);
  const base = held ?? pathBase(conv);
  // Every event from the first to the last known kept: read already. Some only are not enough (the
  // mark's event, a session's title, the last event looked at for a load).
  if (cache.keepsFrom(conv.dir, from)) return;
  // Refused (a link, not a regular file, two names, over the limit) or missing: not read.
  let st: Stats | undefined;
  let text: string;
  try {
    text = readNoFollow(`${base}/${WINDOW_FILE}`, { max: WINDOW_FILE_MAX, single: true, named: conv.windowEvents, onStat: (s) => (st = s) });
  } catch {
    return;
  }
  if (st === undefined) return;
  readStats.files += 1;
  const read = windowLines(text, from, conv.windowEvents);
  if (!read) return;
  const { lines, whole } = read;
  const first = lines[0];
  const last = lines.at(-1);
  if (!first || !last || first.n !== from) return;
  const events = cache.of(conv.dir);
  for (const end of first === last ? [first] : [first, last]) {
    let onDisk: Event | undefined;
    try {
      onDisk = readCached(conv, base, events, end.n);
    } catch {
      return;
    }
    // The same JSON, whatever the order of its keys (the file's is the schema's, the line's its writer's object's).
    if (!onDisk || !isDeepStrictEqual(onDisk, end.event)) return;
  }
  for (const line of lines) cache.add(conv.dir, line.n, line.event, line.chars);
  noteWindowFile(conv, whole ? { ino: st.ino, size: st.size, start: read.start, end: last.n } : undefined);
}

/**
 * The lines of a window's events file from event `from` on: each the next number, and an event of
 * the schema; those before `from` are passed over unparsed. Undefined when it begins after `from`.
 * `whole`: every line was read so, to the file's end (a writer may add to it).
 */
export function windowLines(text: string, from: number, path: string): { start: number; lines: { n: number; event: Event; chars: number }[]; whole: boolean } | undefined {
  const lines: { n: number; event: Event; chars: number }[] = [];
  let start = 0;
  let next = 0;
  let at = 0;
  while (at < text.length) {
    const end = text.indexOf("\n", at);
    // `[`, the number, `,`, the event, `]`.
    const comma = text.indexOf(",", at);
    if (end < 0 || text.charCodeAt(at) !== 0x5b || comma < 0 || comma > end || comma - at > 17 || text.charCodeAt(end - 1) !== 0x5d) break;
    const digits = text.slice(at + 1, comma);
    const n = Number(digits);
    if (!/^[1-9][0-9]*$/.test(digits) || !Number.isSafeInteger(n)) break;
    if (next === 0) {
      if (n > from) return undefined;
      start = n;
    } else if (n !== next) break;
    if (n >= from) {
      let event: Event;
      try {
        event = checkedEvent(path, JSON.parse(text.slice(comma + 1, end - 1)));
      } catch {
        break;
      }
      lines.push({ n, event, chars: end - comma - 1 });
    }
    next = n + 1;
    at = end + 1;
  }
  if (next === 0) return undefined;
  return { start, lines, whole: at === text.length };
}

/**
 * Events from number `from` on, one at a time, until the first number not yet written: what a
 * caller does not keep is not held here either. Those not kept already are read and not kept, so a
 * reader of every conversation (an export) neither holds them nor makes the process forget the
 * events of the conversations its turns read.
 */
export function* eachEventFrom(conv: ConversationPaths, from = 1): Generator<Numbered> {
  const base = pathBase(conv);
  const events = cache.of(conv.dir);
  for (let n = Math.max(1, from); ; n++) {
    const event = readCached(conv, base, events, n, false);
    if (!event) return;
    yield { n, event };
  }
}

/**
 * Whether an event is written past number `n`: when the reader stopped at n + 1, missing (removed by
 * hand), what comes after it is left out, and said so. By listing the folder: for whole reads only.
 */
export function writtenPast(conv: ConversationPaths, n: number): boolean {
  return (listEventNumbers(conv).at(-1) ?? 0) > n;
}

/** Every event number in the folder, by listing it (grows with the conversation: for rebuilds only). */
export function listEventNumbers(conv: ConversationPaths): number[] {
  checkConversationLinks(conv);
  let names: string[];
  try {
    names = readdirSync(conv.dir);
  } catch (e) {
    if (isErrno(e, "ENOENT")) return [];
    throw e;
  }
  const numbers: number[] = [];
  for (const name of names) {
    const n = eventNumber(name);
    if (n !== undefined) numbers.push(n);
  }
  return numbers.sort((a, b) => a - b);
}

/**
 * The highest event number this process knows written, without a look at the folder: what a writer
 * under the conversation's lock takes as the last (a number taken since by a writer without the lock
 * is passed over as its link says EEXIST). Else found (lastEventNumber).
 */
export function knownLastEventNumber(conv: ConversationPaths): number {
  return cache.last.get(conv.dir) ?? lastEventNumber(conv);
}

/**
 * The highest event number written, found from what this process knows (or `hint`) by probing
 * forward, so it costs a few lookups rather than a listing. Without either, the folder is listed once.
 */
export function lastEventNumber(conv: ConversationPaths, hint?: number): number {
  let n = Math.max(cache.last.get(conv.dir) ?? 0, hint ?? 0);
  if (n === 0 && !cache.last.has(conv.dir)) n = listEventNumbers(conv).at(-1) ?? 0;
  while (existsSync(conv.event(n + 1))) n++;
  cache.setLast(conv.dir, n);
  return n;
}

/**
 * A conversation with a number missing among its events and events written after it (a file removed
 * by hand): its readers stop at the missing one, so a writer taking the numbers after the last one
 * written would write where none reads. Nothing is written until the gap is mended.
 */
export class EventGapError extends StoreError {
  constructor(conv: ConversationPaths, missing: number) {
    super(
      `conversation ${conv.thread}: event ${missing} (${conv.event(missing)}) is missing, and events after it are there: nothing is written to it until that file is put back or those after it are moved away`,
      conv.event(missing),
    );
    this.name = "EventGapError";
  }
}

/**
 * Throws EventGapError when a number is missing among the conversation's events with events after
 * it: for a writer that read none of them (a choice written with no lock), one look at the folder.
 */
export function checkNoGap(conv: ConversationPaths): void {
  const numbers = listEventNumbers(conv);
  for (let i = 0; i < numbers.length; i++) if (numbers[i] !== i + 1) throw new EventGapError(conv, i + 1);
}

/**
 * The number a writer that read a conversation under its lock through event `readThrough` (the
 * first missing number after it) takes next: the one after the last known written. Higher than
 * `readThrough + 1` only when events were written since by a writer that takes no lock (then that
 * one is there), or when a number is missing among them (EventGapError). One look at that file,
 * only then: the steady turn's next number is the one after its reads, at no cost. `seen`: an event
 * a derived file saw there, past which a process that read only from a mark may know of none.
 */
export function nextEventNumber(conv: ConversationPaths, readThrough: number, seen = 0): number {
  let last = knownLastEventNumber(conv);
  // Events up to `seen` were there (a derived file saw them: the copy's last answer), and the read
  // stopped before: unless this process knows of events past it, the folder says (one listing; a
  // derived file from elsewhere that saw events this folder never had is passed over).
  if (seen > readThrough && last <= readThrough) {
    last = Math.max(last, listEventNumbers(conv).at(-1) ?? 0);
    cache.setLast(conv.dir, last);
  }
  if (last > readThrough && lstatSync(`${readBase(conv)}/${eventName(readThrough + 1)}`, { throwIfNoEntry: false }) === undefined) {
    throw new EventGapError(conv, readThrough + 1);
  }
  return Math.max(last, readThrough) + 1;
}

/** Makes the conversation's folder, 0700 (refusing a link where it, or chats/, should be). */
export function ensureConversation(conv: ConversationPaths): void {
  withFolder(conv, () => undefined);
}

/** A file made ahead for an event, in the folder a lock holds: written by beginEvent, or dropped. */
export interface PreparedEvent {
  readonly made: MadeFile;
}

/**
 * Makes the file of an event to come ahead of it (while the model answers, say), in the folder the
 * caller's lock holds, or takes a spare made for it (store/spares.ts); undefined when no lock holds
 * it (a folder opened for this call alone is closed after it, and its files' names with it). Written
 * by beginEvent (`into`), or let go by dropEvent; made off the event loop, so it is named through the
 * held folder until it is settled: the caller waits for it before its lock is let go.
 */
export async function prepareEvent(conv: ConversationPaths): Promise<PreparedEvent | undefined> {
  return withFolder(conv, async (folder) => (folder.held ? { made: (await spareFor(conv, folder)) ?? (await makeTemp(folder.base, undefined, undefined, folder.alone)) } : undefined), { make: false });
}

/** Lets a file made ahead for an event that never came go. */
export function dropEvent(prepared: PreparedEvent): void {
  dropTemp(prepared.made);
}

/** An event whose file is being written and flushed: linked to its number by `link`, or let go. */
export interface BegunEvent {
  /** Links it to the next free number once its file is flushed; resolves with the number. */
  link(): Promise<number>;
  /** Removes its file, never linked (a write before it failed). */
  abandon(): Promise<void>;
}

/** How an event's write is begun (beginEvent). */
export interface BeginOptions {
  /** Its writer waits for it with nothing else to do (a turn's answer). */
  waited?: boolean;
  /** Its file is begun once the event loop comes round (a turn's question, after its request). */
  later?: boolean;
}

/**
 * Begins an event: checks it, then writes it whole to a temp file and flushes it (off the event
 * loop), which may run while the events before it are still being flushed; `link` then links it to
 * the next free number (EEXIST means the number is taken by another writer: the next is tried).
 * Written through the conversation's folder as checked when opened (the one a turn holds, with its
 * lock), and the folder and the lock are checked again right before the link: nothing is written
 * outside, or once the lock is lost. Bad input throws at once, and writes nothing. `waited`: its
 * writer waits for it with nothing else to do (a turn's answer), so through the only folder this
 * process holds it is flushed on the event loop (ConversationFolder.alone). `later`: its file is begun
 * once the event loop comes round, after what the caller does at once (a turn's question, after its
 * request is on its way); checked, and in its place among the writes, from now.
 */
export function beginEvent(conv: ConversationPaths, event: Event, into?: PreparedEvent, o: BeginOptions = {}): BegunEvent {
  const { written, chars } = begin(conv, event, into, o);
  return {
    link: async () => (await linkBegun(conv, event, written, chars)) as number,
    abandon: async () => {
      const name = await written.catch(() => undefined);
      if (name !== undefined) removeQuiet(conv, name);
    },
  };
}

/** Checks an event and begins its file's write and flush: its name in the folder once flushed, and its size as read back. */
function begin(conv: ConversationPaths, event: Event, into: PreparedEvent | undefined, o: BeginOptions): { written: Promise<string>; chars: number } {
  // The plainest messages as quickEventText makes them (the same bytes), the rest through the schema.
  let line = quickEventText(event);
  if (line === undefined) {
    const checked = Event.safeParse(event);
    if (!checked.success) throw new StoreError(`refused to write an invalid event: ${describeIssues(checked.error)}`, conv.dir);
    line = JSON.stringify(checked.data);
  }
  const text = `${line}\n`;
  // In bytes, as it is read back (a character is up to three): one written over the limit could never be read.
  if (text.length * 3 > LIMITS.event && Buffer.byteLength(text) > LIMITS.event) {
    throw new StoreError(`refused to write an event of ${Buffer.byteLength(text)} bytes: over the limit of ${LIMITS.event}`, conv.dir);
  }
  // By its name in the folder: a folder opened for this write alone is closed once it is written.
  // A file made ahead is the held folder's (prepareEvent), which this write goes through too.
  // One its writer waits on at once (a turn's answer), through the only folder held, is flushed on the event loop.
  // Into a spare, under a lock, when none was made for it. One begun `later` is written once the
  // loop comes round even into a spare: its write, and its flush handed to the thread pool, went
  // ahead of the request written meanwhile (at the SDK's next tick), by 0.03 ms.
  const written = withFolder(conv, async (folder) => {
    const spare = into === undefined && folder.held ? await spareFor(conv, folder) : undefined;
    if (o.later) await new Promise((resolve) => setImmediate(resolve));
    return basename(await writeTempAsync(folder.base, text, undefined, into?.made ?? spare, o.waited === true && folder.alone));
  });
  written.catch(() => undefined);
  return { written, chars: text.length };
}

/** What an event may be linked after (appendEventAfter): the last number its writer read, and which events written since it may follow. */
interface LinkedAfter {
  seen: number;
  passes: (event: Event) => boolean;
}

/** Links a begun event's flushed file to the next free number; undefined when `after` refuses an event written since. */
function linkBegun(conv: ConversationPaths, event: Event, written: Promise<string>, chars: number, after?: LinkedAfter): Promise<number | undefined> {
  return withFolder(conv, async (folder) => {
    const tmp = folder.at(await written);
    try {
      folder.check();
      let n = (after ? after.seen : knownLastEventNumber(conv)) + 1;
      for (;;) {
        try {
          linkSync(tmp, folder.at(eventName(n)));
          break;
        } catch (e) {
          if (!isErrno(e, "EEXIST")) throw e;
          // Taken by another writer: whole, as every event is once linked.
          if (after) {
            let taken: Event | undefined;
            try {
              taken = readEvent(conv, n);
            } catch {
              // One that can't be read can't be passed: its writer reads again, as it would.
              return undefined;
            }
            if (taken && !after.passes(taken)) return undefined;
          }
          n++;
        }
      }
      folder.linked();
      // Outside a lock, the name is flushed now; under one, once, when the lock's work is done.
      if (!folder.held) await folder.flush();
      // The caller's own object, checked: what it holds (a turn's history) and what is read back by
      // number are one object, so what is made from it once (its message, its count) is made once.
      cache.confirm(conv.dir, folder.identity);
      cache.add(conv.dir, n, event, chars);
      return n;
    } finally {
      unlinkQuiet(tmp);
    }
  });
}

/**
 * Appends an event (see beginEvent): once it resolves, the event is on disk, and its name too
 * unless a lock holds the folder (then the lock's work flushes it once).
 */
export async function appendEvent(conv: ConversationPaths, event: Event): Promise<number> {
  return beginEvent(conv, event).link();
}

/**
 * Appends an event with no lock, right after event `seen` (the last its writer read) or after
 * events written since that `passes` lets it follow; undefined, and nothing written, when one of
 * them does not: what the writer read no longer holds, and it must read again (under a lock).
 */
export async function appendEventAfter(conv: ConversationPaths, event: Event, seen: number, passes: (event: Event) => boolean): Promise<number | undefined> {
  const { written, chars } = begin(conv, event, undefined, {});
  return linkBegun(conv, event, written, chars, { seen, passes });
}

/**
 * The conversations (threads) of an agent's chats folder. A folder whose name is not UTF-8 text is
 * left out, and named to `onNotText`, its bytes that are not plain ASCII escaped (\xff): read as a string,
 * its name would be another name, of another path or none.
 */
export function listThreads(chats: string, onLink?: (name: string) => void, onNotText?: (shown: string) => void): string[] {
  try {
    if (lstatSync(chats).isSymbolicLink()) throw new StoreError(`refused: ${chats} is a symbolic link`, chats);
    const threads: string[] = [];
    for (const d of readdirSync(chats, { withFileTypes: true, encoding: "buffer" })) {
      if (d.name[0] === 46 || !(d.isDirectory() || d.isSymbolicLink())) continue;
      const name = d.name.toString("utf8");
      if (!Buffer.from(name, "utf8").equals(d.name)) onNotText?.(escapedName(d.name));
      else if (d.isSymbolicLink()) onLink?.(name);
      else threads.push(name);
    }
    return threads.sort();
  } catch (e) {
    if (isErrno(e, "ENOENT")) return [];
    if (isErrno(e, "ENOTDIR")) throw new StoreError(`refused: ${chats} is not a folder`, chats);
    throw e;
  }
}

/** A name's bytes as text to show: printable ASCII as it is, any other byte (and a backslash) as \xHH. */
function escapedName(name: Buffer): string {
  let out = "";
  for (const b of name) out += b >= 0x20 && b < 0x7f && b !== 0x5c ? String.fromCharCode(b) : `\\x${b.toString(16).padStart(2, "0")}`;
  return out;
}
