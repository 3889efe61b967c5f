// How a tool call looks to an ACP client: its title, its kind, its result as content.
import type { ToolCallContent, ToolCallLocation, ToolKind } from "@agentclientprotocol/sdk";
import { parsedArguments } from "../protocol/index.js";
import { TOOL_SEPARATOR, type ToolMedia } from "../turn/tools.js";

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

/** The arguments as the model sent them: parsed when they are JSON of a depth JSON can be written back at, else the text itself. */
export function rawInput(args: unknown): unknown {
  return typeof args === "string" ? parsedArguments(args) : args;
}

export function textContent(text: string): ToolCallContent[] {
  return text.length > 0 ? [{ type: "content", content: { type: "text", text } }] : [];
}

/** A call's answer as the client shows it: its text, then each image and resource link the tool showed. */
export function answerContent(text: string, media: readonly ToolMedia[] = []): ToolCallContent[] {
  return [
    ...textContent(text),
    ...media.map((m): ToolCallContent =>
      m.type === "image"
        ? { type: "content", content: { type: "image", data: m.data, mimeType: m.mimeType } }
        : { type: "content", content: { type: "resource_link", uri: m.uri, name: m.name, ...(m.mimeType ? { mimeType: m.mimeType } : {}) } },
    ),
  ];
}

/** Argument names that name a file a call reads or writes. */
const PATH_KEYS = ["path", "file", "filePath", "file_path", "filename", "source", "destination"];

/** The files a call's arguments name (an absolute path under a key that names a file), for the client to follow. */
export function locations(args: unknown): ToolCallLocation[] {
  if (args === null || typeof args !== "object" || Array.isArray(args)) return [];
  const out: ToolCallLocation[] = [];
  for (const key of PATH_KEYS) {
    const value = (args as Record<string, unknown>)[key];
    if (typeof value === "string" && value.startsWith("/") && !out.some((l) => l.path === value)) out.push({ path: value });
  }
  const paths = (args as Record<string, unknown>).paths;
  if (Array.isArray(paths)) for (const p of paths) if (typeof p === "string" && p.startsWith("/")) out.push({ path: p });
  return out;
}
