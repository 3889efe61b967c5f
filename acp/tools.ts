// How a tool call looks to an ACP client: its title, its kind, its result as content.
import type { ToolCallContent, ToolKind } from "@agentclientprotocol/sdk";
import { TOOL_SEPARATOR } from "../turn/tools.js";

/** `<tool>__<call>` → "tool: call", as a person reads it. */
export function toolTitle(name: string): string {
  const at = name.indexOf(TOOL_SEPARATOR);
  if (at <= 0) return name;
  return `${name.slice(0, at)}: ${name.slice(at + TOOL_SEPARATOR.length)}`;
}

const KINDS: readonly [RegExp, ToolKind][] = [
  [/(^|[_-])(search|find|grep|query|lookup)([_-]|$)/, "search"],
  [/(^|[_-])(delete|remove|rm|unlink)([_-]|$)/, "delete"],
  [/(^|[_-])(move|rename|mv)([_-]|$)/, "move"],
  [/(^|[_-])(write|edit|create|update|append|patch|insert|set|add)([_-]|$)/, "edit"],
  [/(^|[_-])(exec|execute|run|shell|bash|command|terminal)([_-]|$)/, "execute"],
  [/(^|[_-])(fetch|http|browse|navigate|download|url)([_-]|$)/, "fetch"],
  [/(^|[_-])(read|get|list|show|view|open|cat|links)([_-]|$)/, "read"],
  [/(^|[_-])(think|reason|plan)([_-]|$)/, "think"],
];

/**
 * A tool's kind, guessed from its call's name (an MCP tool says nothing of it): clients choose an
 * icon by it, and a wrong guess costs only the icon, so anything unclear is "other".
 */
export function toolKind(name: string): ToolKind {
  const at = name.indexOf(TOOL_SEPARATOR);
  const call = (at > 0 ? name.slice(at + TOOL_SEPARATOR.length) : name).toLowerCase();
  for (const [pattern, kind] of KINDS) if (pattern.test(call)) return kind;
  return "other";
}

/** The arguments as the model sent them: parsed when they are JSON, else the text itself. */
export function rawInput(args: unknown): unknown {
  if (typeof args !== "string") return args;
  try {
    const parsed: unknown = JSON.parse(args);
    return parsed;
  } catch {
    return args;
  }
}

export function textContent(text: string): ToolCallContent[] {
  return text.length > 0 ? [{ type: "content", content: { type: "text", text } }] : [];
}
