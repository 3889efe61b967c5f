// What a turn takes and what it reports: plain data, no ACP (the ACP layer maps these to session/update).
import type { From, Part, SectionName, StopReason, Usage, Event, Settings, Verbosity } from "../protocol/index.js";
import type { AgentRef, ConversationPaths } from "../store/index.js";
import type { ToolHost, ToolMedia, ToolServer } from "./tools.js";

/** A message the turn answers (or a message that steers a running turn). */
export interface IncomingMessage {
  text: string;
  parts?: Part[];
  /** Left out, the owner. */
  from?: From;
  channel?: string;
  /** The working folder of the session it came in, kept with it (not sent to the model). */
  cwd?: string;
  /** When it was sent; left out, now. */
  time?: Date;
  /** `/skill:<name>`: the skill it asks for, as read now. */
  skill?: { name: string; path: string; text: string };
}

export interface TurnInput {
  agent: AgentRef;
  thread: string;
  /**
   * The conversation of the chat the message is for, when its session named one (`<thread>~<name>`):
   * made the chat's current one first, with a /chat:resume. Left out, the chat's current one.
   */
  conversation?: string;
  /** The agent's model as `/model:set --agent` set it in this process, until the agent starts again. */
  agentModel?: string;
  message: IncomingMessage;
  /** The tools of this turn: the process's tool host, with the conversation's own MCP servers. */
  tools?: ToolHost;
  /** The tools (MCP servers) this conversation reaches: the agent's and its session's own. */
  toolServers?: readonly ToolServer[];
  /** Aborting it is /stop: the turn ends cleanly, events written so far stay, stop reason `cancelled`. */
  signal?: AbortSignal;
  /**
   * Messages that arrived while the turn runs: the turn takes each (writing it as an event) before
   * its next request to the model, and answers it even past the last round of calls.
   */
  steering?: SteerQueue;
  /** Settings as last read (the turn reads config.json itself when left out). */
  settings?: Settings;
  /** The agent's environment: its tools (LNK_TOOL_*, LNK_MEMORY) and its model's key (LNK_MODEL_KEY); left out, process.env. */
  env?: NodeJS.ProcessEnv;
}

/** A queue the ACP layer pushes steering messages into while a turn runs. */
export interface SteerQueue {
  take(): IncomingMessage[];
}

/** What a turn reports as it happens. */
export type TurnEvent =
  | { type: "event"; n: number; event: Event }
  | { type: "text"; delta: string }
  | { type: "tool_call"; id: string; name: string; arguments: unknown }
  | { type: "tool_result"; id: string; name: string; status: "completed" | "failed"; text: string; media?: ToolMedia[] }
  /**
   * After each request to the model: the provider's counts (when it sent them), the tokens the window
   * holds now (the prompt and the answer: the provider's count, else the rough one), the model's
   * window, and the conversation's cost so far when the provider reports one.
   */
  | { type: "usage"; usage?: Usage; used: number; size: number; cost?: number }
  /** This turn's system prompt differs from the previous turn's in these sections (in the prompt's order). */
  | { type: "prompt_changed"; sections: SectionName[] }
  /** The chat's verbosity as its own /verbosity:set chose it, found once the conversation is read. */
  | { type: "verbosity"; verbosity: Verbosity }
  /**
   * The turn's question, or a message that steers it, is written next after event `after`: the
   * turn's last answer from there on answers it, and every message the turn took before it.
   * `through`: the paths the turn's lock holds the conversation's folder by, for a file written
   * beside its events while it holds it (store/folder.ts withFolder). `conversation`: the name of
   * the chat's conversation it writes (`main` in a chat of one). `time`: the message's, which tells it
   * from another written at the same number (store/owed.ts messageTag).
   */
  | { type: "asked"; after: number; through: ConversationPaths; conversation?: string; time?: string }
  /** Something went wrong that doesn't fail the turn (a derived file not written): for the log. */
  | { type: "warning"; message: string };

export interface TurnOutcome {
  stop: StopReason;
  /** Summed over the turn's requests, from the provider's own counts. */
  usage?: Usage;
  /** Set when the turn failed: why, in words a person can act on. */
  failure?: { reason: string; message: string };
  /** Time spent waiting on the model, summed over the turn's requests (ms): the rest is the turn's own. */
  modelMs: number;
  /** The number of the last answer written, if any. */
  answer?: number;
}

export type TurnListener = (event: TurnEvent) => void;
