// The ids a session shows a conversation's tool calls by: unique in the conversation, the same
// live and on replay.
import { EVENT_KINDS, type Event } from "../protocol/index.js";

/**
 * The ids a conversation's tool calls are shown by, given in the order its answers made them: an id
 * the model used before in the conversation is shown as `<id>#2`, then `#3`, and so on (past any
 * name given already), so that each call is one of its own to the client, live as on replay.
 * `after()` goes on from these names without changing them: a turn's own, on the conversation's.
 */
export class CallNames {
  private readonly given = new Set<string>();
  /** The suffix to try first for an id: past every one given it. */
  private readonly next = new Map<string, number>();

  constructor(private readonly base?: CallNames) {}

  /** Names that go on from these, which stay as they are. */
  after(): CallNames {
    return new CallNames(this);
  }

  /** How many names were given here (not counting those of the names it goes on from). */
  get size(): number {
    return this.given.size;
  }

  private has(name: string): boolean {
    return this.given.has(name) || (this.base?.has(name) ?? false);
  }

  private nextOf(id: string): number {
    return this.next.get(id) ?? this.base?.nextOf(id) ?? 1;
  }

  /** The name the model's next call of id `id` is shown by. */
  name(id: string): string {
    let i = this.nextOf(id);
    let out = i === 1 ? id : `${id}#${i}`;
    while (this.has(out)) out = `${id}#${++i}`;
    this.given.add(out);
    this.next.set(id, i + 1);
    return out;
  }

  /** Names the calls of an event, if it is an answer that made any. */
  see(event: Event): void {
    for (const id of callIds(event)) this.name(id);
  }
}

/** The ids of the calls an event made, in order: an answer's, none for any other event. */
export function callIds(event: Event): string[] {
  return event.kind === EVENT_KINDS.message && event.role === "assistant" ? (event.tool_calls ?? []).map((call) => call.id) : [];
}
