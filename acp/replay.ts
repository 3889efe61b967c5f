// A conversation's events → the session/updates that show it again (session/load).
import type { ContentBlock, SessionUpdate } from "@agentclientprotocol/sdk";
import { EVENT_KINDS, type Event, type Numbered, type Part, type Verbosity } from "../protocol/index.js";
import { CallNames } from "./call-names.js";
import { textUpdate, toolResultUpdate, verbosityMeta } from "./updates.js";
import { rawInput, toolKind, toolTitle } from "./tools.js";

/** What a call that never got its answer shows (a turn cut short, or a process that died mid-call). */
export const UNANSWERED = "no answer was recorded for this call";

function imageBlock(part: Part): ContentBlock | undefined {
  if (part.type !== "image_url") return undefined;
  const m = /^data:([^;,]+);base64,(.*)$/s.exec(part.image_url.url);
  if (!m?.[1] || m[2] === undefined) return undefined;
  return { type: "image", mimeType: m[1], data: m[2] };
}

/**
 * What the owner's side of a conversation shows: a message's text (and images); a command as it was
 * typed, so a loaded chat reads as it was (its reply was kept nowhere). Nothing for any other event.
 */
export function askedUpdates(event: Event): SessionUpdate[] {
  const updates: SessionUpdate[] = [];
  if (event.kind === EVENT_KINDS.command && event.text) updates.push(textUpdate(event.text, "user_message_chunk"));
  if (event.kind !== EVENT_KINDS.message || event.role !== "user") return updates;
  if (event.text.length > 0) updates.push(textUpdate(event.text, "user_message_chunk"));
  for (const part of event.parts ?? []) {
    const block = imageBlock(part);
    if (block) updates.push({ sessionUpdate: "user_message_chunk", content: block });
  }
  return updates;
}

/**
 * Which tool result answers each call of a conversation: learned from its events in order, before
 * the first is shown again. Each result answers the earliest call of its id still waiting, so ids
 * reused from turn to turn pair right. It keeps numbers alone: a call and its result are read again
 * when they are shown, so a conversation of any length is paired in little memory.
 */
export class CallPairs {
  private readonly waiting = new Map<string, Slot[]>();
  private readonly slots = new Map<number, Slot[]>();

  see({ n, event }: Numbered): void {
    if (event.kind === EVENT_KINDS.message && event.role === "assistant" && event.tool_calls?.length) {
      const mine = event.tool_calls.map((): Slot => ({}));
      this.slots.set(n, mine);
      event.tool_calls.forEach((call, i) => {
        const slot = mine[i] as Slot;
        const queue = this.waiting.get(call.id);
        if (queue) queue.push(slot);
        else this.waiting.set(call.id, [slot]);
      });
    } else if (event.kind === EVENT_KINDS.toolResult) {
      const slot = this.waiting.get(event.call_id)?.shift();
      if (slot) slot.result = n;
    }
  }

  /** The number of the result that answers each call of the answer numbered `n`, in its calls' order. */
  resultsOf(n: number): readonly (number | undefined)[] {
    return (this.slots.get(n) ?? []).map((slot) => slot.result);
  }
}

/** A call's place: the number of the result that answers it, once one does. */
interface Slot {
  result?: number;
}

/**
 * The session/updates that show a conversation's events again, one event at a time, in order: the
 * user's text (and images), the agent's answers, and each tool call with its final status and its
 * answer (`resultAt` reads it by number); each command as it was typed. Failures and commands no one
 * typed (a session's own /chat:resume) are the harness's own and are not shown. A call id the model
 * used twice is made unique, so one call's result never lands on another.
 */
export class Replayer {
  private readonly names = new CallNames();

  /**
   * `inFlightAfter`: the event a running turn's calls come after (its last owner's message); a call
   * there without its result yet is shown in progress, as the turn still runs it, not as failed.
   */
  constructor(
    private readonly pairs: CallPairs,
    private readonly verbosity: Verbosity,
    private readonly resultAt: (n: number) => Event | undefined,
    private readonly inFlightAfter = Number.POSITIVE_INFINITY,
  ) {}

  updatesOf({ n, event }: Numbered): SessionUpdate[] {
    if (event.kind !== EVENT_KINDS.message || event.role === "user") return askedUpdates(event);
    const updates: SessionUpdate[] = [];
    if (event.text.length > 0) updates.push(textUpdate(event.text));
    const results = this.pairs.resultsOf(n);
    (event.tool_calls ?? []).forEach((call, i) => {
      const at = results[i];
      const found = at === undefined ? undefined : this.resultAt(at);
      const result = found?.kind === EVENT_KINDS.toolResult ? found : undefined;
      const inFlight = !result && n > this.inFlightAfter;
      const status = result && !result.error ? "completed" : "failed";
      const id = this.names.name(call.id);
      updates.push({
        sessionUpdate: "tool_call",
        toolCallId: id,
        title: toolTitle(call.name),
        name: call.name,
        kind: toolKind(call.name),
        status: inFlight ? "in_progress" : status,
        rawInput: rawInput(call.arguments),
        _meta: verbosityMeta(this.verbosity),
      });
      if (!inFlight) updates.push(toolResultUpdate(id, status, result ? result.text : UNANSWERED, this.verbosity));
    });
    return updates;
  }
}

/** Every update that shows `events` again (Replayer), the conversation held whole. */
export function replay(events: readonly Numbered[], verbosity: Verbosity): SessionUpdate[] {
  const pairs = new CallPairs();
  const results = new Map<number, Event>();
  for (const e of events) {
    pairs.see(e);
    if (e.event.kind === EVENT_KINDS.toolResult) results.set(e.n, e.event);
  }
  const replayer = new Replayer(pairs, verbosity, (n) => results.get(n));
  return events.flatMap((e) => replayer.updatesOf(e));
}
