// ACP sessions ↔ conversations: a session id is its conversation's thread, so a session lives on disk
// and any process (this one after a restart too) can take it up again.
import { randomBytes } from "node:crypto";
import { lstatSync, statSync } from "node:fs";
import { isAbsolute } from "node:path";
import type { McpServer, SessionInfo, SessionUpdate } from "@agentclientprotocol/sdk";
import { EVENT_KINDS, type Event, type Numbered, type Verbosity } from "../protocol/index.js";
import {
  ensureConversation,
  isErrno,
  lastEventNumber,
  listThreads,
  narrowToolsList,
  isThread,
  paths,
  eachEventFrom,
  readEvent,
  readMark,
  type AgentRef,
  type ConversationPaths,
} from "../store/index.js";
import { splitSessionId, sessionIdOf, isBegin, ChatLog, conversationNumbers, FIRST } from "../turn/chat.js";
import { applyChoice, chatChoices, conversationChoices, hasConversation, rememberChoices, type Chosen } from "../turn/history.js";
import type { Logger } from "./deps.js";
import { groupThread } from "./groups.js";
import { ParamsError, type NewSessionLink } from "./meta.js";
import { CallNames, callIds } from "./call-names.js";
import { CallPairs, Replayer } from "./replay.js";
import { turnKey } from "./turns.js";

/** Events a session/load reads between passes of the event loop. */
const LOAD_SLICE = 256;
/** Updates a session/load hands to the connection before it waits for them to be written. */
const LOAD_AHEAD = 256;
/** A conversation of up to this many events is read once by session/load, not twice. */
const LOAD_KEEP = 4096;
/** Past this many conversations, the names of their calls are read again as they are asked for. */
const NAMED_MAX = 4096;
/** The most call names kept of all conversations; a quarter of it, of one (one of more is read again for each turn). */
const NAMES_HELD_MAX = 262_144;
/** Past this many conversations, what session/list found of them is found again as it is asked for. */
const LISTED_MAX = 65_536;

/** The items of `items`, the event loop let go after every LOAD_SLICE of them. */
async function* slowly<T>(items: Iterable<T>): AsyncGenerator<T> {
  let read = 0;
  for (const item of items) {
    yield item;
    if (++read % LOAD_SLICE === 0) await new Promise((resolve) => setImmediate(resolve));
  }
}

/** What readView found of a chat and the conversation it read. */
interface View {
  /** The chat's last event read. */
  last: number;
  /** Whether the chat has several conversations (a begin command was read). */
  several: boolean;
  /** Whether the conversation was found: one the chat has not (any longer) chose nothing. */
  found: boolean;
  /** The numbers of its events, in order (undefined: every event of the chat). */
  shown: number[] | undefined;
  /** The chat's current conversation at its last event read. */
  current: string;
}

/**
 * Reads a conversation of a chat for `take`, event by event in order, up to `upTo`: LOAD_SLICE
 * events at a time, the event loop let go between, none kept. Once through the chat's log, `take`
 * given every event while no conversation begins; if one does, only each conversation's event
 * numbers are kept, `restart` is called, and `take` is given the conversation's own events (a
 * fork's with its source's up to the fork point, as a turn reads it) by a second pass. `named`: the
 * session's conversation (left out, the chat's current one); one the chat has not shows the chat.
 */
async function readView(conv: ConversationPaths, named: string | undefined, take: (e: Numbered) => void, restart: () => void, upTo = Number.MAX_SAFE_INTEGER): Promise<View> {
  const log = new ChatLog<number>((e) => e.n);
  let last = 0;
  for await (const e of slowly(eachEventFrom(conv, 1))) {
    if (e.n > upTo) break;
    log.see(e);
    last = e.n;
    if (!log.several) take(e);
  }
  if (!log.several) return { last, several: false, found: named === undefined || named === FIRST, shown: undefined, current: log.current };
  restart();
  const which = named ?? log.current;
  const found = log.conversations.has(which);
  const shown = found ? conversationNumbers(log, which) : undefined;
  for await (const e of slowly(eventsNumbered(conv, shown, last))) take(e);
  return { last, several: true, found, shown, current: log.current };
}

