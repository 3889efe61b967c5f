// One connection's session/updates, sent in the order they were made.
import * as acp from "@agentclientprotocol/sdk";
import type { AgentContext, SessionUpdate } from "@agentclientprotocol/sdk";
import { shownAfter, type HeldFor, type Subscriber } from "./turns.js";
import { isHighSurrogate } from "../turn/wellformed.js";

/** The kinds of update whose text a client appends to the one before it. */
const APPENDED = new Set(["agent_message_chunk", "agent_thought_chunk"]);

/** A text update that a client appends to the one before: its text; undefined for any other. */
function appendedText(update: SessionUpdate): string | undefined {
  if (!APPENDED.has(update.sessionUpdate)) return undefined;
  const { content, _meta } = update as { content?: { type?: unknown; text?: unknown; _meta?: unknown; annotations?: unknown }; _meta?: unknown };
  if (_meta !== undefined && _meta !== null) return undefined;
  if (content?.type !== "text" || typeof content.text !== "string" || content._meta !== undefined || content.annotations !== undefined) return undefined;
  return content.text;
}

/**
 * The most text one update carries, in characters (UTF-16 code units): some 6 MiB of JSON at most,
 * far under what a client reads in one message (the ACP SDK's default bound is 32 MiB). Longer text
 * goes in several updates, which a client appends all the same; joined text stops short of it.
 */
export const UPDATE_TEXT_MAX = 1024 * 1024;

/** `text` in pieces of at most `max` characters, never parting a surrogate pair. */
export function textPieces(text: string, max: number): string[] {
  const pieces: string[] = [];
  for (let start = 0; start < text.length; ) {
    let end = Math.min(start + max, text.length);
    if (end < text.length && end - start > 1 && isHighSurrogate(text.charCodeAt(end - 1))) end--;
    pieces.push(text.slice(start, end));
    start = end;
  }
  return pieces;
}

/** The most updates of a turn held back while its session is shown again (Outbox.hold). */
const HELD_MAX = 65_536;

/** A session's updates held back while it is shown again: by how many loads, and settled once let go. */
interface Held {
  loads: number;
  /** Where the last load that showed the session whole began among the updates: those before it are in what it showed. */
  shownFrom: number;
  /** Each with the load it is shown as the end of (Subscriber.send). */
  updates: { update: SessionUpdate; heldFor: HeldFor | undefined }[];
  gone: Promise<void>;
  over: () => void;
}

/** A text update not sent yet, which the text that follows it in the same pass of the event loop joins. */
interface Open {
  sessionId: string;
  kind: string;
  text: string;
}

/**
 * One connection's updates, sent in the order they were made; a connection that went away is
 * skipped. Text chunks of one kind that follow one another within one pass of the event loop (the
 * chunks of one read from the model) leave as one update: a client appends them all the same, and
 * is sent, and checks, one message where it would be several.
 */
export class Outbox {
  private chain: Promise<void> = Promise.resolve();
  private gone = false;
  private readonly subscribers = new Map<string, Subscriber>();
  private open: Open | undefined;

  send(client: AgentContext, sessionId: string, update: SessionUpdate): void {
    if (this.gone) return;
    const text = appendedText(update);
    if (text !== undefined && text.length > UPDATE_TEXT_MAX) {
      for (const piece of textPieces(text, UPDATE_TEXT_MAX)) this.send(client, sessionId, { ...update, content: { type: "text", text: piece } } as SessionUpdate);
      return;
    }
    const open = this.open;
    if (text !== undefined && open && open.sessionId === sessionId && open.kind === update.sessionUpdate && open.text.length + text.length <= UPDATE_TEXT_MAX) {
      open.text += text;
      return;
    }
    this.open = undefined;
    if (text === undefined) {
      this.queue(() => client.notify(acp.methods.client.session.update, { sessionId, update }));
      return;
    }
    const held: Open = { sessionId, kind: update.sessionUpdate, text };
    this.open = held;
    // Sent once the pass is over (its promises all run), with all the text that joined it.
    const passOver = new Promise<void>((resolve) => process.nextTick(resolve));
    this.queue(async () => {
      await passOver;
      if (this.open === held) this.open = undefined;
      const joined = { sessionUpdate: held.kind, content: { type: "text", text: held.text } } as SessionUpdate;
      await client.notify(acp.methods.client.session.update, { sessionId, update: joined });
    });
  }

  private queue(step: () => Promise<void>): void {
    this.chain = this.chain.then(step).catch(() => {
      this.gone = true;
    });
  }

  /** This connection's view of a session, the same object each time so a turn sends it each update once. */
  subscriber(client: AgentContext, sessionId: string): Subscriber {
    let sub = this.subscribers.get(sessionId);
    if (!sub) {
      sub = {
        send: (update, heldFor) => {
          const held = this.held.get(sessionId);
          // Not held back (its load is over, or said more than is held): shown now as that load stands.
          if (held === undefined) return shownAfter(heldFor) ? this.send(client, sessionId, update) : undefined;
          held.updates.push({ update, heldFor });
          // A turn that says more than a load holds back is let through, in order, from then on
          // (should the load fail after, what was let through stays shown).
          if (held.updates.length > HELD_MAX) this.letGo(client, sessionId, held);
        },
      };
      this.subscribers.set(sessionId, sub);
    }
    return sub;
  }

  /** A session's updates from its turns, held back while the session is shown again (hold); `over` once let go. */
  private readonly held = new Map<string, Held>();

  /**
   * Holds back what a turn of the session sends this connection (its subscriber's updates) while
   * the session is shown again by `send`: sent in order once the returned function is called (by
   * every load of the session under way), so a load's updates and a turn's never mingle. Each is
   * sent as the load it was held for ended (Subscriber.send); what was held before a load began
   * that showed the session whole (`shown`) is not: that load showed it.
   */
  hold(client: AgentContext, sessionId: string): (shown?: boolean) => void {
    let held = this.held.get(sessionId);
    if (held === undefined) {
      let over!: () => void;
      const gone = new Promise<void>((resolve) => (over = resolve));
      held = { loads: 0, shownFrom: 0, updates: [], gone, over };
    }
    held.loads++;
    this.held.set(sessionId, held);
    let done = false;
    const mine = held;
    const from = held.updates.length;
    return (shown = false) => {
      if (done) return;
      done = true;
      if (shown) mine.shownFrom = Math.max(mine.shownFrom, from);
      if (--mine.loads === 0) this.letGo(client, sessionId, mine);
    };
  }

  private letGo(client: AgentContext, sessionId: string, held: Held): void {
    if (this.held.get(sessionId) === held) this.held.delete(sessionId);
    const updates = held.updates.splice(0);
    for (const { update, heldFor } of updates.slice(held.shownFrom)) if (shownAfter(heldFor)) this.send(client, sessionId, update);
    held.over();
  }

  /** Once what the session's turns sent this connection is written, none of it held back (hold). */
  async settled(sessionId: string): Promise<void> {
    for (let held = this.held.get(sessionId); held !== undefined; held = this.held.get(sessionId)) await held.gone;
    await this.chain;
  }

  flushed(): Promise<void> {
    return this.chain;
  }

  close(): void {
    this.gone = true;
  }
}
