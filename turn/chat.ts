// A chat's conversations, read back from the command events that began them (spec: commands.txt,
// "Why do a fork and a resume copy nothing?"). A chat keeps one log; /chat:create, /chat:fork and
// /chat:resume say which conversation the events after them belong to, and a fork's shared start is
// its source's events up to the fork point, the same events on disk.
import type { Command, Event, Numbered } from "../protocol/index.js";

/** The name of a chat's first conversation, the one before any /chat:create or /chat:fork. */
export const FIRST = "main";

export interface ChatConversation {
  readonly name: string;
  /** The event that began it (0 for the first). */
  readonly begin: number;
  /** A fork's source and the last event they share. */
  readonly source?: string;
  readonly at?: number;
}

/** A chat's conversations, each with its own events as some `T`. */
export interface ChatMapOf<T> {
  /** The conversation the chat's next message belongs to. */
  readonly current: string;
  /** Every conversation of the chat, in the order they began. */
  readonly conversations: ReadonlyMap<string, ChatConversation>;
  /** Each conversation's own events (those written while it was the current one). */
  readonly own: ReadonlyMap<string, readonly T[]>;
}

/** A chat's conversations, each with its own events. */
export type ChatMap = ChatMapOf<Numbered>;

/** Whether an event says which conversation the events after it belong to. */
export function isBegin(event: Event): event is Command & { conversation: string } {
  return (
    event.kind === "command" &&
    (event.name === "/chat:create" || event.name === "/chat:fork" || event.name === "/chat:resume") &&
    event.conversation !== undefined
  );
}

/** A chat whose log holds no begin command has one conversation, and every event is its. */
export function isPlain(events: readonly Numbered[]): boolean {
  return !events.some((e) => isBegin(e.event));
}

/**
 * A chat's log read into its conversations an event at a time, each conversation's own events kept
 * as `keep` makes them (the events themselves, or only their numbers; none, where it makes none:
 * only some of them are kept then, and a view of a conversation holds only those). A begin command naming a
 * conversation that doesn't exist (resume) or exists already (create, fork) was never written by
 * this harness; it is read as a resume of, or a fresh start of, what it names, so no event is lost.
 */
export class ChatLog<T> implements ChatMapOf<T> {
  current = FIRST;
  readonly conversations = new Map<string, ChatConversation>([[FIRST, { name: FIRST, begin: 0 }]]);
  readonly own = new Map<string, T[]>([[FIRST, []]]);
  /** Whether a begin command was read: a chat of several conversations. */
  several = false;

  constructor(private readonly keep: (e: Numbered) => T | undefined) {}

  /** Takes the chat's next event. */
  see(e: Numbered): void {
    const event = e.event;
    if (isBegin(event)) {
      this.several = true;
      this.current = event.conversation;
      if (!this.conversations.has(this.current)) {
        const fork = event.name === "/chat:fork" && event.thread !== undefined && event.event !== undefined && this.conversations.has(event.thread);
        this.conversations.set(this.current, { name: this.current, begin: e.n, ...(fork ? { source: event.thread, at: event.event } : {}) });
        this.own.set(this.current, []);
      }
    }
    const kept = this.keep(e);
    if (kept !== undefined) this.own.get(this.current)?.push(kept);
  }
}

/** Reads a chat's log (every event, from the first) into its conversations (ChatLog). */
export function chatMap(events: Iterable<Numbered>): ChatMap {
  const log = new ChatLog<Numbered>((e) => e);
  for (const e of events) log.see(e);
  return log;
}

/**
 * A conversation's events in order: a fork's shared start (its source's events up to the fork point,
 * read back the same way) then its own. Sources are followed only to conversations that began before.
 */
export function conversationEvents(map: ChatMap, name: string): Numbered[] {
  return viewOf(map, name, (e) => e.n);
}

/** A conversation's event numbers in order, as conversationEvents gives its events. */
export function conversationNumbers(map: ChatMapOf<number>, name: string): number[] {
  return viewOf(map, name, (n) => n);
}

function viewOf<T>(map: ChatMapOf<T>, name: string, numberOf: (t: T) => number): T[] {
  if (!map.conversations.has(name)) return [];
  // The chain of forks, from this one back to the first (each source began before the fork): walked
  // in a loop, as a chat may hold thousands of forks of forks.
  const chain: { name: string; at: number | undefined }[] = [];
  for (let current: string | undefined = name; current !== undefined; ) {
    const conv = map.conversations.get(current);
    if (!conv) break;
    const source = conv.source === undefined || conv.at === undefined ? undefined : map.conversations.get(conv.source);
    const follows = source !== undefined && source.begin < conv.begin;
    chain.push({ name: current, at: follows ? Math.min(conv.at as number, conv.begin) : undefined });
    current = follows ? conv.source : undefined;
  }
  // From the first on: what a fork shares of its source (events up to its fork point, in order), then its own.
  const events: T[] = [];
  for (let i = chain.length - 1; i >= 0; i--) {
    const { name: forked, at } = chain[i] as (typeof chain)[number];
    if (at !== undefined) while (events.length > 0 && numberOf(events.at(-1) as T) > at) events.pop();
    for (const e of map.own.get(forked) ?? []) events.push(e);
  }
  return events;
}

/** A session's id for one conversation of a chat: `<chat>~<conversation>`. */
export function sessionIdOf(thread: string, conversation: string): string {
  return `${thread}~${conversation}`;
}

/** A session id's chat and, after its last `~`, the conversation it names (left out: the chat's current one). */
export function splitSessionId(sessionId: string): { thread: string; conversation?: string } {
  const i = sessionId.lastIndexOf("~");
  if (i <= 0 || i === sessionId.length - 1) return { thread: sessionId };
  return { thread: sessionId.slice(0, i), conversation: sessionId.slice(i + 1) };
}