/** The events of `numbers` (undefined: every one from the first), up to `last`, none of them kept. */
function* eventsNumbered(conv: ConversationPaths, numbers: readonly number[] | undefined, last: number): Generator<Numbered> {
  if (numbers === undefined) {
    for (const e of eachEventFrom(conv, 1)) {
      if (e.n > last) return;
      yield e;
    }
    return;
  }
  for (const n of numbers) {
    if (n > last) return;
    const event = readEvent(conv, n, false);
    if (event) yield { n, event };
  }
}

/** A session id that names no conversation of the agent: answered -32002. */
export class SessionNotFound extends Error {
  constructor(readonly sessionId: string) {
    super(`no session ${JSON.stringify(sessionId.slice(0, 80))}`);
    this.name = "SessionNotFound";
  }
}

/**
 * A connection to this process, standing for it where it opens sessions (its LinkConnection): the
 * working folder and MCP servers a connection opens a session with are its own, and its prompts run
 * with them whichever other connection opened the session too.
 */
export type Opener = object;

/**
 * What a connection keeps of a session beside its conversation, in this process only: each
 * connection that opened the session holds one of its own. What is the session's (its conversation,
 * its turns) is shared by all.
 */
export interface SessionState {
  /** The session's id: its chat's thread, or `<thread>~<conversation>` for one conversation of the chat. */
  readonly id: string;
  /** The chat: its folder's name. */
  readonly thread: string;
  /** The conversation of the chat the session names; left out, the chat's current one. */
  readonly conversation?: string;
  /** The working folder the connection opened the session with: its prompts' messages come with it. */
  cwd?: string;
  /** The connection's own MCP servers, added to the conversation's tools for its prompts. */
  mcpServers: McpServer[];
  /**
   * A prompt's channel when it names none: the one named at session/new, or, for a session this
   * process didn't make, the channel of the conversation's last user message (a group's too).
   */
  channel?: string;
}

const PAGE = 100;
const TITLE_MAX = 80;
/** How far into a conversation its title (the first user message) is looked for. */
const TITLE_SEARCH = 8;
/** How far back from a conversation's newest event its last user message is looked for, for its channel. */
export const CHANNEL_SEARCH = 256;

/**
 * The form of a thread this agent makes for a session/new that names none. Its folder is made at the
 * conversation's first event, not before, so sessions opened and left empty leave nothing on disk;
 * an id of this form names an empty conversation in any process until then.
 */
const MADE_THREAD = /^\d{8}-\d{6}-[0-9a-f]{8}$/;

/** A new thread: sortable by when it began, unique by its random tail. */
function newThread(): string {
  const t = new Date().toISOString().replace(/[-:]/g, "").replace("T", "-").slice(0, 15);
  return `${t}-${randomBytes(4).toString("hex")}`;
}

/**
 * The most sessions a process keeps open for one agent, a session counted once for each connection
 * that holds it: what it holds of each (the client's working folder, its tools, the channel) is
 * small, but a client that opens sessions without end would have them all kept. Past it, the one
 * used least lately whose conversation runs no turn is forgotten, as session/close forgets it; its
 * conversation stays, and a prompt to it reads it again from disk.
 */
export const OPEN_SESSIONS_MAX = 10_000;

/** The longest working folder a session keeps, in characters: a path is at most 4096 bytes (PATH_MAX). */
export const CWD_MAX = 4096;
/** The most of MCP servers a session keeps, as JSON: enough for dozens of servers with their environments. */
export const MCP_SERVERS_MAX = 256 * 1024;
/**
 * The most the open sessions of one agent hold together, as characters of their working folders and
 * their servers' JSON (some 2.5 bytes of heap each once parsed), each connection's of a session
 * counted: OPEN_SESSIONS_MAX sessions each at MCP_SERVERS_MAX would be gigabytes, past the heap.
 * Past it, as past OPEN_SESSIONS_MAX, the sessions used least lately that run no turn are forgotten
 * (and, should that not do, those that run one: Sessions.remember).
 */
export const OPEN_HELD_MAX = 32 * 1024 * 1024;

