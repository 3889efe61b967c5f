// The ACP agent of this process, loaded once the first request has been answered: the ACP SDK, the
// schemas, the sessions and the turns. Every connection has its own app and stream; all share the
// agent's sessions, turns and tool host. A process serving several agents (--agents) has one of
// these for each, and shares nothing of one agent's with another's but the code.
import * as acp from "@agentclientprotocol/sdk";
import type { AnyMessage } from "@agentclientprotocol/sdk";
import { AcpState, createAgentApp } from "../acp/app.js";
import type { Logger } from "../acp/deps.js";
import { LinkConnection, type Gate } from "../acp/link.js";
import { Outbox } from "../acp/outbox.js";
import type { Settings } from "../protocol/index.js";
import type { AgentRef } from "../store/paths.js";
import { lazy, lazyImport } from "../turn/load.js";
import type { ToolHost } from "../turn/tools.js";
import { answerId, responseId, type MessageSink } from "./front.js";
import { gateLines } from "./gate.js";
import { log } from "./log.js";
import type { Warmed, WarmOptions } from "./warm.js";
import { discoverTools } from "./tools/discover.js";

// A process serving several agents, or started blank, runs with the agent's code: from the same
// bundle (daemon/bundle.ts), so the schemas a Bind or an --agents file is read with are the agent's own.
export { serveBlank } from "./blank.js";
export { serveShared } from "./shared.js";

export interface AgentOptions {
  agent: AgentRef;
  version: string;
  /** The largest message read, in bytes. */
  max: number;
  /** Its environment: its tools (LNK_TOOL_*, LNK_MEMORY) and its key (LNK_KEY); left out, the process's. */
  env?: NodeJS.ProcessEnv;
  /** The names a request may give it in `_meta.link.agent`; left out, its folder's name. */
  names?: readonly string[];
  /** Its key, for the proof; left out, LNK_KEY of its environment. */
  key?: string;
  /** Settings held in memory (a Bind's, filled with its key at each use), read in place of config.json. */
  settings?: Settings | (() => Settings);
  /** Logs nothing (the scratch agent a blank process warms itself with). */
  quiet?: boolean;
  /** Its name on each line it logs: a process that serves several (--agents) says whose each line is. */
  logAs?: string;
}

type Fields = Record<string, unknown>;

/** The log with the agent's name on each line, first, as `agent`. */
function loggingAs(agent: string): Logger {
  const as = (write: (msg: string, fields?: Fields) => void) => (msg: string, fields?: Fields) => write(msg, { agent, ...fields });
  return { info: as(log.info), warn: as(log.warn), error: as(log.error), later: { info: as(log.later.info), warn: as(log.later.warn) } };
}

export interface ConnectOptions {
  /** A port endpoint's: only `initialize` and `_link/prove` are served until the connection proved itself, and it is told then. */
  gate?: Gate;
  /** Takes what the SDK sends as whole messages (the front's); left out, it is encoded onto the output. */
  send?: MessageSink;
}

export interface RunningAgent {
  connect(input: ReadableStream<Uint8Array>, output: WritableStream<Uint8Array>, o?: ConnectOptions): Promise<void>;
  /** Takes no new turns, lets (or makes) the running ones end, and closes the tools. */
  stop(abort: boolean): Promise<void>;
  readonly turns: number;
}

// Loaded when the first prompt needs them; a load that failed is tried again by the next prompt.
const turnModule = lazyImport(() => import("../turn/turn.js"), () => new URL("../turn/turn.js", import.meta.url).href);
const readyModule = lazyImport(() => import("../turn/ready.js"), () => new URL("../turn/ready.js", import.meta.url).href);
const hostModule = lazyImport(() => import("./tools/host.js"), () => new URL("./tools/host.js", import.meta.url).href);

/**
 * Loads the code a first turn runs (the turn, the model's client) ahead of it, and runs the prompts
 * of a scratch agent (daemon/warm.ts): for a process started blank, so that its first prompt once
 * bound waits for no module and runs code V8 has compiled; for the build, so that the code it keeps
 * holds what a first turn and the turns after it run. Nothing of any agent's is read. Resolves with
 * what the warm-up ran.
 */
export async function preload(o: WarmOptions): Promise<Warmed> {
  await turnModule();
  await (await import("../turn/model.js")).preloadModelClient();
  // Link's model facts, parsed once for the process: the first turn's window needs them.
  (await import("../turn/facts.js")).layeredFacts("warm-up");
  const turn = await turnModule();
  const { forgetRuntimeAnswers } = await import("../turn/runtime.js");
  const warm = await import("./warm.js");
  const warmed = await warm.warmPrompts(startAgent, { state: turn.forgetProcessState, answers: forgetRuntimeAnswers }, o);
  // What the warm-up's session asked ahead is done too: a process that says it is loaded is idle.
  await Promise.allSettled([...readying]);
  // Its garbage goes now, unless an agent was bound meanwhile, whose turn the collection would hold up.
  if (o.collect && !o.enough?.()) warm.collectGarbage();
  return warmed;
}

/** What sessions opened ask ahead, under way (turn/ready.ts). */
const readying = new Set<Promise<void>>();

