// A process new to a long conversation takes its next turn (a daemon started, then the session
// resumed, then prompted): what a client sees of the turn, with the conversation's window's events
// file as the turn before left it, and without it (removed first: a conversation an earlier version
// wrote), alternating. The conversation is the overhead part's of 10,000 events at the full
// ~2,000-event window; its model is the scripted one behind the timing proxy.
import { rmSync } from "node:fs";
import * as acp from "@agentclientprotocol/sdk";
import { MAIN } from "../fixtures/built.js";
import type { ModelServer } from "../model-server.js";
import { drive, TimingProxy } from "./client.js";
import { daemonNodeArgs } from "./daemon.js";
import { THREAD } from "./fixture.js";
import { FULL_PAIRS, overheadConversation } from "./overhead.js";
import { summarize, type Summary } from "./stats.js";

export interface TakeoverResult {
  /** Events in the conversation before the runs. */
  events: number;
  /** The prompt's overhead (its wall time at the client less the model's), with the file and without it (ms). */
  withFile: Summary;
  without: Summary;
  /** From the daemon's spawn to the prompt's answer (ms). */
  spawnWith: Summary;
  spawnWithout: Summary;
}

export async function measureTakeover(server: ModelServer, o: { size: number; runs: number; log: (line: string) => void }): Promise<TakeoverResult> {
  const proxy = await TimingProxy.start(server.url);
  server.fallback = () => ({ text: "A short answer, in a few chunks.", chunks: 4 });
  try {
    o.log(`takeover: ${o.size} events: preparing the conversation`);
    const { agent, conv } = await overheadConversation(o.size, FULL_PAIRS, proxy.url);
    const overhead = { with: [] as number[], without: [] as number[] };
    const spawned = { with: [] as number[], without: [] as number[] };
    o.log(`takeover: ${o.runs} new processes each way, alternating`);
    // One turn first, which makes the file as the turn before a takeover leaves it.
    for (let i = -1; i < o.runs; i++) {
      for (const keep of i % 2 === 0 ? [true, false] : [false, true]) {
        if (!keep) rmSync(conv.windowEvents, { force: true });
        const t0 = performance.now();
        const d = drive(process.execPath, [...daemonNodeArgs(), MAIN, "--agent", agent.dir]);
        try {
          await d.client.request(acp.methods.agent.initialize, { protocolVersion: acp.PROTOCOL_VERSION, clientCapabilities: {} });
          await d.client.request(acp.methods.agent.session.resume, { sessionId: THREAD, cwd: agent.dir, mcpServers: [] });
          const seen = proxy.exchanges.length;
          const asked = performance.now();
          await d.client.request(acp.methods.agent.session.prompt, { sessionId: THREAD, prompt: [{ type: "text", text: `taken over ${i}` }] });
          const done = performance.now();
          if (i < 0) continue;
          overhead[keep ? "with" : "without"].push(done - asked - proxy.exchanges.slice(seen).reduce((s, e) => s + (e.answered - e.asked), 0));
          spawned[keep ? "with" : "without"].push(done - t0);
        } finally {
          // Its client gone, the daemon brings the turn's derived files up to date and ends.
          await d.close();
        }
      }
    }
    return { events: o.size, withFile: summarize(overhead.with), without: summarize(overhead.without), spawnWith: summarize(spawned.with), spawnWithout: summarize(spawned.without) };
  } finally {
    await proxy.close();
  }
}