/**
 * What a session keeps of its client's request, bounded: each connection's hold of an open session
 * keeps its working folder and its servers for as long as it is open, and a client may open thousands.
 */
function heldBounded(cwd: string, mcpServers: McpServer[]): void {
  if (cwd.length > CWD_MAX) throw new ParamsError(`cwd: ${cwd.length} characters, over the ${CWD_MAX} a working folder's path may be`);
  if (!heldCwd(cwd)) throw new ParamsError(`cwd: ${JSON.stringify(cwd.slice(0, 80))} is not an absolute path, as ACP asks a session's working folder to be`);
  const servers = JSON.stringify(mcpServers).length;
  if (servers > MCP_SERVERS_MAX) throw new ParamsError(`mcpServers: ${servers} characters of JSON, over the ${MCP_SERVERS_MAX} a session keeps`);
}

/**
 * Whether a session may hold a working folder: a client's (heldBounded), and one read back from a
 * conversation's events, written by whoever wrote the folder (an import, another harness, a hand),
 * which would otherwise be refused at every group message the session takes up, and shown by
 * session/list where ACP asks for an absolute path. ACP asks for an absolute path; one with a NUL is
 * no path at all.
 */
function heldCwd(cwd: string): boolean {
  return cwd.length <= CWD_MAX && isAbsolute(cwd) && !cwd.includes("\0");
}

/** What an open session holds, in characters (OPEN_HELD_MAX). */
const heldBy = (state: SessionState): number => (state.cwd?.length ?? 0) + (state.mcpServers.length === 0 ? 0 : JSON.stringify(state.mcpServers).length);

export class Sessions {
  /** The open sessions by id, each as every connection that opened it holds it. */
  private readonly open = new Map<string, Map<Opener, SessionState>>();
  /** Every connection's hold of a session, in the order they were last used, the least lately first, with what each holds (heldBy). */
  private readonly used = new Map<SessionState, { opener: Opener; held: number }>();
  /** What they hold together. */
  private held = 0;

  constructor(
    readonly agent: AgentRef,
    private readonly log: Logger,
    /** Whether a turn of this thread's conversation runs now (its session is never the one forgotten). */
    private readonly busy: (thread: string) => boolean = () => false,
    private readonly max = OPEN_SESSIONS_MAX,
    private readonly heldMax = OPEN_HELD_MAX,
  ) {}

  conversation(thread: string): ConversationPaths {
    return paths(this.agent).conversation(thread);
  }

  /**
   * What a session id names: a chat on disk, or one conversation of a chat (`<thread>~<name>`, when no
   * chat is named the whole id). Throws SessionNotFound when it names neither.
   */
  resolve(sessionId: string, o: { onDisk?: boolean } = {}): { thread: string; conversation?: string } {
    // One open here is what it was opened as: a chat, or one conversation of it (`<thread>~<name>`).
    const held = this.open.get(sessionId)?.values().next().value;
    if (held) return held.conversation === undefined ? { thread: held.thread } : { thread: held.thread, conversation: held.conversation };
    if (this.exists(sessionId)) return { thread: sessionId };
    // An id this agent made names an empty conversation; one to load must have something on disk.
    if (!o.onDisk && MADE_THREAD.test(sessionId)) return { thread: sessionId };
    const { thread, conversation } = splitSessionId(sessionId);
    // Looked for among the chat's events written since this process last looked, not the whole chat.
    if (conversation !== undefined && this.exists(thread) && hasConversation(this.conversation(thread), conversation)) return { thread, conversation };
    throw new SessionNotFound(sessionId);
  }

  /** What the session id names, or undefined when it names no chat and no conversation of one. */
  named(sessionId: string): { thread: string; conversation?: string } | undefined {
    try {
      return this.resolve(sessionId);
    } catch (e) {
      if (e instanceof SessionNotFound) return undefined;
      throw e;
    }
  }

  /** Whether the thread is a conversation on disk (a folder, never a link). */
  exists(thread: string): boolean {
    if (!isThread(thread)) return false;
    try {
      const st = lstatSync(this.conversation(thread).dir);
      return st.isDirectory();
    } catch (e) {
      if (isErrno(e, "ENOENT") || isErrno(e, "ENOTDIR")) return false;
      throw e;
    }
  }

