// Warming a blank process: a conversation with a scratch agent, in a folder of its own removed
// after, over an ACP connection within the process, whose model is a loopback endpoint of this
// process that answers one word, streamed as any OpenAI-compatible endpoint streams. The code of a
// prompt runs (the ACP layer and its streams, the session, the turn: settings, events, the lock, the
// window, the model's client and its stream, the copy): the first prompt once, a first turn's code;
// the next ones a later turn's, again and again, so that V8 has compiled the hottest of it by the
// time the agent bound next sends its first prompt. Nothing of any agent's is read or kept.
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as acp from "@agentclientprotocol/sdk";
import type { Settings } from "../protocol/index.js";
import type { AgentOptions, RunningAgent } from "./agent.js";

const chunk = (delta: object, finish: string | null, usage?: object) =>
  `data: ${JSON.stringify({ id: "warm-up", object: "chat.completion.chunk", created: 0, model: "warm-up", choices: [{ index: 0, delta, finish_reason: finish }], ...(usage ? { usage } : {}) })}\n\n`;

export interface WarmOptions {
  /** How many prompts, at most. */
  prompts: number;
  /** Whether to stop before the next prompt: a Bind came, whose prompts the warm-up would slow. */
  enough?: () => boolean;
}

/**
 * Runs prompts of a scratch agent, started with `start`, in one session: `prompts` of them, or fewer
 * once `enough` says so (the first always runs); `forget` drops what the process kept of the agent.
 * Resolves with how many ran.
 */
export async function warmPrompts(start: (o: AgentOptions) => RunningAgent, forget: () => void, o: WarmOptions): Promise<number> {
  let ran = 0;
  const server = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write(chunk({ role: "assistant", content: "warm" }, null));
      res.write(chunk({}, "stop", { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 }));
      res.end("data: [DONE]\n\n");
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const scratch = mkdtempSync(join(tmpdir(), "lnk-link-harness-warm-"));
  let agent: RunningAgent | undefined;
  try {
    const { port } = server.address() as AddressInfo;
    const settings: Settings = { model: { provider: "warm-up", name: "warm-up", base_url: `http://127.0.0.1:${port}/v1` }, window: { max: 8192 } };
    agent = start({ agent: { dir: scratch }, version: "warm-up", max: 1024 * 1024, env: {}, settings, quiet: true });
    const toAgent = new TransformStream<Uint8Array, Uint8Array>();
    const toClient = new TransformStream<Uint8Array, Uint8Array>();
    const served = agent.connect(toAgent.readable, toClient.writable);
    const client = acp
      .client({ name: "warm-up" })
      .onNotification(acp.methods.client.session.update, () => undefined)
      .connect(acp.ndJsonStream(toAgent.writable, toClient.readable));
    await client.agent.request(acp.methods.agent.initialize, { protocolVersion: acp.PROTOCOL_VERSION, clientCapabilities: {} });
    const { sessionId } = await client.agent.request(acp.methods.agent.session.new, { cwd: scratch, mcpServers: [], _meta: { link: { thread: "warm-up" } } });
    do {
      await client.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "warm up" }] });
      ran++;
    } while (ran < o.prompts && !o.enough?.());
    client.close();
    // Its connection is let go: nothing waits for it to end.
    void served.catch(() => undefined);
  } finally {
    await agent?.stop(false);
    server.closeAllConnections();
    server.close();
    rmSync(scratch, { recursive: true, force: true });
    forget();
  }
  return ran;
}
