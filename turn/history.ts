// Reading a conversation for a turn: from the window's mark (or the copy's last answer, if earlier)
// on, never every message, unless the mark is missing or stale, or the chat holds several
// conversations (turn/chat.ts), which is read whole at a process's first turn of it.
import { StoreError, type Command, type Event, type Numbered, type Verbosity, type WindowMark } from "../protocol/index.js";
import {
  conversationFolderId,
  eachEventFrom,
  heldFolderId,
  lastEventNumber,
  nextEventNumber,
  readEvent,
  readEventsFrom,
  readWindowFile,
  readMark,
  writeMark,
  type ConversationPaths,
} from "../store/index.js";
import { ChatLog, chatMap, conversationEvents, isBegin, isPlain, type ChatMap } from "./chat.js";
import { SizedRecent } from "./recent.js";
import { transcriptEnd } from "./transcript.js";
import { countEvent, countFromMark, eventChars, emptyCount, isTurnStart, markHolds, markOf, windowEvents, type WindowCount } from "./window.js";

/** What a conversation chose by its commands: its model and its chat's verbosity. */
export interface Chosen {
  model?: string;
  verbosity?: Verbosity;
}

/** The choices after an event: a /model:set names the model (or, naming none, goes back to the agent's). */
export function applyChoice(event: Event, chosen: Chosen): Chosen {
  if (event.kind !== "command") return chosen;
  if (event.name === "/model:set") {
    const { model: _, ...rest } = chosen;
    return event.model ? { ...rest, model: event.model } : rest;
  }
  if (event.name === "/verbosity:set" && event.verbosity !== undefined) return { ...chosen, verbosity: event.verbosity };
  return chosen;
}

/** Whether an event is one applyChoice counts: a command that chooses a model or a verbosity. */
function choosing(event: Event): boolean {
  return event.kind === "command" && (event.name === "/model:set" || event.name === "/verbosity:set");
}

function choicesOf(mark: WindowMark | undefined): Chosen {
  return {
    ...(mark?.model !== undefined ? { model: mark.model } : {}),
    ...(mark?.verbosity !== undefined ? { verbosity: mark.verbosity } : {}),
  };
}

/** A conversation as read back: its name in its chat (undefined: a chat of one) and its events. */
export interface ReadConversation {
  conversation: string | undefined;
  events: Numbered[];
}

/**
 * A conversation's events, whole: for a chat of one, every event; else the one named (left out, the
 * chat's current one) read back from the commands that began it. Undefined when it names none of the chat's.
 */
export function readConversation(conv: ConversationPaths, name?: string): ReadConversation | undefined {
  const all = readEventsFrom(conv, 1);
  if (isPlain(all)) return name === undefined || name === "main" ? { conversation: undefined, events: all } : undefined;
  const map = chatMap(all);
  const which = name ?? map.current;
  if (!map.conversations.has(which)) return undefined;
  return { conversation: which, events: conversationEvents(map, which) };
}

/**
 * What a chat's log says of its conversations, as this process read it through its event `last`:
 * each conversation's name and where it began, and of each one's own events only those that choose
 * (a model, a verbosity). Events are written once and never change, so what was read stays true of
 * the folder it was read from (`folder`, its identity): another process's events are read on from
 * `last`, and a folder made again at the path, or moved in, is read from its first event. The
 * window's mark says nothing of which conversations a chat has, so a new one doesn't make it stale.
 */
interface ChatRead {
  readonly folder: string;
  last: number;
  readonly log: ChatLog<Numbered>;
  /** About what it holds, in characters: its conversations (CONVERSATION_CHARS and their names) and its choosing commands. */
  chars: number;
}

/**
 * Held to 4096 chats and 16 Mi characters together (a chat may have thousands of forks): past
 * either, the chat used least lately is read through again when it is next asked about.
 */
const CHATS_READ = 4096;
const CHATS_READ_CHARS = 16 * 1024 * 1024;
/** About what one conversation of a chat read holds beside its name, in characters. */
const CONVERSATION_CHARS = 64;
const chatsRead = new SizedRecent<string, ChatRead>(CHATS_READ, CHATS_READ_CHARS);

/**
 * The chat's conversations as its log says now: what this process read of the folder at its path
 * before, read on from there, else its log read through; its events are read one at a time and not
 * kept. Undefined when no folder is there.
 */