  /**
   * session/new: names the conversation (a group's is `<channel>-<group id>`). The folder of one it
   * names, or of one with a narrowed tool list, is made now; of a thread this agent made, at the
   * conversation's first event.
   */
  create(opener: Opener, link: NewSessionLink, cwd: string, mcpServers: McpServer[]): SessionState {
    heldBounded(cwd, mcpServers);
    let thread = link.thread;
    if (link.group !== undefined) {
      const group = groupThread(link.channel, link.group);
      if (thread !== undefined && thread !== group) throw new ParamsError(`_meta.link: thread: a group's thread is ${group}`);
      thread = group;
    }
    const named = thread !== undefined;
    if (thread === undefined) {
      do thread = newThread();
      while (this.exists(thread) || this.open.has(thread));
    }
    const conv = this.conversation(thread);
    if (named || link.tools !== undefined) ensureConversation(conv);
    if (link.tools !== undefined) narrowToolsList(conv, link.tools);
    return this.remember(opener, { id: thread, thread, cwd, mcpServers, ...(link.channel !== undefined ? { channel: link.channel } : {}) });
  }

  /**
   * session/load and session/resume: the conversation must exist (for a load, on disk or open in this
   * process: there is nothing to show of an empty one opened elsewhere); the connection's hold of the
   * session takes its working folder and servers, and another connection's hold keeps its own.
   */
  attach(opener: Opener, sessionId: string, cwd: string, mcpServers: McpServer[], o: { onDisk?: boolean } = {}): SessionState {
    heldBounded(cwd, mcpServers);
    const named = this.resolve(sessionId, o);
    const known = this.open.get(sessionId)?.get(opener) ?? this.taken(sessionId, named);
    return this.remember(opener, { ...known, cwd, mcpServers });
  }

  /**
   * A session named by a prompt or a setting, as the connection holds it: opened by it before, or,
   * when it did not open it (or it was forgotten since), a conversation on disk or one another
   * connection opened, without any other connection's working folder or servers.
   */
  get(opener: Opener, sessionId: string): SessionState {
    const known = this.open.get(sessionId)?.get(opener);
    if (known && (this.exists(known.thread) || MADE_THREAD.test(known.thread))) return this.remember(opener, known);
    return this.remember(opener, this.taken(sessionId, this.resolve(sessionId)));
  }

  /**
   * A session as a connection that holds none of it takes it up: from its conversation's events
   * (fromEvents), with the channel another connection holds it with (the one session/new named).
   */
  private taken(id: string, named: { thread: string; conversation?: string }): SessionState {
    const found = this.fromEvents(id, named);
    const other = this.open.get(id)?.values().next().value;
    return other?.channel !== undefined ? { ...found, channel: other.channel } : found;
  }

  /**
   * A session this process didn't make, from its conversation's events: its channel and working
   * folder are those its last user message came with (read from the newest back, at most
   * CHANNEL_SEARCH events), so a group's prompts are headed with the group's channel after a restart
   * too, and a session keeps the folder an editor opened it in.
   */
  private fromEvents(id: string, named: { thread: string; conversation?: string }): SessionState {
    const { thread } = named;
    const base = { id, thread, ...(named.conversation !== undefined ? { conversation: named.conversation } : {}) };
    const conv = this.conversation(thread);
    try {
      const last = lastEventNumber(conv);
      for (let n = last; n > Math.max(0, last - CHANNEL_SEARCH); n--) {
        const event = readEvent(conv, n);
        if (event?.kind === EVENT_KINDS.message && event.role === "user") {
          return {
            ...base,
            mcpServers: [],
            ...(event.channel !== undefined ? { channel: event.channel } : {}),
            ...(event.cwd !== undefined && heldCwd(event.cwd) ? { cwd: event.cwd } : {}),
          };
        }
      }
    } catch (e) {
      // The channel and the folder are defaults: a conversation that can't be read says why at its turn.
      this.log.warn("a session's channel and folder could not be read from its events", { thread, error: (e as Error).message });
    }
    return { ...base, mcpServers: [] };
  }

