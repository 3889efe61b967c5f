// Sessions both ways, in the portable session form (protocol/session-form.ts, man
// lnk-link-harness-session(5)): every conversation of the agent given out as it is kept, and a
// session taken in written as a new conversation whose events, read back, give the same form again.
import { createHash, randomBytes } from "node:crypto";
import { closeSync, constants, lstatSync, openSync, readFileSync, readlinkSync, renameSync, rmdirSync, rmSync } from "node:fs";
import { hostname } from "node:os";
import { join } from "node:path";
import { z } from "zod";
import {
  AssistantMessage,
  Command,
  EVENT_KINDS,
  Failure,
  SessionForm,
  ToolResult,
  UserMessage,
  StoreError,
  Thread,
  THREAD_MAX,
  THREAD_MAX_BYTES,
  describeIssues,
  type AspImported,
  type AspKind,
  type Event,
  type Numbered,
} from "../protocol/index.js";
import { EXPORTED } from "./export.js";
import { FILE_MODE, LIMITS, appendEvent, conversationIn, eachEventFrom, flushFolderSync, flushMadeAboveSync, forgetEvents, isErrno, listEventNumbers, listThreads, makeNewFolder, paths, processAlive, protoKey, readEventsFrom, readText, sweepFolder, unlinkQuiet, withoutProtoKeys, writeAll, writtenPast, type AgentRef, type ConversationPaths } from "../store/index.js";

/** The kinds an endpoint's `_asp/export` gives (`state export`'s and sessions), and `_asp/import` takes. */
export const ENDPOINT_EXPORTED = [...EXPORTED, "sessions"] as const satisfies readonly AspKind[];
export const ENDPOINT_IMPORTED = ["sessions"] as const satisfies readonly AspKind[];

/** The most text an export gives of sessions; the conversations past it are left out, and named. */
export const EXPORT_SESSIONS_BYTES = 256 * 1024 * 1024;

export interface ExportedSessions {
  sessions: SessionForm[];
  /** What was not carried, by its path from the agent's folder, and why. */
  left: LeftOut[];
}

/** What was not carried of a conversation, by its path from the agent's folder, and why. */
export interface LeftOut {
  path: string;
  why: string;
}

/** One conversation read for a session (left out: none of it could be read), and what of it was not carried. */
export interface ReadSession {
  /** Its thread, as named in chats/. */
  thread: string;
  session?: SessionForm;
  left?: LeftOut;
  /** The characters of JSON its session takes (JSON.stringify's), once read whole. */
  chars?: number;
  /** Left out: it takes more than the room it was given, and was read no further. */
  over?: boolean;
}

/**
 * A conversation of the agent in the portable form: its events read through the store (never
 * through a link), from the first until the first number missing, since a fork's `event` is its
 * position in the list. A thread that can't be read, or read whole, is left, with why. One whose
 * session takes more than `room` characters of JSON is left too, read no further than that.
 */
export function readSession(agent: AgentRef, thread: string, room = Number.POSITIVE_INFINITY): ReadSession {
  const path = `chats/${thread}`;
  if (!Thread.safeParse(thread).success) return { thread, left: { path, why: "not a thread's name" } };
  const conv = paths(agent).conversation(thread);
  try {
    const events: Event[] = [];
    // As JSON.stringify gives the session: its frame, then each event and a comma.
    let chars = JSON.stringify({ thread, events: [] }).length;
    let proto = 0;
    for (const { event } of eachEventFrom(conv)) {
      const carried = withoutProtoKeys(event);
      if (carried !== event) proto++;
      chars += JSON.stringify(carried).length + 1;
      if (chars > room) return { thread, over: true };
      events.push(carried);
    }
    const session = { thread, events };
    const lefts: string[] = [];
    // What comes after a missing number is left out, and named.
    if (writtenPast(conv, events.length)) lefts.push(`its events after number ${events.length + 1}, which is missing`);
    if (proto > 0) lefts.push(`the key "__proto__" of ${proto} event${proto === 1 ? "" : "s"}, which no State may hold`);
    return { thread, session, chars, ...(lefts.length > 0 ? { left: { path, why: lefts.join("; ") } } : {}) };
  } catch (e) {
    if (!(e instanceof StoreError)) throw e;
    return { thread, left: { path, why: e.message } };
  }
}