/** Asks what a first turn with these settings asks of its model (turn/ready.ts), kept among those under way. */
function ready(settings: Settings, agentModel: string | undefined, env: NodeJS.ProcessEnv): Promise<void> {
  const began = performance.now();
  const made = readyModule()
    .then((r) => r.readyModel(settings, agentModel, env))
    .then(
      () => log.debug("made ready for a first turn", { ms: Math.round(performance.now() - began) }),
      () => undefined,
    );
  readying.add(made);
  void made.finally(() => readying.delete(made));
  return made;
}

/**
 * Asks ahead what a first turn with these settings asks of its model (turn/ready.ts), in the
 * background: a process bound to an agent does so before its client's first session opens.
 */
export async function readyAhead(settings: Settings, env: NodeJS.ProcessEnv = process.env): Promise<void> {
  await ready(settings, undefined, env);
}

/**
 * Messages to the front's sink, telling the connection each answer once it is written to the client.
 * The SDK's connection takes a writer of its writable for each message it sends, writes the message
 * and lets the writer go (@agentclientprotocol/sdk 2.4, core/jsonrpc.js sendMessage), one message at
 * a time: a writer that hands each message straight to the sink is all it needs. A WritableStream's
 * own queue and promises cost a steady turn's seven or so messages some tenths of a millisecond.
 */
function sendTo(send: MessageSink, conn: LinkConnection): WritableStream<AnyMessage> {
  const writer = {
    write(message: AnyMessage): Promise<void> {
      const answer = responseId(message);
      return send.write(message, answer === undefined ? undefined : () => conn.responded(answer));
    },
    releaseLock(): void {
      // Nothing is held: each write is handed on at once.
    },
  };
  return { getWriter: () => writer } as unknown as WritableStream<AnyMessage>;
}

/** The output, telling the connection each answer once it is written to the client. */
function tapAnswers(output: WritableStream<Uint8Array>, conn: LinkConnection): WritableStream<Uint8Array> {
  const writer = output.getWriter();
  const decoder = new TextDecoder();
  return new WritableStream({
    async write(chunk) {
      await writer.write(chunk);
      const id = answerId(chunk, decoder);
      if (id !== undefined) conn.responded(id);
    },
    close: () => writer.close(),
    abort: (reason) => writer.abort(reason),
  });
}

export function startAgent(o: AgentOptions): RunningAgent {
  // The agent's environment (the process's as it started, when none is given), copied once: a turn
  // reads it (its tools, its secrets), and reading process.env, a lookup in the C++ layer for each
  // name, cost a turn a tenth of a millisecond. Frozen, so that its secrets are found once
  // (turn/redact.ts envSecrets), for each agent of a process that serves many too.
  const env = Object.freeze({ ...(o.env ?? process.env) });
  const key = o.key ?? (env.LNK_KEY || undefined);
  let host: Promise<ToolHost> | undefined;
  const toolHost = lazy(async () => new (await hostModule()).McpToolHost({}, env));
  const held = o.settings;
  const state = new AcpState({
    agent: o.agent,
    version: o.version,
    log: o.quiet ? { info: () => undefined, warn: () => undefined, error: () => undefined } : o.logAs !== undefined ? loggingAs(o.logAs) : log,
    ...(o.names ? { names: o.names } : {}),
    ...(key !== undefined ? { key } : {}),
    ...(held ? { settings: typeof held === "function" ? held : () => held } : {}),
    // Each agent's turn runs with its own environment: its model's key and the secrets kept out of errors.
    // Answered once its events are on disk; its copy and mark are made after, under its lock.
    runTurn: async (input, listener) => (await turnModule()).runTurn({ ...input, env: input.env ?? env }, listener, { early: true, spare: true }),
    status: async (input) => (await turnModule()).statusLines(input),
    ready: (settings, agentModel) => void ready(settings, agentModel, env),
    toolHost: () => (host = toolHost()),
    discoverTools: (settings, servers) => discoverTools(env, { ...(settings ? { settings } : {}), acp: servers }),
  });
  return {
    connect(input, output, c = {}) {
      const outbox = new Outbox();
      const conn = new LinkConnection(c.gate !== undefined && key !== undefined, c.gate);
      const lines = conn.gated ? input.pipeThrough(gateLines(conn)) : input;
      // The lines were bounded already; the SDK's own bound only has to let those through.
      const encoded = acp.ndJsonStream(tapAnswers(output, conn), lines, { maxMessageBytes: o.max + 4096 });
      // What the SDK reads is parsed from the lines (its refusals of bad ones encoded onto the output);
      // what it sends goes to the front's sink, when there is one.
      const stream = c.send ? { readable: encoded.readable, writable: sendTo(c.send, conn) } : encoded;
      const connection = createAgentApp(state, outbox, conn).connect(stream);
      // An answer on its way as the connection closes (its client ended its side, and is still
      // reading) is let reach it first: one written is owed no more (_link/recover).
      return connection.closed.finally(async () => {
        outbox.close();
        // What it opened its sessions with (its working folders, its servers) is let go; another
        // connection's hold of them stays.
        state.sessions.release(conn);
        await c.send?.flushed();
        conn.close();
      });
    },
    async stop(abort) {
      await state.turns.stop(abort);
      // Turns that answered still bring their derived files up to date and let their locks go.
      if (state.turns.started) await (await turnModule()).turnsSettled();
      await host?.then((h) => h.close()).catch((e: unknown) => log.error("closing the tools failed", { error: (e as Error).message }));
    },
    get turns() {
      return state.turns.count;
    },
  };
}