  /** session/close: the connection no longer holds the session; another's hold of it stays. */
  close(opener: Opener, sessionId: string): void {
    this.resolve(sessionId);
    this.forget(opener, sessionId);
  }

  /** The connection closed: it holds none of the sessions it opened any longer, and what it held of them is let go. */
  release(opener: Opener): void {
    for (const [state, hold] of this.used) if (hold.opener === opener) this.forget(opener, state.id);
  }

  /** The connection no longer holds the session open. */
  private forget(opener: Opener, id: string): void {
    const holds = this.open.get(id);
    const state = holds?.get(opener);
    if (holds === undefined || state === undefined) return;
    holds.delete(opener);
    if (holds.size === 0) this.open.delete(id);
    this.held -= this.used.get(state)?.held ?? 0;
    this.used.delete(state);
  }

  /**
   * Keeps the connection's hold of the session as the one used last. Past the bound, forgets the holds
   * used least lately whose conversation runs no turn; and, should that not do (connections without
   * number each holding a session whose turn runs), those whose conversation runs one too: the turn
   * goes on with what it began with, and the connection's next prompt takes the session up again.
   */
  private remember(opener: Opener, state: SessionState): SessionState {
    this.forget(opener, state.id);
    const holds = this.open.get(state.id) ?? new Map<Opener, SessionState>();
    this.open.set(state.id, holds);
    holds.set(opener, state);
    const held = heldBy(state);
    this.used.set(state, { opener, held });
    this.held += held;
    for (const spare of [(kept: SessionState) => !this.busy(kept.thread), () => true]) {
      for (const [kept, hold] of this.used) {
        if (this.used.size <= this.max && this.held <= this.heldMax) return state;
        if (kept !== state && spare(kept)) this.forget(hold.opener, kept.id);
      }
    }
    return state;
  }

  /** How many sessions are kept open, each counted once for every connection that holds it. */
  get size(): number {
    return this.used.size;
  }

  /**
   * Shows the session's conversation again (session/load): each update handed to `send` in order,
   * `written` waited for after every LOAD_AHEAD of them. Its events are read LOAD_SLICE at a time,
   * the event loop let go between (the process's other sessions and agents are answered
   * meanwhile), and none kept: once through the chat's log (a chat of one is paired and counted as
   * it goes; of several, only each conversation's event numbers are kept), once more through the
   * conversation's own events for a chat of several, to pair each tool call with its result (their
   * numbers alone kept) and count its choices, then again to show them, up to the last event the
   * first pass read. A conversation of up to LOAD_KEEP events is shown from what was read before.
   * `following`: where the load follows the session's turns from (Turns.follow): a turn shows its
   * own events after `upTo`, so the load shows of those only the commands (written by others,
   * without the lock: a model chosen meanwhile); and a call after the running turn's message
   * (`from`) without its result yet is one the turn still runs, shown in progress. With no turn of
   * it here, `elsewhere` tells whether another process's runs now (holding the chat's lock): a call
   * after the conversation's last owner's message without its result yet is that turn's, in progress.
   */
  async showAgain(
    session: SessionState,
    verbosityOf: (chosen: Chosen) => Verbosity,
    send: (update: SessionUpdate) => void,
    written: () => Promise<void>,
    following?: { upTo: number; from: number | undefined },
    elsewhere: () => boolean = () => false,
  ): Promise<void> {
    const conv = this.conversation(session.thread);
    let pairs = new CallPairs();
    // What its commands chose, counted as it is read (conversationChoices would read it again).
    let chosen: Chosen = {};
    let kept: Numbered[] | undefined = [];
    /** Its last owner's message: what a turn running elsewhere answers. */
    let asked: number | undefined;
    const shown = (e: Numbered) => following === undefined || e.n <= following.upTo || e.event.kind === EVENT_KINDS.command;
    const view = await readView(
      conv,
      session.conversation,
      (e) => {
        if (!shown(e)) return;
        pairs.see(e);
        chosen = applyChoice(e.event, chosen);
        if (e.event.kind === EVENT_KINDS.message && e.event.role === "user") asked = e.n;
        if (kept && kept.length < LOAD_KEEP) kept.push(e);
        else kept = undefined;
      },
      () => {
        pairs = new CallPairs();
        chosen = {};
        kept = [];
        asked = undefined;
      },
    );
    if (!view.several && session.conversation === undefined) rememberChoices(conv, view.last, chosen);
    // Another process's turn writes the chat's current conversation: the session's, when it is that one.
    const runsElsewhere = following?.from === undefined && asked !== undefined && view.found && (session.conversation ?? view.current) === view.current && elsewhere();
    const inFlightAfter = following?.from ?? (runsElsewhere && asked !== undefined ? asked - 1 : undefined);
    const replayer = new Replayer(pairs, verbosityOf(view.found ? chosen : {}), (n) => readEvent(conv, n, false), inFlightAfter);
    let ahead = 0;
    for await (const e of slowly(kept ?? eventsNumbered(conv, view.shown, view.last))) {
      if (!shown(e)) continue;
      for (const update of replayer.updatesOf(e)) {
        send(update);
        if (++ahead >= LOAD_AHEAD) {
          await written();
          ahead = 0;
        }
      }
    }
  }