function chatRead(conv: ConversationPaths): ChatRead | undefined {
  const folder = conversationFolderId(conv);
  if (folder === undefined) return undefined;
  const kept = chatsRead.get(conv.dir);
  const read: ChatRead = kept?.folder === folder ? kept : { folder, last: 0, log: new ChatLog<Numbered>((e) => (choosing(e.event) ? e : undefined)), chars: 0 };
  try {
    for (const e of eachEventFrom(conv, read.last + 1)) {
      const before = read.log.conversations.size;
      read.log.see(e);
      if (read.log.conversations.size > before) read.chars += CONVERSATION_CHARS + read.log.current.length;
      if (choosing(e.event)) read.chars += eventChars(e.event);
      read.last = e.n;
    }
  } finally {
    // What was read before an event that can't be read stays: that one is read again when asked, and says why again.
    chatsRead.set(conv.dir, read, read.chars);
  }
  return read;
}

/**
 * Whether the chat has a conversation of the name, as readConversation finds it: every chat has
 * `main`, and another begins by a command event, looked for only among the events written since this
 * process last read the chat (chatRead), never the whole chat each time.
 */
export function hasConversation(conv: ConversationPaths, name: string): boolean {
  return chatRead(conv)?.log.conversations.has(name) ?? false;
}

/**
 * What a conversation of the chat chose by its commands (left out, the chat's current one), as
 * applyChoice counts them over the events readConversation gives it (a fork's shared start
 * first); nothing, for one the chat has not. From what this process read of the chat, read on (chatRead).
 */
export function chatChoices(conv: ConversationPaths, name?: string): Chosen {
  const read = chatRead(conv);
  if (read === undefined) return {};
  return conversationEvents(read.log, name ?? read.log.current).reduce<Chosen>((c, e) => applyChoice(e.event, c), {});
}

/**
 * What the commands of conversations of one chat chose, counted up to an event: a session opened
 * again counts on from there rather than reading its conversation again. Events are written once and
 * never change, so a count stays true; another process's events are read on from it.
 */
const counted = new Map<string, { last: number; chosen: Chosen; from: string }>();
/** Past this many conversations, the counts are made again as they are asked for. */
const COUNTED_MAX = 4096;

/**
 * Keeps what a chat of one conversation chose up to its event `last`, for conversationChoices to
 * count on from; counted from its first event, or (`from`) from the window's mark it names.
 */
export function rememberChoices(conv: ConversationPaths, last: number, chosen: Chosen, from = FROM_FIRST): void {
  if (counted.size >= COUNTED_MAX) counted.clear();
  counted.set(conv.dir, { last, chosen, from });
}

/** A count made from a conversation's first event. */
const FROM_FIRST = "first";

/** What a count began from: the window's mark, when it holds (its event and the choices it carries), else the first event. */
function countedFrom(mark: WindowMark | undefined, holds: boolean): string {
  return holds && mark ? JSON.stringify([mark.event, choicesOf(mark)]) : FROM_FIRST;
}

/**
 * The conversation's choices without loading it for a turn: its last /model:set and /verbosity:set,
 * counted on from this process's last count of it, else from the window's mark (with the choices the
 * mark carries from before it), else from its first event; its events read in order, none kept, but
 * those its window's events file holds (readWindowFile), which are kept: a session opened is most
 * often prompted next, and its turn reads them. In a chat of several conversations, the current
 * one's, from what this process read of the chat (chatChoices).
 */
export function conversationChoices(conv: ConversationPaths): Chosen {
  const mark = readMark(conv);
  if (mark?.conversation === undefined) {
    const last = lastEventNumber(conv);
    const holds = markHolds(mark, mark?.budget ?? 0, mark ? readEvent(conv, mark.event) : undefined);
    // A count goes on while the mark it began from is the one there: what the mark says is the rule.
    const begun = countedFrom(mark, holds);
    const known = counted.get(conv.dir);
    let from: number;
    let chosen: Chosen;
    if (known !== undefined && known.from === begun && known.last <= last) {
      from = known.last + 1;
      chosen = known.chosen;
    } else {
      from = holds ? mark.event : 1;
      chosen = holds ? choicesOf(mark) : {};
      // The window's events, which the session's first turn reads next: from their file, and kept.
      readWindowFile(conv, from);
    }
    let plain = true;
    for (const e of from <= last ? eachEventFrom(conv, from) : []) {
      if (e.n > last) break;
      if (isBegin(e.event)) {
        plain = false;
        break;
      }
      chosen = applyChoice(e.event, chosen);
    }
    if (plain) {
      rememberChoices(conv, last, chosen, begun);
      return chosen;
    }
    counted.delete(conv.dir);
  }
  return chatChoices(conv);
}

