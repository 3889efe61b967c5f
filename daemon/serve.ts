// Serving ACP on stdio, or on a Unix control socket shared by many connections at once. This path
// loads nothing heavy: each connection's first request, initialize, is answered by its front, and
// the agent (the ACP SDK, the schemas, the sessions) is loaded right after.
import { existsSync, statSync } from "node:fs";
import type { Socket } from "node:net";
import { join } from "node:path";
import { Duplex, Readable, Writable } from "node:stream";
import { lazy, lazyImport } from "../turn/load.js";
import type { RunningAgent } from "./agent.js";
import { UsageError, agentRef, type Command } from "./cli.js";
import { front, type WebStreams } from "./front.js";
import { captureConsole, log } from "./log.js";
import { listenSocket, type ControlSocket } from "./socket.js";
import { version } from "./version.js";

/** The ACP SDK's own default bound on a message: 32 MiB. */
export const DEFAULT_MAX_BYTES = 32 * 1024 * 1024;
/** How long the agent waits to load when no request comes first. */
const LOAD_AFTER_MS = 100;
/** How long a connection waits before each new attempt to load the agent: a moment of EMFILE passes. */
const LOAD_AGAIN_MS = [100, 500, 2_000];

/** The agent could not be loaded for a connection, after every attempt. */
class AgentUnavailable extends Error {
  constructor(cause: unknown) {
    super(`the agent could not be loaded: ${cause instanceof Error ? cause.message : String(cause)}`);
    this.name = "AgentUnavailable";
  }
}

/** The largest message read, in bytes; LNK_ACP_MAX_BYTES overrides the default. */
function maxMessageBytes(env: NodeJS.ProcessEnv): number {
  const raw = env.LNK_ACP_MAX_BYTES;
  if (raw === undefined || raw === "") return DEFAULT_MAX_BYTES;
  const n = Number(raw.trim());
  if (!/^\d+$/.test(raw.trim()) || !Number.isSafeInteger(n) || n < 1024) {
    throw new UsageError(`LNK_ACP_MAX_BYTES must be a whole number of bytes, at least 1024`);
  }
  return n;
}

/**
 * Refuses to serve an agent that isn't there: a folder that doesn't exist (a mistyped --agent), a
 * file, or a folder without settings, each with the command that fixes it. Else the daemon would
 * start without complaint and fail at the first prompt.
 */
function checkAgent(dir: string): void {
  const fix = `lnk-link-harness configure --agent ${dir} < settings.json`;
  let st;
  try {
    st = statSync(dir);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") throw new UsageError(`there is no agent at ${dir}: the folder does not exist; make it with its settings: ${fix}`);
    throw new UsageError(`cannot use the agent's folder ${dir}: ${(e as Error).message}`);
  }
  if (!st.isDirectory()) throw new UsageError(`${dir} is a file, not an agent's folder: name the folder with --agent`);
  if (!existsSync(join(dir, "config.json"))) throw new UsageError(`the agent at ${dir} has no settings yet: ${fix}`);
}

