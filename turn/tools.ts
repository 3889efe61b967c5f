// The tools a turn may offer and call: the interface the turn uses; the MCP implementation is the daemon's.
// Spec: "How does Link Harness get tools?" through "How many calls does a turn make?" (decisions.txt).
import type { Settings, TimeoutsSettings } from "../protocol/index.js";
import { paths, type AgentRef } from "../store/index.js";
import { settingsSecrets } from "./redact.js";
import { isHighSurrogate } from "./wellformed.js";

/** Where a tool (an MCP server) is reached. */
export type ToolSource =
  | { type: "http"; url: string; headers?: Record<string, string> }
  | {
      type: "stdio";
      command: string;
      args: string[];
      env?: Record<string, string>;
      /** The folder it starts in; left out, the workspace the turn opens its tools with. */
      cwd?: string;
    };

/** A tool: one MCP server, named as the model sees it before `__`. */
export interface ToolServer {
  /** Lower-case name: `memory`, or <NAME> of LNK_TOOL_<NAME> lower-cased. */
  name: string;
  source: ToolSource;
}

/** One call offered to the model as `<tool>__<call>`. */
export interface OfferedCall {
  /** `<tool>__<call>` */
  name: string;
  tool: string;
  call: string;
  description: string;
  /** The call's JSON Schema for its arguments. */
  parameters: Record<string, unknown>;
}

/**
 * What a tool showed beside its text, for the client to show: an image, or a link to a resource. The
 * model is sent the text alone (which names each), held to 32 KiB; this goes to the client only.
 */
export type ToolMedia = { type: "image"; data: string; mimeType: string } | { type: "resource_link"; uri: string; name: string; mimeType?: string };

/** A tool's answer as text, whole (the turn cuts it to 32 KiB), and what it showed beside it. */
export interface ToolAnswer {
  text: string;
  error: boolean;
  media?: ToolMedia[];
}

/** The tools of one turn. */
export interface ToolBox {
  /** Every call offered this turn, in the same order every turn. */
  readonly offered: readonly OfferedCall[];
  /**
   * Calls `<tool>__<call>`. Never throws for a tool's failure: an MCP error, an `isError` result, a
   * tool that is unavailable or a call not offered all come back as `{error: true}` answers.
   */
  call(name: string, args: Record<string, unknown>, signal?: AbortSignal): Promise<ToolAnswer>;
  /** Ends the turn's sessions (every tool's but memory's, which the host keeps). */
  close(): Promise<void>;
}

export interface OpenOptions {
  /** A subagent's list (tools.json): tool names or `<tool>__<call>` names; left out, every tool. */
  allowed?: readonly string[];
  signal?: AbortSignal;
  /** The workspace, where stdio tools start: the agent's files folder. */
  cwd?: string;
  /** Bounds on each call, in seconds (the settings' timeouts). */
  timeouts?: Pick<TimeoutsSettings, "tool_call" | "tool_idle">;
  /** Secrets the tools' own sources and the environment don't hold (the model's key): never in an answer. */
  secrets?: readonly string[];
}

/**
 * What a turn opens its tools with besides its list: the workspace, the settings' bounds, their
 * secrets. Spec: "The workspace, the folder an agent's tools work in, is the agent's files folder."
 */
export function openOptions(agent: AgentRef, settings: Settings): Pick<OpenOptions, "cwd" | "timeouts" | "secrets"> {
  return { cwd: paths(agent).files, ...(settings.timeouts ? { timeouts: settings.timeouts } : {}), secrets: settingsSecrets(settings) };
}

/** The process's tools: keeps memory's session and each tool's list of calls between turns. */
export interface ToolHost {
  open(servers: readonly ToolServer[], opts?: OpenOptions): Promise<ToolBox>;
  close(): Promise<void>;
}

export const TOOL_SEPARATOR = "__";
export const MEMORY_TOOL = "memory";

/** `text` cut to at most `max` characters, ended with an ellipsis, never inside a character. */
export function cutDescription(text: string, max: number): string {
  if (text.length <= max) return text;
  let end = Math.max(0, max - 1);
  if (isHighSurrogate(text.charCodeAt(end - 1))) end--;
  return `${text.slice(0, end)}…`;
}
