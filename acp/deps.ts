// What the ACP layer is given by the process that serves it: the agent, the turn, the tools, a log.
import type { McpServer } from "@agentclientprotocol/sdk";
import type { Settings } from "../protocol/index.js";
import type { AgentRef } from "../store/index.js";
import type { ToolHost, ToolServer } from "../turn/tools.js";
import type { TurnInput, TurnListener, TurnOutcome } from "../turn/types.js";
import type { StatusInput } from "../turn/status.js";

type Fields = Record<string, unknown>;

export interface Logger {
  info(msg: string, fields?: Fields): void;
  warn(msg: string, fields?: Fields): void;
  error(msg: string, fields?: Fields): void;
  /** Lines written once the event loop comes round, before any line logged after them; where missing, they are written now. */
  later?: Pick<Logger, "info" | "warn">;
}

export interface AcpDeps {
  agent: AgentRef;
  version: string;
  /** The names a request may give this agent in `_meta.link.agent` (its name and id); left out, its folder's name. */
  names?: readonly string[];
  /** The key it proves itself with (LNK_KEY, or the Bind's): never logged, sent or written. */
  key?: string;
  /** Its settings, when they are held in memory (a Bind's) rather than read from config.json at each turn. */
  settings?(): Settings;
  log: Logger;
  /** Runs one turn (loaded when the first prompt needs it, so `initialize` is answered fast). */
  runTurn(input: TurnInput, listener: TurnListener): Promise<TurnOutcome>;
  /** /status: what a conversation is and holds (loaded with the turn, when first asked). */
  status?(input: StatusInput): Promise<string[]>;
  /**
   * Makes ready what a first turn with these settings asks of its model ahead of it (its window's
   * facts, the model's client), in the background: a session was opened, its first prompt is near.
   */
  ready?(settings: Settings, agentModel: string | undefined): void;
  /** The process's one tool host, made when a turn first needs it. */
  toolHost?(): Promise<ToolHost>;
  /** The tools a conversation reaches: the environment's, the settings' and its session's own servers. */
  discoverTools?(settingsTools: Record<string, string> | undefined, session: readonly McpServer[]): ToolServer[];
}
