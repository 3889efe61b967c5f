// The messages a turn sends: the system prompt, then the window's events as the model reads them.
// The same events always make the same bytes, so each request starts with the previous one.
import type { AssistantMessage, Event, Numbered, Part, UserMessage } from "../protocol/index.js";
import { derived } from "./derived.js";

export type ChatMessage =
  | { role: "system"; content: string }
  | { role: "user"; content: string | (Part | { type: "text"; text: string })[] }
  | {
      role: "assistant";
      content: string | null;
      tool_calls?: { id: string; type: "function"; function: { name: string; arguments: string } }[];
      reasoning_content?: string;
      reasoning?: string;
      reasoning_details?: unknown[];
    }
  | { role: "tool"; tool_call_id: string; content: string };

/** What a call left without an answer (a crash, a cancel) is answered with, so the prompt stays valid. */
export const UNANSWERED = "unanswered: the turn that made this call ended before the tool answered";

function userContent(event: UserMessage): ChatMessage & { role: "user" } {
  const { header, text, parts, skill } = event;
  // A skill asked for by /skill:<name> goes with the message, as it was read then.
  const head = `${header}\n${text}${skill ? `\n\n<skill name="${skill.name}" path="${skill.path}">\n${skill.text}\n</skill>` : ""}`;
  if (!parts?.length) return { role: "user", content: head };
  return { role: "user", content: [{ type: "text", text: head }, ...parts] };
}

/**
 * An event's message, made once per process (see derived.ts): the same event always makes the same
 * message object, which lets a request reuse the bytes of the one before (body.ts). Kept frozen,
 * since it is shared.
 */
function once(event: Event, make: () => ChatMessage): ChatMessage {
  return derived(event, "message", () => Object.freeze(make()));
}

function assistantMessage(event: AssistantMessage): ChatMessage {
  const msg: ChatMessage & { role: "assistant" } = { role: "assistant", content: event.text || null };
  if (event.tool_calls?.length) {
    msg.tool_calls = event.tool_calls.map((c) => ({ id: c.id, type: "function", function: { name: c.name, arguments: c.arguments } }));
    // A model's thinking goes back with its calls, as the provider requires.
    if (event.thinking?.reasoning_content !== undefined) msg.reasoning_content = event.thinking.reasoning_content;
    if (event.thinking?.reasoning !== undefined) msg.reasoning = event.thinking.reasoning;
    if (event.thinking?.reasoning_details !== undefined) msg.reasoning_details = event.thinking.reasoning_details;
  }
  if (msg.content === null && !msg.tool_calls) msg.content = "";
  return msg;
}

function callsAsText(event: AssistantMessage, answers: Map<string, string>): string {
  const lines = event.text ? [event.text] : [];
  for (const call of event.tool_calls ?? []) {
    lines.push(`[called ${call.name} ${call.arguments}]`);
    lines.push(`[${call.name} answered: ${answers.get(call.id) ?? UNANSWERED}]`);
  }
  return lines.join("\n");
}

export interface PromptOptions {
  /** Whether tools are offered this turn: without them, calls and answers go to the model as text. */
  tools: boolean;
}

/** The window's events as chat messages (after the system prompt). */
export function eventsToMessages(events: readonly Numbered[], opts: PromptOptions): ChatMessage[] {
  const out: ChatMessage[] = [];
  // Without tools, each answer with its calls' answers, as text: those written after it, before the
  // next message (a model may use one id in two rounds, each its own answer).
  const answersOf = new Map<AssistantMessage, Map<string, string>>();
  if (!opts.tools) {
    let last: Map<string, string> | undefined;
    for (const { event } of events) {
      if (event.kind === "message") {
        last = event.role === "assistant" && event.tool_calls?.length ? new Map() : undefined;
        if (last && event.role === "assistant") answersOf.set(event, last);
      } else if (event.kind === "tool_result" && last && !last.has(event.call_id)) last.set(event.call_id, event.text);
    }
  }

  let pending: string[] = [];
  const closeCalls = () => {
    for (const id of pending) out.push({ role: "tool", tool_call_id: id, content: UNANSWERED });
    pending = [];
  };
  for (const { event } of events) {
    switch (event.kind) {
      case "message":
        closeCalls();
        if (event.role === "user") out.push(once(event, () => userContent(event)));
        else if (!opts.tools && event.tool_calls?.length) out.push({ role: "assistant", content: callsAsText(event, answersOf.get(event) ?? new Map()) });
        else {
          out.push(once(event, () => assistantMessage(event)));
          pending = event.tool_calls?.map((c) => c.id) ?? [];
        }
        break;
      case "tool_result":
        if (!opts.tools) break;
        if (pending.includes(event.call_id)) {
          pending = pending.filter((id) => id !== event.call_id);
          out.push(once(event, () => ({ role: "tool", tool_call_id: event.call_id, content: event.text })));
        }
        break;
      case "command":
      case "failure":
        break;
      default: {
        const never: never = event;
        throw new Error(`unknown event ${String(never)}`);
      }
    }
  }
  closeCalls();
  return out;
}
