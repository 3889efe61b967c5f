// Serving ACP: on stdio, or on a Unix control socket shared by many connections at once. Every
// connection has its own app and stream; all share the process's sessions, turns and tool host.
import type { Socket } from "node:net";
import { Duplex, Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";
import { z } from "zod";
import { AcpState, createAgentApp } from "../acp/app.js";
import { Outbox } from "../acp/outbox.js";
import type { ToolHost } from "../turn/tools.js";
import type { Command } from "./cli.js";
import { UsageError } from "./cli.js";
import { agentRef } from "./commands.js";
import { limitLines } from "./lines.js";
import { log } from "./log.js";
import { listenSocket, type ControlSocket } from "./socket.js";
import { discoverTools } from "./tools/discover.js";
import { version } from "./version.js";

/** The largest message read, in bytes; LNK_ACP_MAX_BYTES overrides the ACP SDK's own default. */
function maxMessageBytes(env: NodeJS.ProcessEnv): number {
  const raw = env.LNK_ACP_MAX_BYTES;
  if (raw === undefined || raw === "") return acp.DEFAULT_MAX_MESSAGE_BYTES;
  const parsed = z.coerce.number().int().min(1024).safeParse(raw);
  if (!parsed.success) throw new UsageError(`LNK_ACP_MAX_BYTES must be a whole number of bytes, at least 1024`);
  return parsed.data;
}

export async function serve(command: Extract<Command, { kind: "serve" }>): Promise<void> {
  if (command.agents) throw new UsageError("--agents is not supported yet: run one process per agent");
  if (command.blank) throw new UsageError("--blank is not supported yet: name the agent with --agent");
  const max = maxMessageBytes(process.env);
  const agent = agentRef(command.agent);

  let host: Promise<ToolHost> | undefined;
  const state = new AcpState({
    agent,
    version: version(),
    log,
    // Loaded when the first prompt needs it, so `initialize` is answered fast.
    runTurn: async (input, listener) => (await import("../turn/turn.js")).runTurn(input, listener),
    toolHost: () => (host ??= import("./tools/host.js").then(({ McpToolHost }) => new McpToolHost())),
    discoverTools: (settings, servers) => discoverTools(process.env, { ...(settings ? { settings } : {}), acp: servers }),
  });

  // A daemon outlives any one failure: whatever escapes a handler is logged, never fatal.
  process.on("unhandledRejection", (e) => log.error("unhandled rejection", { error: e instanceof Error ? e.message : String(e) }));

  const connections = new Set<Socket>();
  let control: ControlSocket | undefined;
  let stopping: Promise<void> | undefined;
  /** Stops taking work, lets (or makes) the running turns end, closes the tools and the socket. */
  const stop = (abort: boolean): Promise<void> =>
    (stopping ??= (async () => {
      control?.server.close();
      await state.turns.stop(abort);
      await host?.then((h) => h.close()).catch((e: unknown) => log.error("closing the tools failed", { error: (e as Error).message }));
      for (const socket of connections) socket.destroy();
      control?.remove();
      log.info("stopped");
    })());

  let stopped!: () => void;
  const done = new Promise<void>((resolve) => (stopped = resolve));
  const onSignal = (signal: NodeJS.Signals) => {
    log.info("stopping", { signal, turns: state.turns.count });
    void stop(true).then(stopped);
  };
  process.once("SIGTERM", onSignal);
  process.once("SIGINT", onSignal);

  const connect = (input: ReadableStream<Uint8Array>, output: WritableStream<Uint8Array>): Promise<void> => {
    const outbox = new Outbox();
    const stream = acp.ndJsonStream(output, input.pipeThrough(limitLines(max)), { maxMessageBytes: max + 4096 });
    const connection = createAgentApp(state, outbox).connect(stream);
    return connection.closed.finally(() => outbox.close());
  };

  if (command.socket) {
    const path = command.socket;
    control = await listenSocket(path, (socket) => {
      connections.add(socket);
      socket.on("error", (e) => log.warn("connection error", { error: e.message }));
      socket.on("close", () => connections.delete(socket));
      const { readable, writable } = Duplex.toWeb(socket);
      void connect(readable as ReadableStream<Uint8Array>, writable)
        .catch((e: unknown) => log.warn("connection ended", { error: (e as Error).message }))
        .finally(() => socket.destroy());
    });
    control.server.on("error", (e) => log.error("control socket error", { error: e.message }));
    log.info("serving ACP", { socket: path, agent: agent.dir });
  } else {
    // A client that hangs up closes the pipe: not the daemon's failure.
    process.stdout.on("error", (e) => log.warn("stdout closed", { error: e.message }));
    log.info("serving ACP", { stdio: true, agent: agent.dir });
    const stdin = Readable.toWeb(process.stdin) as ReadableStream<Uint8Array>;
    void connect(stdin, Writable.toWeb(process.stdout))
      .catch((e: unknown) => log.warn("connection ended", { error: (e as Error).message }))
      // The client went away: the turns it started still finish and are kept, then the daemon ends.
      .then(() => stop(false))
      .then(stopped);
  }
  await done;
  process.exit(0);
}
