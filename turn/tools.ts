// The tools a turn may offer and call: the interface the turn uses; the MCP implementation is the daemon's.
// Spec: "How does Link Harness get tools?" through "How many calls does a turn make?" (decisions.txt).

/** Where a tool (an MCP server) is reached. */
export type ToolSource =
  | { type: "http"; url: string; headers?: Record<string, string> }
  | { type: "stdio"; command: string; args: string[]; env?: Record<string, string> };

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

/** A tool's answer as text, whole (the turn cuts it to 32 KiB). */
export interface ToolAnswer {
  text: string;
  error: boolean;
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
}

/** The process's tools: keeps memory's session and each tool's list of calls between turns. */
export interface ToolHost {
  open(servers: readonly ToolServer[], opts?: OpenOptions): Promise<ToolBox>;
  close(): Promise<void>;
}

export const TOOL_SEPARATOR = "__";
export const MEMORY_TOOL = "memory";
