// Reading a conversation for a turn: from the window's mark (or the copy's last answer, if earlier)
// on, never every message, unless the mark is missing or stale.
import type { Event, Numbered } from "../protocol/index.js";
import { lastEventNumber, readEvent, readEventsFrom, readMark, writeMark, type ConversationPaths } from "../store/index.js";
import { transcriptEnd } from "./transcript.js";
import { countEvent, countFromMark, emptyCount, markHolds, markOf, windowEvents, type WindowCount } from "./window.js";

/** The model an event chose, if it is a /model:set naming one. */
export function chosenModel(event: Event): string | undefined {
  return event.kind === "command" && event.name === "/model:set" ? event.model || undefined : undefined;
}

/**
 * The conversation's model without loading it for a turn: its last /model:set, read from the newest
 * event back to the window's mark, else the model the mark carries from before it.
 */
export function conversationModel(conv: ConversationPaths): string | undefined {
  const mark = readMark(conv);
  const holds = markHolds(mark, mark?.budget ?? 0, mark ? readEvent(conv, mark.event) : undefined);
  for (let n = lastEventNumber(conv); n >= (holds ? mark.event : 1); n--) {
    const e = readEvent(conv, n);
    const model = e && chosenModel(e);
    if (model !== undefined) return model;
  }
  return holds ? mark.model : undefined;
}

export class History {
  private constructor(
    readonly conv: ConversationPaths,
    readonly budget: number,
    /** The events this turn holds: from where it started reading, in order. */
    readonly events: Numbered[],
    readonly count: WindowCount,
    /** The conversation's own model (its last /model:set), if it chose one. */
    public model: string | undefined,
    private readonly markBefore: string,
  ) {}

  /**
   * Loads what a turn needs. The model (its last /model:set) is found first, since the window, and so
   * the budget, depend on it; a mark made for another budget, or none, means reading every message.
   */
  static async load(conv: ConversationPaths, budgetFor: (model: string | undefined) => Promise<number>): Promise<History> {
    const mark = readMark(conv);
    const belongs = markHolds(mark, mark?.budget ?? 0, mark ? readEvent(conv, mark.event) : undefined);
    let events: Numbered[];
    let model: string | undefined;
    if (belongs) {
      const end = transcriptEnd(conv);
      events = readEventsFrom(conv, end !== undefined && end > 0 ? Math.min(mark.event, end) : mark.event);
      model = mark.model;
      for (const e of events) if (e.n >= mark.event) model = chosenModel(e.event) ?? model;
    } else {
      events = readEventsFrom(conv, 1);
      for (const e of events) model = chosenModel(e.event) ?? model;
    }
    const budget = await budgetFor(model);
    const holds = belongs && mark.budget === budget;
    if (belongs && !holds) events = readEventsFrom(conv, 1);
    const history = new History(conv, budget, [], holds ? countFromMark(mark) : emptyCount(), holds ? mark.model : undefined, holds ? JSON.stringify(mark) : "");
    for (const e of events) history.add(e, holds ? mark.event : 1);
    return history;
  }

  /** Adds an event the turn read or wrote, counting it when it is at or past `countFrom`. */
  add(e: Numbered, countFrom = 0): void {
    this.events.push(e);
    if (e.n < countFrom) return;
    this.model = chosenModel(e.event) ?? this.model;
    countEvent(this.count, e.n, e.event, this.budget);
  }

  push(n: number, event: Event): void {
    this.add({ n, event });
  }

  /** The window's events, as the model sees them. */
  window(): Numbered[] {
    return windowEvents(this.events, this.count);
  }

  /** Writes window.json when the count moved its start (or the file was missing or stale). */
  saveMark(): void {
    const mark = markOf(this.count, this.budget);
    if (!mark) return;
    if (this.model !== undefined) mark.model = this.model;
    if (JSON.stringify(mark) !== this.markBefore) writeMark(this.conv, mark);
  }
}
