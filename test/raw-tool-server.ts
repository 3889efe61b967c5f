// A tool that lists a call whose arguments' schema nests RAW_DEPTH levels deep, beside a plain one:
// an MCP server on stdio that writes its JSON-RPC lines as text, since a schema thousands deep can't
// be made by JSON.stringify (the SDK's server would fail to send it). Its calls answer with their name.
// Usage: RAW_DEPTH=3000 node dist/test/raw-tool-server.js
import { createInterface } from "node:readline";
import { z } from "zod";

const depth = Number(process.env.RAW_DEPTH ?? 3000);
const Request = z.object({ id: z.union([z.string(), z.number()]).optional(), method: z.string().optional(), params: z.object({ protocolVersion: z.string().optional(), name: z.string().optional() }).loose().optional() }).loose();

const schema = `${'{"type":"object","properties":{"a":'.repeat(depth)}{"type":"string"}${"}}".repeat(depth)}`;
const answer = (id: unknown, result: string): void => void process.stdout.write(`{"jsonrpc":"2.0","id":${JSON.stringify(id)},"result":${result}}\n`);

for await (const line of createInterface({ input: process.stdin })) {
  if (line.trim() === "") continue;
  const msg = Request.parse(JSON.parse(line));
  if (msg.id === undefined) continue;
  switch (msg.method) {
    case "initialize":
      answer(msg.id, JSON.stringify({ protocolVersion: msg.params?.protocolVersion ?? "2025-06-18", capabilities: { tools: {} }, serverInfo: { name: "raw", version: "1.0.0" } }));
      break;
    case "tools/list":
      answer(msg.id, `{"tools":[{"name":"deep","description":"Takes arguments ${depth} deep.","inputSchema":${schema}},{"name":"plain","description":"Takes nothing.","inputSchema":{"type":"object"}}]}`);
      break;
    case "tools/call":
      answer(msg.id, JSON.stringify({ content: [{ type: "text", text: `called ${msg.params?.name ?? ""}` }] }));
      break;
    default:
      answer(msg.id, "{}");
  }
}