  /**
   * The names the session's conversation's tool calls were shown by, up to its event `after`
   * (CallNames): a turn's calls go on from them. Kept with the event they were counted to and
   * counted on from there while no conversation of the chat began since; else read again, as a load
   * reads the conversation (readView).
   */
  async callNames(session: SessionState, after: number): Promise<CallNames> {
    const conv = this.conversation(session.thread);
    const key = turnKey(conv.dir, session.conversation);
    // One count of a conversation at a time: a turn's may still be under way as the next one's begins.
    const before = this.callNamesBusy.get(key);
    const mine = (async () => {
      if (before) await before.catch(() => undefined);
      return this.countCallNames(conv, key, session, after);
    })();
    this.callNamesBusy.set(key, mine);
    try {
      return await mine;
    } finally {
      if (this.callNamesBusy.get(key) === mine) this.callNamesBusy.delete(key);
    }
  }

  private readonly callNamesBusy = new Map<string, Promise<CallNames>>();

  private async countCallNames(conv: ConversationPaths, key: string, session: SessionState, after: number): Promise<CallNames> {
    const known = this.callNamesKept.get(key);
    if (known !== undefined && known.last <= after) {
      // The ids of the calls made since, as a turn left them (a question, answers, results), none
      // of its events kept: counted on only while no conversation of the chat began.
      const since: string[] = [];
      let n = known.last + 1;
      for (; n <= after; n++) {
        const event = readEvent(conv, n, false);
        if (event === undefined || isBegin(event)) break;
        since.push(...callIds(event));
        if ((n - known.last) % LOAD_SLICE === 0) await new Promise((resolve) => setImmediate(resolve));
      }
      if (n > after) {
        const before = known.names.size;
        for (const id of since) known.names.name(id);
        known.last = after;
        this.callNamesHeld += known.names.size - before;
        if (known.names.size > NAMES_HELD_MAX / 4) this.forgetCallNames(key);
        else if (this.callNamesHeld > NAMES_HELD_MAX) this.forgetCallNames();
        return known.names;
      }
    }
    this.forgetCallNames(key);
    let names = new CallNames();
    const view = await readView(
      conv,
      session.conversation,
      (e) => names.see(e.event),
      () => (names = new CallNames()),
      after,
    );
    // Kept to count on only while its conversation is the chat's current one: the events after are its then.
    if ((session.conversation ?? view.current) !== view.current || !view.found) return names;
    if (this.callNamesKept.size >= NAMED_MAX || this.callNamesHeld + names.size > NAMES_HELD_MAX) this.forgetCallNames();
    if (names.size <= NAMES_HELD_MAX / 4) {
      this.callNamesKept.set(key, { last: Math.min(after, view.last), names });
      this.callNamesHeld += names.size;
    }
    return names;
  }

  /** The names each conversation's calls were shown by (callNames), by its chat's folder and the session's conversation. */
  private readonly callNamesKept = new Map<string, { last: number; names: CallNames }>();
  /** How many names those hold. */
  private callNamesHeld = 0;

