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

/** Where counting began, with the count and the model there: enough to count again from it. */
interface Begin {
  countFrom: number;
  count: WindowCount;
  model: string | undefined;
}

function copyCount(count: WindowCount): WindowCount {
  return { ...count, points: count.points.slice() };
}

/**
 * What a conversation's last turn in this process left: the same as loading it again from the mark
 * that turn wrote, so the next turn goes on from it when window.json still says the same. A derived
 * cache: another process's events are read on from its last, and any other change of the mark or
 * budget loads the conversation again from disk.
 */
interface Kept {
  mark: string;
  budget: number;
  model: string | undefined;
  events: Numbered[];
  count: WindowCount;
  begin: Begin;
}
const kept = new Map<string, Kept>();
const KEPT_CONVERSATIONS = 256;

/** Forgets what turns of this process left (for measuring a fresh process). */
export function forgetHistories(): void {
  kept.clear();
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
    private readonly begin: Begin,
  ) {}

  /**
   * Loads what a turn needs. The model (its last /model:set) is found first, since the window, and so
   * the budget, depend on it; a mark made for another budget, or none, means reading every message.
   */
  static async load(conv: ConversationPaths, budgetFor: (model: string | undefined) => Promise<number>): Promise<History> {
    const mark = readMark(conv);
    const markText = mark ? JSON.stringify(mark) : "";
    const left = kept.get(conv.dir);
    if (left && left.mark === markText) {
      const more = readEventsFrom(conv, (left.events.at(-1)?.n ?? 0) + 1);
      let model = left.model;
      for (const e of more) model = chosenModel(e.event) ?? model;
      const budget = await budgetFor(model);
      if (budget === left.budget) {
        const history = new History(conv, budget, left.events.slice(), copyCount(left.count), left.model, markText, left.begin);
        for (const e of more) history.add(e, left.begin.countFrom);
        return history;
      }
    }
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
    const count = holds ? countFromMark(mark) : emptyCount();
    const begin: Begin = { countFrom: holds ? mark.event : 1, count: copyCount(count), model: holds ? mark.model : undefined };
    const history = new History(conv, budget, [], count, begin.model, markText && holds ? markText : "", begin);
    for (const e of events) history.add(e, begin.countFrom);
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
    const n = Math.max(lastEventNumber(this.conv), this.events.at(-1)?.n ?? 0) + 1;
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
    const before = this.events.slice(0, -1);
    this.events.length = 0;
    Object.assign(this.count, copyCount(this.begin.count));
    this.model = this.begin.model;
    for (const e of before) this.add(e, this.begin.countFrom);
    this.written(actual, last.event);
  }

  /** The window's events, as the model sees them. */
  window(): Numbered[] {
    return windowEvents(this.events, this.count);
  }

  /**
   * Writes window.json when the count moved its start (or the file was missing or stale), and keeps
   * what a load from it would find, for this process's next turn of the conversation. `copyEnd` is the
   * last answer the copy (transcript.md) holds now: a load reads from it, or the mark, whichever is first.
   */
  saveMark(copyEnd?: number): void {
    const mark = markOf(this.count, this.budget);
    if (!mark) {
      kept.delete(this.conv.dir);
      return;
    }
    if (this.model !== undefined) mark.model = this.model;
    const text = JSON.stringify(mark);
    if (text !== this.markBefore) writeMark(this.conv, mark);
    const from = Math.min(mark.event, copyEnd !== undefined && copyEnd > 0 ? copyEnd : mark.event);
    const first = this.events.findIndex((e) => e.n >= from);
    kept.delete(this.conv.dir);
    kept.set(this.conv.dir, {
      mark: text,
      budget: this.budget,
      model: this.model,
      events: first <= 0 ? this.events.slice() : this.events.slice(first),
      count: copyCount(this.count),
      begin: { countFrom: mark.event, count: countFromMark(mark), model: mark.model },
    });
    if (kept.size > KEPT_CONVERSATIONS) {
      const oldest = kept.keys().next().value;
      if (oldest !== undefined) kept.delete(oldest);
    }
  }
}