/** Every conversation of the agent, one at a time in the order of their threads' names, or why one can't be read. */
export function* readSessions(agent: AgentRef, room?: () => number): Generator<ReadSession> {
  let threads: string[];
  const links: string[] = [];
  const notText: string[] = [];
  try {
    threads = listThreads(
      paths(agent).chats,
      (name) => links.push(name),
      (shown) => notText.push(shown),
    );
  } catch (e) {
    if (!(e instanceof StoreError)) throw e;
    yield { thread: "", left: { path: "chats", why: e.message } };
    return;
  }
  for (const name of links) yield { thread: name, left: { path: `chats/${name}`, why: "a symbolic link, not followed" } };
  for (const shown of notText) yield { thread: shown, left: { path: `chats/${shown}`, why: "its name is not UTF-8 text: not read" } };
  for (const thread of threads) yield readSession(agent, thread, room?.());
}

/**
 * Every conversation of the agent (readSessions), at most EXPORT_SESSIONS_BYTES of them. What can't
 * be read is left out and named; so is one past the limit, read no further than it.
 */
export function exportSessions(agent: AgentRef, max = EXPORT_SESSIONS_BYTES): ExportedSessions {
  const sessions: SessionForm[] = [];
  const left: ExportedSessions["left"] = [];
  let bytes = 0;
  for (const read of readSessions(agent, () => max - bytes)) {
    if (read.over) left.push({ path: `chats/${read.thread}`, why: `past the export's limit of ${max} bytes of sessions` });
    if (read.left) left.push(read.left);
    if (!read.session) continue;
    bytes += read.chars ?? 0;
    sessions.push(read.session);
  }
  return { sessions, left };
}

/** Sessions that are not of the portable form: nothing of them is written. */
export class InvalidSessions extends Error {
  constructor(message: string) {
    super(message);
    this.name = "InvalidSessions";
  }
}

/** How many faults of the sessions an answer names. */
const FAULTS_NAMED = 10;

/** The schema an event says it is of, by its kind (and a message's role). */
function schemaOf(event: unknown): z.ZodType | undefined {
  if (typeof event !== "object" || event === null) return undefined;
  const { kind, role } = event as { kind?: unknown; role?: unknown };
  if (kind === EVENT_KINDS.message) return role === "user" ? UserMessage : role === "assistant" ? AssistantMessage : undefined;
  if (kind === EVENT_KINDS.toolResult) return ToolResult;
  if (kind === EVENT_KINDS.command) return Command;
  if (kind === EVENT_KINDS.failure) return Failure;
  return undefined;
}

/**
 * The issues named by field: an event that is of no kind's schema ("Invalid input" of the union) is
 * checked again against the schema its kind names, so the answer says which of its fields is wrong.
 */
function eventFaults(raw: unknown, error: z.ZodError): string {
  const issues = error.issues.slice(0, FAULTS_NAMED).flatMap((issue) => {
    const [i, events, j] = issue.path;
    if (issue.code !== "invalid_union" || events !== "events" || issue.path.length !== 3 || !Array.isArray(raw)) return [issue];
    const event: unknown = (raw[Number(i)] as { events?: unknown[] } | undefined)?.events?.[Number(j)];
    if (typeof event !== "object" || event === null || Array.isArray(event)) return [{ ...issue, message: "an event is a JSON object" }];
    const schema = schemaOf(event);
    if (!schema) {
      const kinds = Object.values(EVENT_KINDS).join(", ");
      return [{ ...issue, path: [...issue.path, "kind"], message: `an event's kind is one of ${kinds} (a message's role user or assistant)` }];
    }
    const again = schema.safeParse(event);
    return again.success ? [issue] : again.error.issues.map((e) => ({ ...e, path: [...issue.path, ...e.path] }));
  });
  const named = issues.slice(0, FAULTS_NAMED).map((issue) => ({ ...issue, path: ["sessions", ...issue.path] }));
  const more = error.issues.length > FAULTS_NAMED ? ` (and ${error.issues.length - FAULTS_NAMED} more)` : "";
  return `${describeIssues(new z.ZodError(named))}${more}`;
}

/**
 * Checks sessions whole before anything is written: each of the form, each event within the store's
 * limit, and no key named `__proto__` anywhere (a loose part's field may hold one): no export carries
 * it, so a conversation holding one could not be moved out again as it came in.
 */
export function checkSessions(raw: unknown): SessionForm[] {
  const proto = protoKey(raw);
  if (proto !== undefined) throw new InvalidSessions(`sessions${proto === "(top)" ? "" : `.${proto}`}: the key "__proto__" is not allowed`);
  const parsed = SessionForm.array().safeParse(raw);
  if (!parsed.success) throw new InvalidSessions(eventFaults(raw, parsed.error));
  parsed.data.forEach((s, i) =>
    s.events.forEach((e, j) => {
      const size = JSON.stringify(e).length + 1;
      if (size > LIMITS.event) throw new InvalidSessions(`sessions.${i}.events.${j}: an event of ${size} characters, over the limit of ${LIMITS.event}`);
    }),
  );
  return parsed.data;
}

