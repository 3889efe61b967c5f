// A conversation's events: one file each, numbered, written once (temp file + link), never rewritten.
import { existsSync, linkSync, lstatSync, mkdirSync, readdirSync } from "node:fs";
import { dirname } from "node:path";
import { Event, StoreError, describeIssues, type Numbered } from "../protocol/index.js";
import { checkNoLinks, isErrno, readNoFollow, unlinkQuiet, writeTempAsync } from "./files.js";
import { eventNumber, type ConversationPaths } from "./paths.js";

/**
 * Parsed events by number, per conversation folder. Event files never change once written, so
 * this cache is always valid; another process's new events are found by probing the next numbers.
 */
class EventCache {
  private readonly byDir = new Map<string, Map<number, Event>>();
  /** Highest number known to exist, per folder. */
  readonly last = new Map<string, number>();
  private static readonly CONVERSATIONS = 256;

  of(dir: string): Map<number, Event> {
    let m = this.byDir.get(dir);
    if (m) {
      // Most recently used last.
      this.byDir.delete(dir);
      this.byDir.set(dir, m);
      return m;
    }
    m = new Map();
    this.byDir.set(dir, m);
    if (this.byDir.size > EventCache.CONVERSATIONS) {
      const oldest = this.byDir.keys().next().value;
      if (oldest !== undefined) {
        this.byDir.delete(oldest);
        this.last.delete(oldest);
      }
    }
    return m;
  }

  clear(): void {
    this.byDir.clear();
    this.last.clear();
  }
}
const cache = new EventCache();

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
    throw new StoreError(`event ${path} is not JSON: ${(e as Error).message}`, path);
  }
  const parsed = Event.safeParse(raw);
  if (!parsed.success) throw new StoreError(`event ${path} fails its schema: ${describeIssues(parsed.error)}`, path);
  // The schema changes nothing it accepts (no defaults, no transforms, strict objects), so the parsed
  // JSON is kept and the schema's copy left to die young: a fresh turn keeps thousands of these.
  return raw as Event;
}

/** The event numbered n, or undefined when there is none yet. */
export function readEvent(conv: ConversationPaths, n: number): Event | undefined {
  return readCached(conv, cache.of(conv.dir), n);
}

function readCached(conv: ConversationPaths, events: Map<number, Event>, n: number): Event | undefined {
  const known = events.get(n);
  if (known) return known;
  const path = conv.event(n);
  let text: string;
  try {
    text = readNoFollow(path);
  } catch (e) {
    if (isErrno(e, "ENOENT") || isErrno(e, "ENOTDIR")) return undefined;
    if (isErrno(e, "ELOOP")) throw new StoreError(`refused: event ${path} is a symbolic link`, path);
    throw new StoreError(`cannot read event ${path}: ${(e as Error).message}`, path);
  }
  readStats.files += 1;
  const event = parseEvent(path, text);
  events.set(n, event);
  if ((cache.last.get(conv.dir) ?? 0) < n) cache.last.set(conv.dir, n);
  return event;
}

/**
 * Refuses a conversation whose folder, or chats/ above it, is a symbolic link: an event file is
 * opened without following a link, but only its last component is checked by that.
 */
function checkConversationLinks(conv: ConversationPaths): void {
  // conv.dir is <agent>/chats/<thread>, and a thread name holds no separator.
  checkNoLinks(dirname(dirname(conv.dir)), conv.event(1));
}

/** Events from number `from` on, in order, until the first number not yet written. */
export function readEventsFrom(conv: ConversationPaths, from: number): Numbered[] {
  checkConversationLinks(conv);
  const out: Numbered[] = [];
  const events = cache.of(conv.dir);
  for (let n = Math.max(1, from); ; n++) {
    const event = readCached(conv, events, n);
    if (!event) return out;
    out.push({ n, event });
  }
}

/** Every event number in the folder, by listing it (grows with the conversation: for rebuilds only). */
export function listEventNumbers(conv: ConversationPaths): number[] {
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
 * The highest event number written, found from what this process knows (or `hint`) by probing
 * forward, so it costs a few lookups rather than a listing. Without either, the folder is listed once.
 */
export function lastEventNumber(conv: ConversationPaths, hint?: number): number {
  let n = Math.max(cache.last.get(conv.dir) ?? 0, hint ?? 0);
  if (n === 0 && !cache.last.has(conv.dir)) n = listEventNumbers(conv).at(-1) ?? 0;
  while (existsSync(conv.event(n + 1))) n++;
  cache.last.set(conv.dir, n);
  return n;
}

/** Makes the conversation's folder (refusing a link where it should be). */
export function ensureConversation(conv: ConversationPaths): void {
  checkConversationLinks(conv);
  mkdirSync(conv.dir, { recursive: true });
  if (lstatSync(conv.dir).isSymbolicLink()) throw new StoreError(`refused: ${conv.dir} is a symbolic link`, conv.dir);
}

/**
 * Appends an event: writes it whole to a temp file and flushes it (off the event loop), then links
 * it to the next free number. EEXIST means the number is taken by another writer: try the next.
 * Returns the number. Once it resolves, the event is on disk. `ensured`: the caller has checked the
 * conversation's folder (it exists, and is no symbolic link), as taking its lock does.
 */
export async function appendEvent(conv: ConversationPaths, event: Event, opts: { ensured?: boolean } = {}): Promise<number> {
  const checked = Event.safeParse(event);
  if (!checked.success) throw new StoreError(`refused to write an invalid event: ${describeIssues(checked.error)}`, conv.dir);
  // A turn holding the conversation's lock made sure of its folder when it took the lock.
  if (!opts.ensured) ensureConversation(conv);
  const tmp = await writeTempAsync(conv.dir, `${JSON.stringify(checked.data)}\n`);
  try {
    let n = lastEventNumber(conv) + 1;
    for (;;) {
      try {
        linkSync(tmp, conv.event(n));
        break;
      } catch (e) {
        if (!isErrno(e, "EEXIST")) throw e;
        n++;
      }
    }
    // The caller's own object, checked: what it holds (a turn's history) and what is read back by
    // number are one object, so what is made from it once (its message, its count) is made once.
    cache.of(conv.dir).set(n, event);
    cache.last.set(conv.dir, n);
    return n;
  } finally {
    unlinkQuiet(tmp);
  }
}

/** The conversations (threads) of an agent's chats folder. */
export function listThreads(chats: string): string[] {
  try {
    return readdirSync(chats, { withFileTypes: true })
      .filter((d) => d.isDirectory() && !d.name.startsWith("."))
      .map((d) => d.name)
      .sort();
  } catch (e) {
    if (isErrno(e, "ENOENT")) return [];
    throw e;
  }
}
