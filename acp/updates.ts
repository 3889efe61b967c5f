// What a turn reports (TurnEvent) → the session/updates a client sees while it runs.
import type { SessionUpdate } from "@agentclientprotocol/sdk";
import { EVENT_KINDS, type Verbosity } from "../protocol/index.js";
import type { TurnEvent } from "../turn/types.js";
import type { ToolMedia } from "../turn/tools.js";
import { CallNames } from "./call-names.js";
import { answerContent, locations, rawInput, toolKind, toolTitle } from "./tools.js";

/** Each tool call carries its chat's verbosity, so the bridge shows or hides it as the chat chose. */
export function verbosityMeta(verbosity: Verbosity): { link: { verbosity: Verbosity } } {
  return { link: { verbosity } };
}

export function toolCallUpdate(id: string, name: string, args: unknown, verbosity: Verbosity): SessionUpdate {
  const input = rawInput(args);
  const where = locations(input);
  return {
    sessionUpdate: "tool_call",
    toolCallId: id,
    title: toolTitle(name),
    name,
    kind: toolKind(name),
    status: "in_progress",
    rawInput: input,
    ...(where.length > 0 ? { locations: where } : {}),
    _meta: verbosityMeta(verbosity),
  };
}

export function toolResultUpdate(id: string, status: "completed" | "failed", text: string, verbosity: Verbosity, media?: readonly ToolMedia[]): SessionUpdate {
  return { sessionUpdate: "tool_call_update", toolCallId: id, status, content: answerContent(text, media), _meta: verbosityMeta(verbosity) };
}

export function textUpdate(text: string, kind: "agent_message_chunk" | "user_message_chunk" = "agent_message_chunk"): SessionUpdate {
  return { sessionUpdate: kind, content: { type: "text", text } };
}

/** What a cost the provider reports is counted in: OpenRouter's, the one provider known to report one, is in US dollars. */
export const COST_CURRENCY = "USD";

/**
 * After each request: the tokens the window holds and the model's window, the conversation's cost
 * when the provider reports one, and under _meta.link the request's own counts.
 */
export function usageUpdate(report: Extract<TurnEvent, { type: "usage" }>): SessionUpdate {
  return {
    sessionUpdate: "usage_update",
    used: report.used,
    size: report.size,
    ...(report.cost !== undefined ? { cost: { amount: report.cost, currency: COST_CURRENCY } } : {}),
    ...(report.usage ? { _meta: { link: { tokens: { in: report.usage.in, out: report.usage.out, cached: report.usage.cached } } } } : {}),
  };
}

/**
 * Maps one turn's reports, keeping which tool calls are still open, so that however the turn ends
 * (answered, failed, cancelled) no tool call is left without its final update.
 */
export class TurnUpdates {
  private readonly open = new Map<string, string>();
  /**
   * The names a call is shown by (CallNames): the conversation's before the turn, once seeded, so a
   * model that uses an id again, in this turn or any before it, has it shown as a replay shows it.
   */
  private names = new CallNames();
  /** The name a call's id is shown by now. */
  private readonly shownAs = new Map<string, string>();
  /** Whether text was streamed since the last answer was written. */
  private streamed = false;

  constructor(private verbosity: Verbosity) {}

  /** Goes on from the names the conversation's calls were given before the turn (before any call of it is shown). */
  seed(before: CallNames): void {
    this.names = before.after();
  }

  map(report: TurnEvent): SessionUpdate[] {
    switch (report.type) {
      case "text":
        if (report.delta.length === 0) return [];
        this.streamed = true;
        return [textUpdate(report.delta)];
      case "tool_call": {
        const id = this.names.name(report.id);
        this.shownAs.set(report.id, id);
        this.open.set(id, report.name);
        return [toolCallUpdate(id, report.name, report.arguments, this.verbosity)];
      }
      case "tool_result": {
        const id = this.shownAs.get(report.id) ?? report.id;
        const opened = this.open.delete(id);
        const result = toolResultUpdate(id, report.status, report.text, this.verbosity, report.media);
        // A result for a call never announced still shows as a call, then its result.
        return opened ? [result] : [toolCallUpdate(id, report.name, undefined, this.verbosity), result];
      }
      case "event": {
        const e = report.event;
        if (e.kind !== EVENT_KINDS.message || e.role !== "assistant") return [];
        // An answer that arrived whole (not streamed) is still shown.
        const missed = !this.streamed && e.text.length > 0;
        this.streamed = false;
        return missed ? [textUpdate(e.text)] : [];
      }
      case "verbosity":
        // The chat's own choice, read from its events, over what the prompt said.
        this.verbosity = report.verbosity;
        return [];
      case "usage":
        return [usageUpdate(report)];
      case "prompt_changed":
      case "warning":
      case "asked":
        return [];
      default: {
        // A report this layer doesn't know yet is not shown; it must never break the turn that made it.
        const never: never = report;
        void never;
        return [];
      }
    }
  }

  /** Closes every call still open as failed, saying why. */
  finish(why: string): SessionUpdate[] {
    const updates = [...this.open.keys()].map((id) => toolResultUpdate(id, "failed", why, this.verbosity));
    this.open.clear();
    return updates;
  }
}