/** The thread's name with `-<k>` at its end, cut to fit a thread's limits. */
export function withSuffix(thread: string, k: number): string {
  if (k === 1) return thread;
  const suffix = `-${k}`;
  const chars = Array.from(thread);
  for (let keep = chars.length; keep > 0; keep--) {
    const name = chars.slice(0, keep).join("") + suffix;
    if (Array.from(name).length <= THREAD_MAX && Buffer.byteLength(name) <= THREAD_MAX_BYTES && Thread.safeParse(name).success) return name;
  }
  return `imported${suffix}`;
}

/** Makes chats/ where missing; refuses a link or a file there. Says whether it made it. */
function ensureChats(chats: string): boolean {
  let made = true;
  try {
    makeNewFolder(chats);
  } catch (e) {
    if (!isErrno(e, "EEXIST")) throw e;
    made = false;
  }
  const st = lstatSync(chats);
  if (st.isSymbolicLink() || !st.isDirectory()) throw new StoreError(`refused: ${chats} is not a folder`, chats);
  return made;
}

/**
 * An import's claim of a thread's name for the instant it puts a session there: a file in chats/,
 * `.claim-<hash>` (32 hex digits of the SHA-256 of the name, which may be as long as a folder's name
 * can be), made only where nothing of that name is (O_EXCL), holding whose it is, `<host>-<pid>`
 * (thisHost). A name no thread can have (a leading dot): no reader lists it, and no writer names it.
 */
const CLAIM = /^\.claim-[0-9a-f]{32}$/;
const CLAIM_OWNER = /^([0-9a-f]{8})-(\d+)$/;
const CREATE_NEW = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW;

/** The path of the claim of a thread's name in chats/ (CLAIM). */
function claimOf(chats: string, name: string): string {
  return join(chats, `.claim-${createHash("sha256").update(name).digest("hex").slice(0, 32)}`);
}

/** Claims a name (claimOf): false when another import holds it now, or a killed one left it. */
function claim(path: string): boolean {
  let fd: number;
  try {
    fd = openSync(path, CREATE_NEW, FILE_MODE);
  } catch (e) {
    if (isErrno(e, "EEXIST")) return false;
    throw e;
  }
  try {
    writeAll(fd, `${thisHost()}-${process.pid}`);
  } catch (e) {
    unlinkQuiet(path);
    throw e;
  } finally {
    closeSync(fd);
  }
  return true;
}

/** Whose a claim left in chats/ is, by what it holds; of one that can't be read, or holds nothing yet, no one is known. */
function claimOwner(path: string): { host: string | undefined; pid: number } {
  let text: string | undefined;
  try {
    text = readText(path, { max: 64 });
  } catch {
    text = undefined;
  }
  const m = CLAIM_OWNER.exec(text ?? "");
  return m ? { host: m[1], pid: Number(m[2]) } : { host: undefined, pid: 0 };
}

/** Whether anything is at `path`, of any kind. */
function there(path: string): boolean {
  try {
    lstatSync(path);
    return true;
  } catch (e) {
    if (isErrno(e, "ENOENT")) return false;
    throw e;
  }
}

/**
 * Puts a session written whole in its staging folder in place, under a fresh thread: its own name
 * when free, else the first free `<name>-<k>`. Each name is claimed first (claimOf), never by making
 * its folder, which would be listed and loaded as an empty conversation, and could be written in by
 * a prompt, until the session was put over it. Under its claim, a name that is there, of any kind,
 * is passed over; one that is not is taken by a rename of the staging folder, so the conversation is
 * seen whole or not at all, or, for a session of no events (no staging folder, `staged` undefined),
 * by making its empty folder. Two imports never take one name, as each claims it before it looks.
 * A rename fails on a folder that holds anything, so no conversation with an event, a lock or any
 * file in it is ever replaced: only a folder made in the instant between the look and the rename,
 * and not yet written in, could be (a turn's, before it takes its lock), and that turn then writes
 * after the session's events, or finds its folder replaced and writes nothing.
 */