export async function serve(command: Extract<Command, { kind: "serve" }>): Promise<void> {
  if (command.agents) throw new UsageError("--agents is not supported yet: run one process per agent");
  if (command.blank) throw new UsageError("--blank is not supported yet: name the agent with --agent");
  const max = maxMessageBytes(process.env);
  checkAgent(command.agent.agent);
  captureConsole();
  const agent = agentRef(command.agent);
  const ver = version();

  // A load that failed (a moment of EMFILE, say) is tried again, never kept.
  const agentModule = lazyImport(() => import("./agent.js"), () => new URL("./agent.js", import.meta.url).href);
  const started = lazy(async () => (await agentModule()).startAgent({ agent, version: ver, max }));
  let loading: Promise<RunningAgent> | undefined;
  const load = () => (loading = started());
  const timer = setTimeout(
    () => void load().catch((e: unknown) => log.warn("loading the agent failed: the next connection tries again", { error: (e as Error).message })),
    LOAD_AFTER_MS,
  );

  // A daemon outlives any one failure: whatever escapes a handler is logged, never fatal.
  process.on("unhandledRejection", (e) => log.error("unhandled rejection", { error: e instanceof Error ? e.message : String(e) }));

  const connections = new Set<Socket>();
  let control: ControlSocket | undefined;
  let stopping: Promise<void> | undefined;
  /** Stops taking work, lets (or makes) the running turns end, closes the tools and the socket. */
  const stop = (abort: boolean): Promise<void> =>
    (stopping ??= (async () => {
      clearTimeout(timer);
      control?.server.close();
      await (await loading?.catch(() => undefined))?.stop(abort);
      for (const socket of connections) socket.destroy();
      control?.remove();
      log.info("stopped");
    })());

  let exitCode = 0;
  let stopped!: () => void;
  const done = new Promise<void>((resolve) => (stopped = resolve));
  // Kept for the process's life (not `once`): a module that re-raises a signal when no other
  // listener is left (signal-exit, under proper-lockfile) would otherwise kill the daemon mid-stop.
  let signals = 0;
  const onSignal = (signal: NodeJS.Signals) => {
    signals += 1;
    if (signals > 1) {
      log.warn("stopping at once", { signal });
      process.exit(1);
    }
    log.info("stopping", { signal });
    void stop(true).then(stopped);
  };
  process.on("SIGTERM", onSignal);
  process.on("SIGINT", onSignal);

  /** The agent for a connection: loaded, or loaded again after a short wait, a few times. */
  const loadFor = async (): Promise<RunningAgent> => {
    for (let attempt = 0; ; attempt++) {
      try {
        return await load();
      } catch (e) {
        const wait = LOAD_AGAIN_MS[attempt];
        if (wait === undefined || stopping) throw new AgentUnavailable(e);
        log.warn("loading the agent failed: trying again", { error: (e as Error).message, ms: wait });
        await new Promise((resolve) => setTimeout(resolve, wait));
      }
    }
  };

  const connect = async (input: Readable, output: Writable, web: WebStreams): Promise<void> => {
    const c = front(input, output, web, ver, max);
    await c.first;
    clearTimeout(timer);
    return (await loadFor()).connect(c.input, c.output);
  };

  if (command.socket) {
    const path = command.socket;
    control = await listenSocket(path, (socket) => {
      connections.add(socket);
      socket.on("error", (e) => log.warn("connection error", { error: e.message }));
      socket.on("close", () => connections.delete(socket));
      const web = () => Duplex.toWeb(socket) as ReturnType<WebStreams>;
      void connect(socket, socket, web)
        .catch((e: unknown) => log[e instanceof AgentUnavailable ? "error" : "warn"]("connection ended", { error: (e as Error).message }))
        .finally(() => socket.destroy());
    });
    control.server.on("error", (e) => log.error("control socket error", { error: e.message }));
    log.info("serving ACP", { socket: path, agent: agent.dir });
  } else {
    // A client that hangs up closes the pipe: not the daemon's failure.
    process.stdout.on("error", (e) => log.warn("stdout closed", { error: e.message }));
    log.info("serving ACP", { stdio: true, agent: agent.dir });
    const web = () => ({ readable: Readable.toWeb(process.stdin) as ReadableStream<Uint8Array>, writable: Writable.toWeb(process.stdout) });
    void connect(process.stdin, process.stdout, web)
      .catch((e: unknown) => {
        // Its one connection can't be served: the daemon ends, and says so by its exit status.
        if (e instanceof AgentUnavailable) exitCode = 1;
        log[exitCode ? "error" : "warn"]("connection ended", { error: (e as Error).message });
      })
      // The client went away: the turns it started still finish and are kept, then the daemon ends.
      .then(() => stop(false))
      .then(stopped);
  }
  await done;
  process.exit(exitCode);
}
