// The ACP agent of this process, loaded once the first request has been answered: the ACP SDK, the
// schemas, the sessions and the turns. Every connection has its own app and stream; all share the
// process's sessions, turns and tool host.
import * as acp from "@agentclientprotocol/sdk";
import { AcpState, createAgentApp } from "../acp/app.js";
import { Outbox } from "../acp/outbox.js";
import type { AgentRef } from "../store/paths.js";
import { lazy, lazyImport } from "../turn/load.js";
import type { ToolHost } from "../turn/tools.js";
import { log } from "./log.js";
import { discoverTools } from "./tools/discover.js";

export interface AgentOptions {
  agent: AgentRef;
  version: string;
  /** The largest message read, in bytes. */
  max: number;
}

export interface RunningAgent {
  connect(input: ReadableStream<Uint8Array>, output: WritableStream<Uint8Array>): Promise<void>;
  /** Takes no new turns, lets (or makes) the running ones end, and closes the tools. */
  stop(abort: boolean): Promise<void>;
  readonly turns: number;
}

// Loaded when the first prompt needs them; a load that failed is tried again by the next prompt.
const turnModule = lazyImport(() => import("../turn/turn.js"), () => new URL("../turn/turn.js", import.meta.url).href);
const hostModule = lazyImport(() => import("./tools/host.js"), () => new URL("./tools/host.js", import.meta.url).href);

export function startAgent(o: AgentOptions): RunningAgent {
  let host: Promise<ToolHost> | undefined;
  const toolHost = lazy(async () => new (await hostModule()).McpToolHost());
  const state = new AcpState({
    agent: o.agent,
    version: o.version,
    log,
    runTurn: async (input, listener) => (await turnModule()).runTurn(input, listener),
    status: async (input) => (await turnModule()).statusLines(input),
    toolHost: () => (host = toolHost()),
    discoverTools: (settings, servers) => discoverTools(process.env, { ...(settings ? { settings } : {}), acp: servers }),
  });
  return {
    connect(input, output) {
      const outbox = new Outbox();
      // The lines were bounded already; the SDK's own bound only has to let those through.
      const stream = acp.ndJsonStream(output, input, { maxMessageBytes: o.max + 4096 });
      const connection = createAgentApp(state, outbox).connect(stream);
      return connection.closed.finally(() => outbox.close());
    },
    async stop(abort) {
      await state.turns.stop(abort);
      await host?.then((h) => h.close()).catch((e: unknown) => log.error("closing the tools failed", { error: (e as Error).message }));
    },
    get turns() {
      return state.turns.count;
    },
  };
}