/**
 * The /chat:resume that makes `name` the chat's current conversation, or undefined when it is already
 * (a chat of one is `main`). Throws when the chat has no conversation of that name.
 */
export function resumeEvent(conv: ConversationPaths, name: string, map: ChatMap = chatMap(readEventsFrom(conv, 1)), time = new Date()): Command | undefined {
  if (!map.conversations.has(name)) throw new StoreError(`chat ${conv.thread} has no conversation ${JSON.stringify(name.slice(0, 80))} (it has: ${[...map.conversations.keys()].join(", ")})`, conv.dir);
  if (map.current === name) return undefined;
  return { v: 1, kind: "command", name: "/chat:resume", conversation: name, time: time.toISOString() };
}

/** The conversation's model: its last /model:set, if it chose one. */
export function conversationModel(conv: ConversationPaths): string | undefined {
  return conversationChoices(conv).model;
}

/** Where counting began, with the count and the choices there: enough to count again from it. */
interface Begin {
  countFrom: number;
  count: WindowCount;
  chosen: Chosen;
}

function copyCount(count: WindowCount): WindowCount {
  return { ...count, points: count.points.slice() };
}

/**
 * What a conversation's last turn in this process left: the same as loading it again from the mark
 * that turn wrote, so the next turn goes on from it when window.json still says the same. A derived
 * cache: another process's events are read on from its last, and any other change of the mark or
 * budget, or a command that began another conversation of the chat, loads it again from disk.
 */
interface Kept {
  /** The conversation's folder it was kept of (its identity, as the lock held it): another's by its name is not it. */
  folder: string | undefined;
  mark: string;
  budget: number;
  chosen: Chosen;
  conversation: string | undefined;
  events: Numbered[];
  count: WindowCount;
  begin: Begin;
}
/**
 * The last answer the copy ends with (transcriptEnd), where a load may start reading: undefined, so
 * the load starts at the mark, where the copy is refused (a link there). The copy is derived: the
 * turn's update after the answer says why it can't be made, as a warning, never a failed turn.
 */
function copyEnd(conv: ConversationPaths): number | undefined {
  try {
    return transcriptEnd(conv);
  } catch (e) {
    if (e instanceof StoreError) return undefined;
    throw e;
  }
}

/**
 * Held to 256 conversations and to 64 Mi characters of their events (eventChars) together: a
 * process serving many conversations of long messages or images must not keep them all for good.
 */
const KEPT_CONVERSATIONS = 256;
const KEPT_CHARS = 64 * 1024 * 1024;
const kept = new SizedRecent<string, Kept>(KEPT_CONVERSATIONS, KEPT_CHARS);

/** The characters of events kept between turns, and the most kept. */
export function keptHistoryChars(): { held: number; max: number } {
  return { held: kept.held, max: KEPT_CHARS };
}

/** Forgets what turns of this process left (for measuring a fresh process). */
export function forgetHistories(): void {
  kept.clear();
  counted.clear();
  chatsRead.clear();
}

export class History {
  /** Undefined while the window is still asked (a new conversation's, `later`): see `sure`. */
  private known: number | undefined;
  private asked: Promise<number> | undefined;
  /**
   * The last answer the copy held when the history was read from disk (transcriptEnd): events up to
   * it were there then, so a read that stopped before it stopped at a number missing among them.
   */
  private copied = 0;

  private constructor(
    readonly conv: ConversationPaths,
    budget: number | Promise<number>,
    /** The events this turn holds: from where it started reading, in order. */
    readonly events: Numbered[],
    readonly count: WindowCount,
    /** What the conversation chose by its commands: its own model (its last /model:set), its chat's verbosity. */
    public chosen: Chosen,
    private readonly markBefore: string,
    private readonly begin: Begin,
    /** Its name in a chat of several conversations; undefined in a chat of one. */
    readonly conversation: string | undefined,
  ) {
    if (typeof budget === "number") this.known = budget;
    else this.asked = budget;
  }

  /** The conversation's share of the window; known once `sure` has resolved (at once, unless loaded `later`). */
  get budget(): number {
    if (this.known === undefined) throw new Error("the conversation's budget is still asked: await sure() first");
    return this.known;
  }