function placeThread(chats: string, staged: string | undefined, thread: string, taken: Map<string, number>): string {
  // The names an earlier session of this call found taken are not looked at again: a State of
  // thousands of sessions of one thread would look at each name before its own, a time that grows
  // as the square of their number.
  for (let k = taken.get(thread) ?? 1; ; k++) {
    const name = withSuffix(thread, k);
    const target = join(chats, name);
    taken.set(thread, k + 1);
    const claimed = claimOf(chats, name);
    if (!claim(claimed)) continue;
    try {
      if (there(target)) continue;
      if (staged === undefined) makeNewFolder(target);
      else renameSync(staged, target);
      return name;
    } catch (e) {
      // Made since it was looked at (a turn begun under that name, say): it is its maker's, and the
      // next name is tried.
      if (isErrno(e, "EEXIST") || isErrno(e, "ENOTEMPTY") || isErrno(e, "ENOTDIR")) continue;
      throw e;
    } finally {
      unlinkQuiet(claimed);
    }
  }
}

/**
 * An import's staging folder in chats/: `.import-<host>-<pid>-<random>`, a name no thread can have
 * (a leading dot), so no reader lists it and no session names it. <host> is 8 hex digits of a hash
 * of what its pid is a process of: the machine's name, its boot and the process's PID namespace.
 */
const STAGED = /^\.import-([0-9a-f]{8})-(\d+)-[0-9a-f]{16}$/;
/** How long a staging folder stays untouched before any import removes it: an import under way writes in it all along. */
const STAGED_UNTOUCHED_MS = 60 * 60_000;

/** What `path` holds or links to, or "" where there is no such thing (not Linux). */
function proc(path: string, link = false): string {
  try {
    return link ? readlinkSync(path) : readFileSync(path, "latin1").trim();
  } catch {
    return "";
  }
}

/** Whose pids a staging folder's name holds (STAGED): those of processes this one can see. */
let host: string | undefined;
export const thisHost = (): string =>
  (host ??= createHash("sha256")
    .update(`${hostname()}\n${proc("/proc/sys/kernel/random/boot_id")}\n${proc("/proc/self/ns/pid", true)}`)
    .digest("hex")
    .slice(0, 8));

/** The staging folders this process's imports are writing. */
const staging = new Set<string>();

/**
 * Removes what imports killed midway left in chats/: the staging folders and claims of processes
 * this one can see (the same machine, boot and PID namespace) that are gone, and any untouched for
 * an hour. One that can't be removed is left for the next import; a staging folder removed while its
 * import writes fails that import, never half-writes it.
 */
function sweepStaged(chats: string): void {
  sweepLeft(
    chats,
    (name, path) => {
      const m = STAGED.exec(name);
      if (m) return { host: m[1], pid: Number(m[2]) };
      return CLAIM.test(name) ? claimOwner(path) : undefined;
    },
    (dir) => staging.has(dir),
  );
}

/**
 * Removes from `dir` what an import killed midway left there: each entry `whose` names as one (the
 * host tag and pid in its name or what it holds; no tag, one an earlier version made, or one whose
 * owner is not known), of a process this one can see that is gone, or untouched for an hour, unless
 * `busy`. One that can't be removed is left for the next import.
 */
export function sweepLeft(dir: string, whose: (name: string, path: string) => { host: string | undefined; pid: number } | undefined, busy: (path: string) => boolean = () => false): void {
  const host = thisHost();
  sweepFolder(dir, (name, path) => {
    const left = whose(name, path);
    if (!left || busy(path)) return false;
    return (left.host === host && !processAlive(left.pid)) || Date.now() - lstatSync(path).mtimeMs > STAGED_UNTOUCHED_MS;
  });
}

/** How many of a thread's `-<k>` names are looked at for a conversation an earlier import made. */
const SAME_LOOKED = 64;

/**
 * The conversation an earlier import made of this session, if any: its thread, or one of its `-<k>`
 * names, whose events begin with the session's own, in order (it may have gone on since). Read
 * through the store, never through a link; one that can't be read is not it.
 */
export function importedAs(agent: AgentRef, session: SessionForm): string | undefined {
  if (session.events.length === 0) return undefined;
  const p = paths(agent);
  const want = session.events.map((e) => JSON.stringify(e));
  for (let k = 1; k <= SAME_LOOKED; k++) {
    const name = withSuffix(session.thread, k);
    const conv = p.conversation(name);
    let st;
    try {
      st = lstatSync(conv.dir);
    } catch (e) {
      // Not there, or a name too long for this folder: no earlier import made it.
      if (isErrno(e, "ENOENT") || isErrno(e, "ENOTDIR") || isErrno(e, "ENAMETOOLONG")) return undefined;
      throw e;
    }
    if (!st.isDirectory()) continue;
    let events: Numbered[];
    try {
      events = readEventsFrom(conv, 1);
    } catch (e) {
      if (e instanceof StoreError) continue;
      throw e;
    }
    if (events.length >= want.length && want.every((w, i) => JSON.stringify(events[i]?.event) === w)) return name;
  }
  return undefined;
}

