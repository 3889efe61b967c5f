// The window: how much of a conversation the model sees, found without reading every message.
// Spec: "How much of a conversation does the model see?" and "How does a turn find the window…" (decisions.txt).
import type { Event, Numbered, Part, WindowMark } from "../protocol/index.js";
import { derived } from "./derived.js";

/** Rough tokens: four ASCII characters a token, one for any other character. */
export function roughTokens(text: string): number {
  // As many UTF-8 bytes as characters: all ASCII, counted at once.
  if (Buffer.byteLength(text, "utf8") === text.length) return Math.ceil(text.length / 4);
  let ascii = 0;
  let other = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x80) ascii++;
    else {
      other++;
      // A surrogate pair is one character; a lone surrogate is one too.
      const next = text.charCodeAt(i + 1);
      if (c >= 0xd800 && c <= 0xdbff && next >= 0xdc00 && next <= 0xdfff) i++;
    }
  }
  return Math.ceil(ascii / 4) + other;
}

/** What an image or a document costs in the rough count at least, however small. */
export const PART_TOKENS = 1_000;
/**
 * A part counts a token for each this many characters of its data, when that is more: so a window
 * holds at most its share in KiB of images and documents, not a thousand of the largest a client
 * may send, which a turn would read and send whole.
 */
export const PART_CHARS_PER_TOKEN = 1024;

/** A part's rough tokens: PART_TOKENS, or more for its data's size. */
function partTokens(part: Part): number {
  const data = part.type === "image_url" ? part.image_url?.url : part.type === "file" ? part.file?.file_data : part.text;
  return Math.max(PART_TOKENS, Math.ceil((typeof data === "string" ? data.length : 0) / PART_CHARS_PER_TOKEN));
}

/** An event's rough tokens as sent to the model; never changes once the event is written. */
export function eventTokens(event: Event): number {
  return derived(event, "tokens", () => countTokens(event));
}

function countTokens(event: Event): number {
  switch (event.kind) {
    case "message":
      if (event.role === "user") {
        const skill = event.skill ? roughTokens(event.skill.text) + roughTokens(event.skill.path) + 8 : 0;
        return roughTokens(event.header) + 1 + roughTokens(event.text) + skill + (event.parts ?? []).reduce((sum, p) => sum + partTokens(p), 0);
      }
      return (
        roughTokens(event.text) +
        (event.tool_calls ?? []).reduce((sum, c) => sum + roughTokens(c.name) + roughTokens(c.arguments), 0) +
        (event.tool_calls?.length ? roughTokens(event.thinking?.reasoning_content ?? event.thinking?.reasoning ?? "") : 0)
      );
    case "tool_result":
      return roughTokens(event.text);
    case "command":
    case "failure":
      return 0;
    default: {
      const never: never = event;
      return never;
    }
  }
}

/** Room for an event's keys, numbers and short fields (its time, model, fingerprints…). */
const EVENT_FRAME_CHARS = 400;

/**
 * An event's size in characters: about its JSON's length, never less than its strings' (what a
 * process holds it by). Its fields are read as they are, with nothing added to the event (a property
 * added to some events and not others would slow every reader of them); only a message's parts and a
 * provider's thinking details, any shape at all, are walked, once, the sum kept on the event.
 */
export function eventChars(event: Event): number {
  switch (event.kind) {
    case "message": {
      let chars = EVENT_FRAME_CHARS + event.text.length;
      if (event.role === "user") {
        chars += event.header.length + (event.cwd?.length ?? 0) + (event.channel?.length ?? 0);
        if (event.from) chars += event.from.id.length + (event.from.name?.length ?? 0);
        if (event.skill) chars += event.skill.text.length + event.skill.path.length + event.skill.name.length;
        if (event.parts) chars += derived(event, "chars", () => jsonChars(event.parts));
        return chars;
      }
      chars += event.model.length + event.provider.length + (event.response_id?.length ?? 0);
      for (const l of event.left_out ?? []) chars += l.length + 4;
      for (const c of event.tool_calls ?? []) chars += c.id.length + c.name.length + c.arguments.length + 40;
      if (event.thinking) {
        chars += (event.thinking.reasoning_content?.length ?? 0) + (event.thinking.reasoning?.length ?? 0);
        if (event.thinking.reasoning_details) chars += derived(event, "chars", () => jsonChars(event.thinking?.reasoning_details));
      }
      return chars;
    }
    case "tool_result":
      return EVENT_FRAME_CHARS + event.text.length + event.tool.length + event.call_id.length;
    case "command":
      return EVENT_FRAME_CHARS + (event.text?.length ?? 0) + (event.model?.length ?? 0) + (event.thread?.length ?? 0) + (event.conversation?.length ?? 0) + (event.from ? event.from.id.length + (event.from.name?.length ?? 0) : 0);
    case "failure":
      return EVENT_FRAME_CHARS + event.message.length;
    default: {
      const never: never = event;
      return never;
    }
  }
}