  /** Whether the budget is still asked. */
  get waiting(): boolean {
    return this.known === undefined;
  }

  /**
   * The budget, once the window is known. A history loaded `later` counted its events without it:
   * they hold a single turn start, whose window no budget changes; counted again all the same.
   */
  async sure(): Promise<number> {
    if (this.known !== undefined) return this.known;
    const budget = await (this.asked as Promise<number>);
    if (this.known === undefined) {
      this.known = budget;
      this.recount(this.events.slice());
    }
    return budget;
  }

  /** The conversation's own model, if it chose one. */
  get model(): string | undefined {
    return this.chosen.model;
  }

  /**
   * Loads what a turn needs. The model (its last /model:set) is found first, since the window, and so
   * the budget, depend on it; a mark made for another budget, or none, means reading every message.
   */
  static async load(conv: ConversationPaths, budgetFor: (model: string | undefined) => Promise<number>, o: { later?: boolean } = {}): Promise<History> {
    const mark = readMark(conv);
    const markText = mark ? JSON.stringify(mark) : "";
    const left = kept.get(conv.dir);
    if (left && left.mark === markText && left.folder === heldFolderId(conv)) {
      const more = readEventsFrom(conv, (left.events.at(-1)?.n ?? 0) + 1);
      // Events after a turn's own are its conversation's, unless one began another.
      if (isPlain(more)) {
        const chosen = more.reduce((c, e) => applyChoice(e.event, c), left.chosen);
        const budget = await budgetFor(chosen.model);
        if (budget === left.budget) {
          const history = new History(conv, budget, left.events.slice(), copyCount(left.count), left.chosen, markText, left.begin, left.conversation);
          for (const e of more) history.add(e, left.begin.countFrom);
          return history;
        }
      }
    }
    if (mark?.conversation === undefined) {
      // Where a load from the mark reads from: the mark, or the copy's end before it.
      const end = copyEnd(conv);
      const start = mark ? (end !== undefined && end > 0 ? Math.min(mark.event, end) : mark.event) : 1;
      readWindowFile(conv, start);
      const belongs = markHolds(mark, mark?.budget ?? 0, mark ? readEvent(conv, mark.event) : undefined);
      let events: Numbered[];
      let chosen: Chosen = {};
      if (belongs) {
        events = readEventsFrom(conv, start);
        chosen = choicesOf(mark);
        for (const e of events) if (e.n >= mark.event) chosen = applyChoice(e.event, chosen);
      } else {
        events = readEventsFrom(conv, 1);
        for (const e of events) chosen = applyChoice(e.event, chosen);
      }
      // A new conversation: nothing of it can drop, whatever the window; its turn need not wait for it.
      if (o.later && !mark && events.length === 0) {
        const asked = budgetFor(undefined);
        // Met by `sure`; until then nobody may be waiting on it.
        asked.catch(() => undefined);
        return new History(conv, asked, [], emptyCount(), {}, "", { countFrom: 1, count: emptyCount(), chosen: {} }, undefined);
      }
      if (isPlain(events)) {
        const budget = await budgetFor(chosen.model);
        const holds = belongs && mark.budget === budget;
        if (belongs && !holds) events = readEventsFrom(conv, 1);
        const count = holds ? countFromMark(mark) : emptyCount();
        const begin: Begin = { countFrom: holds ? mark.event : 1, count: copyCount(count), chosen: holds ? choicesOf(mark) : {} };
        const history = new History(conv, budget, [], count, begin.chosen, markText && holds ? markText : "", begin, undefined);
        for (const e of events) history.add(e, begin.countFrom);
        history.copied = end ?? 0;
        return history;
      }
    }
    // A chat of several conversations: its current one, read back whole and counted from its start.
    const read = readConversation(conv);
    const events = read?.events ?? [];
    const chosen = events.reduce<Chosen>((c, e) => applyChoice(e.event, c), {});
    const budget = await budgetFor(chosen.model);
    const begin: Begin = { countFrom: 1, count: emptyCount(), chosen: {} };
    const history = new History(conv, budget, [], emptyCount(), {}, "", begin, read?.conversation);
    for (const e of events) history.add(e, 1);
    return history;
  }