  /** Forgets the kept names of one conversation, or (no key) of all. */
  private forgetCallNames(key?: string): void {
    if (key === undefined) {
      this.callNamesKept.clear();
      this.callNamesHeld = 0;
      return;
    }
    this.callNamesHeld -= this.callNamesKept.get(key)?.names.size ?? 0;
    this.callNamesKept.delete(key);
  }

  /** What the session's conversation chose by its commands (the turn's own rule). */
  choices(session: SessionState): Chosen {
    const conv = this.conversation(session.thread);
    if (session.conversation === undefined) return conversationChoices(conv);
    return chatChoices(conv, session.conversation);
  }

  /** The session's conversation's model: its last /model:set, if any. */
  model(session: SessionState): string | undefined {
    return this.choices(session).model;
  }

  /**
   * session/list: the agent's conversations, the most recently updated first, a page at a time;
   * with `cwd`, only those whose working folder it is. A conversation's folder, as the connection that
   * asks sees it: the one it holds the session open with, else the one its last message came with
   * (its session's, as the client named it), else the agent's files folder.
   */
  async list(opener: Opener, cursor: string | null | undefined, cwd?: string): Promise<{ sessions: SessionInfo[]; nextCursor?: string }> {
    const start = cursor ? Number(cursor) : 0;
    if (!Number.isSafeInteger(start) || start < 0) throw new ParamsError(`cursor: ${JSON.stringify(cursor)} is not a cursor this agent gave`);
    const files = paths(this.agent).files;
    const onDisk = listThreads(paths(this.agent).chats);
    const known = new Set(onDisk);
    // The sessions this process holds open whose conversation has no event yet, so no folder.
    const opened = [...this.open.keys()].filter((id) => MADE_THREAD.test(id) && !known.has(id));
    const found: SessionInfo[] = [];
    // A conversation at a time, the event loop let go after every LOAD_SLICE of them.
    for await (const thread of slowly([...onDisk, ...opened])) if (isThread(thread)) found.push(...(await this.listed(opener, thread, files)));
    const all = found.filter((info) => cwd === undefined || info.cwd === cwd).sort((a, b) => (b.updatedAt ?? "").localeCompare(a.updatedAt ?? ""));
    const sessions = all.slice(start, start + PAGE);
    return start + PAGE < all.length ? { sessions, nextCursor: String(start + PAGE) } : { sessions };
  }

  /**
   * A chat of several conversations (its window.json says so) lists each as a session of its own,
   * `<thread>~<name>`, titled by its first owner's message, or its name.
   */
  private async conversations(thread: string, chat: SessionInfo): Promise<SessionInfo[]> {
    const conv = this.conversation(thread);
    try {
      if (readMark(conv)?.conversation === undefined) return [];
      // Read through once, LOAD_SLICE events at a time, none kept: of each conversation, its first
      // owner's message's title and its newest event's time.
      const log = new ChatLog<number>((e) => e.n);
      const seen = new Map<string, { title?: string; newest: string }>();
      for await (const e of slowly(eachEventFrom(conv, 1))) {
        log.see(e);
        const known = seen.get(log.current);
        const title = known?.title ?? titleOf(e.event);
        seen.set(log.current, { ...(title !== undefined ? { title } : {}), newest: e.event.time });
      }
      return [...log.conversations.keys()].map((name) => {
        const own = seen.get(name);
        return {
          sessionId: sessionIdOf(thread, name),
          cwd: chat.cwd,
          title: `${name}: ${own?.title ?? "(no message yet)"}`,
          ...(own ? { updatedAt: new Date(own.newest).toISOString() } : chat.updatedAt ? { updatedAt: chat.updatedAt } : {}),
        };
      });
    } catch (e) {
      this.log.warn("session/list: a chat's conversations could not be read", { thread, error: (e as Error).message });
      return [];
    }
  }

  /** A conversation's title: its first user message's first words, found among its first events. */
  private titleOf(conv: ConversationPaths, last: number): string | undefined {
    for (let n = 1; n <= Math.min(last, TITLE_SEARCH); n++) {
      const title = titleOf(readEvent(conv, n));
      if (title) return title;
    }
    return undefined;
  }

