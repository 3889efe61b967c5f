// Warming a blank process: one conversation with a scratch agent, in a folder of its own removed
// after, over an ACP connection within the process, whose model is a loopback endpoint of this
// process that answers one word, streamed as any OpenAI-compatible endpoint streams. The code of a
// first prompt runs once (the ACP layer and its streams, the session, the turn: settings, events,
// the lock, the window, the model's client and its stream, the copy), so the first prompt of the
// agent bound next is as quick as any after it. Nothing of any agent's is read or kept.
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

/** Runs one prompt of a scratch agent, started with `start`; `forget` drops what the process kept of it. */
export async function warmPrompt(start: (o: AgentOptions) => RunningAgent, forget: () => void): Promise<void> {
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
    await client.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "warm up" }] });
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
}