  /** Adds an event the turn read or wrote, counting it when it is at or past `countFrom`. */
  add(e: Numbered, countFrom = 0): void {
    // A second turn start is the first event whose window a budget could change.
    if (this.known === undefined && this.count.start !== undefined && isTurnStart(e.event)) throw new Error("a second message was counted before the conversation's budget was known: await sure() first");
    this.events.push(e);
    if (e.n < countFrom) return;
    this.chosen = applyChoice(e.event, this.chosen);
    countEvent(this.count, e.n, e.event, this.known ?? Infinity);
  }

  push(n: number, event: Event): void {
    this.add({ n, event });
  }

  /**
   * Adds an event the turn wrote at `n`. Numbers between the last it holds and `n` were taken by a
   * writer that takes no lock (setting the model) meanwhile: those events are read and counted first,
   * so the history holds every event in order, as a load from disk would.
   */
  written(n: number, event: Event): void {
    for (let k = (this.events.at(-1)?.n ?? n - 1) + 1; k < n; k++) {
      const between = readEvent(this.conv, k);
      if (between) this.push(k, between);
    }
    this.push(n, event);
  }

  /**
   * Adds an event about to be written, at the number it will take while the turn holds the
   * conversation's lock: the next one. Its write is then settled with `settle`.
   */
  ahead(event: Event): number {
    // The history was read under the lock up to the first number missing: that one, unless another
    // writer took it since, which `settle` then counts in; refused where events are after a gap.
    const n = nextEventNumber(this.conv, this.events.at(-1)?.n ?? 0, this.copied);
    this.push(n, event);
    return n;
  }

  /**
   * The event added ahead at `expected` (the last the history holds: a turn's writes are chained) was
   * written at `actual`: another writer (one that doesn't take the lock, as setting the model doesn't)
   * took the numbers between. They are read and counted in, as `written` does.
   */
  settle(expected: number, actual: number): void {
    if (expected === actual) return;
    const last = this.events.at(-1);
    if (last?.n !== expected) throw new Error(`no event was added ahead at ${expected}`);
    // Counted again without it, from where counting began; then it is added where it was written.
    this.recount(this.events.slice(0, -1));
    this.written(actual, last.event);
  }

  /** Counts `events` again from where counting began, in place of what the history holds. */
  private recount(events: Numbered[]): void {
    this.events.length = 0;
    Object.assign(this.count, copyCount(this.begin.count));
    this.chosen = this.begin.chosen;
    for (const e of events) this.add(e, this.begin.countFrom);
  }

  /** The window's events, as the model sees them. */
  window(): Numbered[] {
    return windowEvents(this.events, this.count);
  }

  /**
   * Writes window.json when the count moved its start (or the file was missing or stale), and keeps
   * what a load from it would find, for this process's next turn of the conversation. `copyEnd` is the
   * last answer the copy (transcript.md) holds now: a load reads from it, or the mark, whichever is first.
   * Returns the events such a load reads, for the window's events file (keepWindowFile); undefined
   * when they are not known, or for a chat of several conversations, which reads its own way.
   */
  saveMark(copyEnd?: number): readonly Numbered[] | undefined {
    // Never made for a budget not known: the next turn counts from the events.
    if (this.known === undefined) {
      kept.delete(this.conv.dir);
      return undefined;
    }
    const mark = markOf(this.count, this.known);
    if (!mark) {
      kept.delete(this.conv.dir);
      // With no mark, a load reads every event (a chat of several conversations reads its own way).
      return this.conversation === undefined && this.events[0]?.n === 1 ? this.events : undefined;
    }
    if (this.chosen.model !== undefined) mark.model = this.chosen.model;
    if (this.chosen.verbosity !== undefined) mark.verbosity = this.chosen.verbosity;
    if (this.conversation !== undefined) mark.conversation = this.conversation;
    const text = JSON.stringify(mark);
    if (text !== this.markBefore) writeMark(this.conv, mark);
    const from = Math.min(mark.event, copyEnd !== undefined && copyEnd > 0 ? copyEnd : mark.event);
    const first = this.events.findIndex((e) => e.n >= from);
    const events = first <= 0 ? this.events.slice() : this.events.slice(first);
    let chars = 0;
    for (const e of events) chars += eventChars(e.event);
    kept.set(
      this.conv.dir,
      {
        folder: heldFolderId(this.conv),
        mark: text,
        budget: this.known,
        chosen: this.chosen,
        conversation: this.conversation,
        events,
        count: copyCount(this.count),
        begin: { countFrom: mark.event, count: countFromMark(mark), chosen: choicesOf(mark) },
      },
      chars,
    );
    return this.conversation === undefined ? events : undefined;
  }
}