  /**
   * The conversation's title, if it has one yet. One found is kept: its events are never rewritten,
   * so its first user message is its title for good, and a prompt no longer looks for its next event.
   */
  title(thread: string): string | undefined {
    const conv = this.conversation(thread);
    const known = this.titles.get(conv.dir);
    if (known !== undefined) return known;
    const title = this.titleOf(conv, lastEventNumber(conv));
    if (title === undefined) return undefined;
    if (this.titles.size >= LISTED_MAX) this.titles.clear();
    this.titles.set(conv.dir, title);
    return title;
  }

  /** The titles found, by conversation folder. */
  private readonly titles = new Map<string, string>();

  /**
   * What session/list shows of a conversation: the chat, and each of its conversations when it has
   * several. Kept with the conversation's last event then, and found again only once it has grown
   * (or this process holds it open): a page of a list goes through every conversation of the agent.
   */
  private async listed(opener: Opener, thread: string, files: string): Promise<SessionInfo[]> {
    const conv = this.conversation(thread);
    const held = this.open.has(thread);
    const kept = held ? undefined : this.listing.get(conv.dir);
    let last: number | undefined;
    try {
      last = lastEventNumber(conv, kept?.last);
    } catch {
      // Said by info, which reads it again.
    }
    // Whether a chat has several conversations is its window's word, which can change past its last event.
    const window = windowStamp(conv.window);
    if (kept !== undefined && kept.last === last && kept.window === window) return kept.infos;
    const chat = this.info(opener, thread, files);
    const infos = chat ? [chat, ...(await this.conversations(thread, chat))] : [];
    if (!held && last !== undefined && last > 0) {
      if (this.listing.size >= LISTED_MAX) this.listing.clear();
      this.listing.set(conv.dir, { last, window, infos });
    }
    return infos;
  }

  /** What session/list found of each conversation, by its folder, with the conversation's last event and window then. */
  private readonly listing = new Map<string, { last: number; window: string; infos: SessionInfo[] }>();

  private info(opener: Opener, thread: string, files: string): SessionInfo | undefined {
    const conv = this.conversation(thread);
    // One the connection holds open has the folder it opened it with; else its last message says it.
    const cwd = this.open.get(thread)?.get(opener)?.cwd ?? this.fromEvents(thread, { thread }).cwd ?? files;
    const info: SessionInfo = { sessionId: thread, cwd };
    try {
      const last = lastEventNumber(conv);
      const newest = last > 0 ? readEvent(conv, last) : undefined;
      // A session opened and left empty is not listed, unless this process holds it open.
      if (last === 0 && !this.open.has(thread)) return undefined;
      if (newest) info.updatedAt = new Date(newest.time).toISOString();
      else if (this.exists(thread)) info.updatedAt = statSync(conv.dir).mtime.toISOString();
      const title = this.titleOf(conv, last);
      if (title !== undefined) info.title = title;
    } catch (e) {
      // One broken conversation is reported, and the others are still listed.
      this.log.warn("session/list: a conversation could not be read", { thread, error: (e as Error).message });
    }
    return info;
  }
}

/** Which window.json a folder holds: a new one (written whole and renamed in) or none has another stamp. */
function windowStamp(path: string): string {
  try {
    const st = lstatSync(path, { bigint: true, throwIfNoEntry: false });
    return st === undefined ? "none" : `${st.ino}:${st.size}:${st.mtimeNs}`;
  } catch {
    return "unread";
  }
}

/** A title from an event: the first line of an owner's message, its spaces made single, cut. */
function titleOf(event: Event | undefined): string | undefined {
  if (event?.kind !== EVENT_KINDS.message || event.role !== "user") return undefined;
  if (event.from !== undefined && !event.from.owner) return undefined;
  const line = (event.text.trim().split("\n")[0] ?? "").replace(/\s+/g, " ").trim();
  if (line.length === 0) return undefined;
  return line.length > TITLE_MAX ? `${line.slice(0, TITLE_MAX - 1)}…` : line;
}
