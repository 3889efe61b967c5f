// A conversation's events → the session/updates that show it again (session/load).
import type { ContentBlock, SessionUpdate } from "@agentclientprotocol/sdk";
import { EVENT_KINDS, type Numbered, type Part, type ToolCall, type ToolResult, type Verbosity } from "../protocol/index.js";
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
 * Every message of the conversation, in order: the user's text (and images), the agent's answers,
 * and each tool call with its final status and its answer; each command as it was typed. Failures
 * and commands no one typed (a session's own /chat:resume) are the harness's own and are not shown. A call id the model used twice is made unique, so one call's result never
 * lands on another.
 */
export function replay(events: readonly Numbered[], verbosity: Verbosity): SessionUpdate[] {
  // Each result answers the earliest call of its id still waiting, so ids reused from turn to turn pair right.
  const waiting = new Map<string, Slot[]>();
  const slots = new Map<number, Slot[]>();
  for (const { n, event } of events) {
    if (event.kind === EVENT_KINDS.message && event.role === "assistant" && event.tool_calls?.length) {
      const mine = event.tool_calls.map((call) => ({ call }));
      slots.set(n, mine);
      for (const slot of mine) waiting.set(slot.call.id, [...(waiting.get(slot.call.id) ?? []), slot]);
    } else if (event.kind === EVENT_KINDS.toolResult) {
      const slot = waiting.get(event.call_id)?.shift();
      if (slot) slot.result = event;
    }
  }
  const used = new Set<string>();
  const unique = (id: string) => {
    let out = id;
    for (let i = 2; used.has(out); i++) out = `${id}#${i}`;
    used.add(out);
    return out;
  };

  const updates: SessionUpdate[] = [];
  for (const { n, event } of events) {
    // A command shows as it was typed, so a loaded chat reads as it was; its reply was kept nowhere.
    if (event.kind === EVENT_KINDS.command && event.text) updates.push(textUpdate(event.text, "user_message_chunk"));
    if (event.kind !== EVENT_KINDS.message) continue;
    if (event.role === "user") {
      if (event.text.length > 0) updates.push(textUpdate(event.text, "user_message_chunk"));
      for (const part of event.parts ?? []) {
        const block = imageBlock(part);
        if (block) updates.push({ sessionUpdate: "user_message_chunk", content: block });
      }
      continue;
    }
    if (event.text.length > 0) updates.push(textUpdate(event.text));
    for (const { call, result } of slots.get(n) ?? []) {
      const status = result && !result.error ? "completed" : "failed";
      const id = unique(call.id);
      updates.push({
        sessionUpdate: "tool_call",
        toolCallId: id,
        title: toolTitle(call.name),
        name: call.name,
        kind: toolKind(call.name),
        status,
        rawInput: rawInput(call.arguments),
        _meta: verbosityMeta(verbosity),
      });
      updates.push(toolResultUpdate(id, status, result ? result.text : UNANSWERED, verbosity));
    }
  }
  return updates;
}

interface Slot {
  call: ToolCall;
  result?: ToolResult;
}
