// The floor of a turn as a client sees it: a process that speaks the same newline-delimited JSON-RPC
// on stdio, and answers a session/prompt by forwarding its text to the model (streaming, as the
// daemon does) and the answer back, with no disk, no history, no schema: what any harness must do.
// `node passthrough.js <base_url>`.
import { request } from "node:http";
import { createInterface } from "node:readline";

const base = process.argv[2] ?? "";

function ask(text: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const body = JSON.stringify({ model: "pass", stream: true, stream_options: { include_usage: true }, messages: [{ role: "user", content: text }] });
    const req = request(`${base}/chat/completions`, { method: "POST", headers: { "content-type": "application/json", "content-length": Buffer.byteLength(body) } }, (res) => {
      res.on("data", (chunk: Buffer) => {
        // Each chunk goes to the client as it comes, as an answer's text would.
        const update = { sessionUpdate: "agent_message_chunk", content: { type: "text", text: `${chunk.length} bytes` } };
        process.stdout.write(`${JSON.stringify({ jsonrpc: "2.0", method: "session/update", params: { sessionId: "pass", update } })}\n`);
      });
      res.on("end", resolve);
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end(body);
  });
}

/** The prompt's first text, read without a schema: the floor pays for no validation. */
function promptText(params: unknown): string {
  const prompt = params !== null && typeof params === "object" && "prompt" in params ? params.prompt : undefined;
  const first: unknown = Array.isArray(prompt) ? prompt[0] : undefined;
  return first !== null && typeof first === "object" && "text" in first && typeof first.text === "string" ? first.text : "";
}

/** What the client's initialize and session/new are answered, as little as the ACP client takes. */
const RESULTS: Record<string, unknown> = { initialize: { protocolVersion: 1, agentCapabilities: {} }, "session/new": { sessionId: "pass" } };

createInterface({ input: process.stdin }).on("line", (line) => {
  const m: unknown = JSON.parse(line);
  if (m === null || typeof m !== "object" || !("id" in m) || !("method" in m)) return;
  const answer = (result: unknown) => process.stdout.write(`${JSON.stringify({ jsonrpc: "2.0", id: m.id, result })}\n`);
  if (m.method !== "session/prompt") {
    answer(RESULTS[String(m.method)] ?? {});
    return;
  }
  void ask(promptText("params" in m ? m.params : undefined)).then(
    () => answer({ stopReason: "end_turn" }),
    (e: unknown) => process.stdout.write(`${JSON.stringify({ jsonrpc: "2.0", id: m.id, error: { code: -32603, message: String(e) } })}\n`),
  );
});
