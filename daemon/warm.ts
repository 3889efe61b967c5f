// Warming a blank process: one turn of a scratch agent, in a folder of its own removed after, whose
// model is a loopback endpoint of this process that answers one word, streamed as any
// OpenAI-compatible endpoint streams. The turn's code runs once (settings, events, the lock, the
// window, the model's client and its stream, the copy), so the first turn of the agent bound next
// is as quick as any after it. Nothing of any agent's is read or kept.
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Settings } from "../protocol/index.js";
import type { TurnInput, TurnListener, TurnOutcome } from "../turn/types.js";

const chunk = (delta: object, finish: string | null, usage?: object) =>
  `data: ${JSON.stringify({ id: "warm-up", object: "chat.completion.chunk", created: 0, model: "warm-up", choices: [{ index: 0, delta, finish_reason: finish }], ...(usage ? { usage } : {}) })}\n\n`;

/** Runs one scratch turn against a loopback endpoint of this process; the forget step drops what the process kept of it. */
export async function warmTurn(runTurn: (input: TurnInput, listener: TurnListener) => Promise<TurnOutcome>, forget: () => void): Promise<void> {
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
  try {
    const { port } = server.address() as AddressInfo;
    const settings: Settings = { model: { provider: "warm-up", name: "warm-up", base_url: `http://127.0.0.1:${port}/v1` }, window: { max: 8192 } };
    await runTurn({ agent: { dir: scratch }, thread: "warm-up", message: { text: "warm up" }, settings }, () => undefined);
  } finally {
    server.closeAllConnections();
    server.close();
    rmSync(scratch, { recursive: true, force: true });
    forget();
  }
}