/** Sessions written: what each became, and how to take them all out again. */
export interface WrittenSessions {
  imported: AspImported[];
  /** Removes every conversation written (and chats/ when it was made for them), but one written in since. */
  undo: () => void;
}

/**
 * Writes checked sessions, each as a new conversation of the agent, under a fresh thread (never one
 * that exists). Each is written whole in a staging folder of its own first, then all are put in
 * place, each by a rename under a name claimed first (placeThread): a conversation is never seen
 * half-imported or before it is, not even when the process is killed midway (what it left is
 * removed by a later import). A write that fails removes every
 * conversation this call made, and throws.
 */
export async function writeSessions(agent: AgentRef, sessions: readonly SessionForm[]): Promise<WrittenSessions> {
  const p = paths(agent);
  /** Written, not yet in place (a session of no events has no folder). */
  const staged: { session: SessionForm; conv: ConversationPaths | undefined }[] = [];
  /** In place, with how many events they were given. */
  const placed: { as: string; events: number }[] = [];
  /** The staging folders this call made: never swept by another import of this process meanwhile. */
  const mine: string[] = [];
  let chatsMade = false;
  const imported: AspImported[] = [];
  /** For each thread, the first of its names no session of this call has found taken. */
  const taken = new Map<string, number>();
  const undo = () => {
    for (const { conv } of staged) if (conv !== undefined) rmSync(conv.dir, { recursive: true, force: true });
    // One written in since it was put in place is its writer's too now: it is left as it is.
    for (const { as, events } of placed) {
      const conv = p.conversation(as);
      if (listEventNumbers(conv).length === events) rmSync(conv.dir, { recursive: true, force: true });
    }
    if (chatsMade) rmEmpty(p.chats);
    // What this process keeps of the removed conversations' events would no longer be true.
    if (staged.length + placed.length > 0) forgetEvents();
  };
  if (sessions.length === 0) return { imported, undo };
  try {
    chatsMade = ensureChats(p.chats);
    sweepStaged(p.chats);
    const host = thisHost();
    for (const session of sessions) {
      if (session.events.length === 0) {
        staged.push({ session, conv: undefined });
        continue;
      }
      const conv = conversationIn(p.chats, `.import-${host}-${process.pid}-${randomBytes(8).toString("hex")}`);
      // Its name, and chats/'s when chats/ was made too, are flushed with its first event.
      makeNewFolder(conv.dir);
      staging.add(conv.dir);
      mine.push(conv.dir);
      staged.push({ session, conv });
      for (const event of session.events) await appendEvent(conv, event);
    }
    while (staged.length > 0) {
      const { session, conv } = staged[0] as (typeof staged)[number];
      // Numbered 1 on in a folder no other writer names: any other numbers mean it was removed
      // meanwhile (taken for one a killed import left), and made again by a write after.
      if (conv !== undefined) {
        const numbers = listEventNumbers(conv);
        if (numbers.length !== session.events.length || numbers.at(-1) !== numbers.length) {
          throw new StoreError(`the folder session ${session.thread} was being written in was removed meanwhile: nothing of it is kept`, conv.dir);
        }
      }
      const as = placeThread(p.chats, conv?.dir, session.thread, taken);
      staged.shift();
      placed.push({ as, events: session.events.length });
      imported.push({ kind: "sessions", thread: session.thread, as, events: session.events.length });
    }
    // Their names in chats/ on disk, and chats/'s own where it was made.
    flushFolderSync(p.chats);
    flushMadeAboveSync(p.chats);
  } catch (e) {
    undo();
    throw e;
  } finally {
    for (const dir of mine) staging.delete(dir);
  }
  return { imported, undo };
}

/** Removes a folder if it is empty; anything else is left as it is. */
function rmEmpty(dir: string): void {
  try {
    rmdirSync(dir);
  } catch {
    // not empty, or gone
  }
}

/**
 * Writes each session as a new conversation of the agent, in order, under a fresh thread (never one
 * that exists). The sessions are checked whole first (InvalidSessions: nothing written); a write that
 * fails removes every conversation this call made, and throws.
 */
export async function importSessions(agent: AgentRef, raw: unknown): Promise<AspImported[]> {
  return (await writeSessions(agent, checkSessions(raw))).imported;
}