/** Counted with a stack of its own, not by recursion: a provider's nested thinking may be any depth. */
function jsonChars(value: unknown): number {
  let chars = 0;
  const stack: unknown[] = [value];
  while (stack.length > 0) {
    const v = stack.pop();
    if (typeof v === "string") chars += v.length + 2;
    else if (Array.isArray(v)) {
      chars += 2;
      for (const item of v) stack.push(item);
    } else if (v !== null && typeof v === "object") {
      chars += 2;
      for (const [k, item] of Object.entries(v)) {
        chars += k.length + 4;
        stack.push(item);
      }
    } else chars += 5;
  }
  return chars;
}

/** A turn starts at a user message: the window always begins with someone speaking. */
export function isTurnStart(event: Event): boolean {
  return event.kind === "message" && event.role === "user";
}

export function isNew(event: Event): boolean {
  return event.kind === "command" && event.name === "/new";
}

/**
 * The window's state as the count goes on: where it starts, and the tokens of the conversation
 * (since its last /new) before that start and in all.
 */
export interface WindowCount {
  /** The first event of the window; undefined until a message starts it. */
  start: number | undefined;
  startTime: string | undefined;
  tokensBefore: number;
  total: number;
  /** Turn starts inside the window, with the tokens before each: the candidate drop points. */
  points: { n: number; time: string; before: number }[];
}

export function emptyCount(): WindowCount {
  return { start: undefined, startTime: undefined, tokensBefore: 0, total: 0, points: [] };
}

export function countFromMark(mark: WindowMark): WindowCount {
  return { start: mark.event, startTime: mark.time, tokensBefore: mark.tokens_before, total: mark.tokens_before, points: [] };
}

/**
 * Counts one more event. When the window outgrows the budget, its oldest turns drop half the
 * budget at a time, at turn starts: a pure function of the events and the budget, so going on
 * from any earlier mark finds the same start, and the prompt's start stays the same between drops.
 */
export function countEvent(count: WindowCount, n: number, event: Event, budget: number): void {
  if (isNew(event)) {
    // /new starts the window anew; what came before stays on disk.
    count.start = undefined;
    count.startTime = undefined;
    count.tokensBefore = 0;
    count.total = 0;
    count.points = [];
    return;
  }
  if (isTurnStart(event)) {
    if (count.start === undefined) {
      count.start = n;
      count.startTime = event.time;
      count.tokensBefore = count.total;
    }
    count.points.push({ n, time: event.time, before: count.total });
  }
  count.total += eventTokens(event);
  while (count.start !== undefined && count.total - count.tokensBefore > budget) {
    const half = count.tokensBefore + Math.ceil(budget / 2);
    // The first turn start past the start that drops at least half the budget; else the latest one.
    const later = count.points.filter((p) => p.n > (count.start ?? 0));
    if (later.length === 0) break;
    const point = later.find((p) => p.before >= half) ?? later[later.length - 1];
    if (!point) break;
    count.start = point.n;
    count.startTime = point.time;
    count.tokensBefore = point.before;
    count.points = count.points.filter((p) => p.n >= point.n);
  }
}

export function markOf(count: WindowCount, budget: number): WindowMark | undefined {
  if (count.start === undefined || count.startTime === undefined) return undefined;
  return { v: 1, event: count.start, time: count.startTime, tokens_before: count.tokensBefore, budget };
}

/** Whether a mark still belongs to these events and this budget. */
export function markHolds(mark: WindowMark | undefined, budget: number, eventAtMark: Event | undefined): mark is WindowMark {
  return mark !== undefined && mark.budget === budget && eventAtMark !== undefined && isTurnStart(eventAtMark) && eventAtMark.time === mark.time;
}

/** The events of the window: from its start on (those before it have dropped). */
export function windowEvents(events: readonly Numbered[], count: WindowCount): Numbered[] {
  if (count.start === undefined) return [];
  const start = count.start;
  return events.filter((e) => e.n >= start);
}
