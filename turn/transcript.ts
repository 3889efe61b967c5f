// The copy for people and memory: the owner's messages and the agent's answers, up to the last answer.
// Spec: "What does a conversation's copy hold?" and "Why is the copy added to rather than made again?".
import type { Event, Numbered } from "../protocol/index.js";
import { appendTranscript, readEventsFrom, replaceTranscript, transcriptTail, type ConversationPaths } from "../store/index.js";

const TRAILER = /<!-- answer (\d+) -->\s*$/;

/** The last answer the copy ends with, or undefined when it has none or was cut short. */
export function transcriptEnd(conv: ConversationPaths): number | undefined {
  const tail = transcriptTail(conv);
  if (tail === undefined) return 0;
  const m = TRAILER.exec(tail);
  return m ? Number(m[1]) : undefined;
}

function when(time: string): string {
  return `${time.slice(0, 10)} ${time.slice(11, 16)} UTC`;
}

/**
 * Whether an event ends what the copy holds, as an answer does: an assistant message with text, or a
 * turn that failed (its question was not being answered any more, and a person reading the copy
 * sees that it got no answer, and why).
 */
export function isAnswer(event: Event): boolean {
  if (event.kind === "failure") return true;
  return event.kind === "message" && event.role === "assistant" && event.text.trim().length > 0;
}

/** How an answer that didn't end as answered is marked, so a cut answer doesn't read as whole. */
function cutShort(stop: string): string {
  if (stop === "cancelled") return "\n*(cut short: the turn was stopped)*";
  if (stop === "max_tokens") return "\n*(cut short: the answer reached its limit)*";
  return "";
}

/** What the copy holds of events after its end, up to and including the answer numbered `upTo`. */
function entries(events: readonly Numbered[], after: number, upTo: number): string {
  let out = "";
  for (const { n, event } of events) {
    if (n <= after || n > upTo) continue;
    if (event.kind === "failure") {
      out += `**Agent** · ${when(event.time)}\n*(no answer: the turn failed: ${event.message.replace(/\s+/g, " ").trim()})*\n<!-- answer ${n} -->\n\n`;
      continue;
    }
    // A command as it was typed (its reply was never kept): a /new or a fork reads where it was.
    if (event.kind === "command") {
      if (event.text) out += `**${event.from?.name ?? "Owner"}** · ${when(event.time)}\n${event.text.trim()}\n\n`;
      continue;
    }
    if (event.kind !== "message") continue;
    if (event.role === "user") {
      // Only the owner's messages: a tool's call or answer, or anyone else's words, never.
      if (event.from && !event.from.owner) continue;
      const who = event.from?.name ?? "Owner";
      out += `**${who}** · ${when(event.time)}${event.channel ? ` · ${event.channel}` : ""}\n${event.text.trim()}\n\n`;
    } else if (isAnswer(event)) {
      out += `**Agent** · ${when(event.time)}\n${event.text.trim()}${cutShort(event.stop)}\n<!-- answer ${n} -->\n\n`;
    }
  }
  return out;
}

/**
 * Brings the copy up to the last answer in `events` (which hold every event after the copy's end,
 * when it has one). When the copy doesn't end with an answer the events know, it's made again from
 * every message. Returns the last answer the copy holds then (0 for none, undefined if unknown).
 */
export function updateTranscript(conv: ConversationPaths, events: readonly Numbered[]): number | undefined {
  const last = events.findLast((e) => isAnswer(e.event));
  const end = transcriptEnd(conv);
  if (!last) return end;
  const first = events[0]?.n ?? Number.POSITIVE_INFINITY;
  if (end === last.n) return end;
  if (end !== undefined && end < last.n && (end === 0 ? first === 1 : end + 1 >= first)) {
    appendTranscript(conv, entries(events, end, last.n));
    return last.n;
  }
  // Cut short, written elsewhere or ahead of these events: made again from every message.
  const all = readEventsFrom(conv, 1);
  const lastOfAll = all.findLast((e) => isAnswer(e.event));
  replaceTranscript(conv, entries(all, 0, lastOfAll?.n ?? 0));
  return lastOfAll?.n ?? 0;
}
