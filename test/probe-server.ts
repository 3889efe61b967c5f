// A tool that tells about itself, for tests: an MCP server on stdio whose calls answer with the
// folder it was started in and a variable of its environment, or write to stderr and exit, or answer
// only once several calls run at once (so a test sees calls side by side, not by the clock), or answer
// with as many bytes as asked.
// Usage: node dist/test/probe-server.js
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { z } from "zod";
import { meeting } from "./fixtures/meeting.js";

const server = new McpServer({ name: "probe", version: "1.0.0" });

server.registerTool("cwd", { description: "The folder this tool was started in." }, () => ({
  content: [{ type: "text", text: process.cwd() }],
}));

server.registerTool("env", { description: "The value of a variable of this tool's environment.", inputSchema: { name: z.string() } }, ({ name }) => ({
  content: [{ type: "text", text: `${name}=${process.env[name] ?? ""}` }],
}));

server.registerTool(
  "crash",
  { description: "Writes a variable of its environment to stderr, then exits before answering.", inputSchema: { name: z.string() } },
  ({ name }) => {
    process.stderr.write(`crashing with ${name}=${process.env[name] ?? ""}\n`, () => process.exit(3));
    return new Promise<never>(() => {});
  },
);

server.registerTool("big", { description: "Answers with `bytes` bytes of text: one long line on the pipe.", inputSchema: { bytes: z.number().int().min(1) } }, ({ bytes }) => ({
  content: [{ type: "text", text: "z".repeat(bytes) }],
}));

const meet = meeting(15_000);
server.registerTool(
  "meet",
  {
    description: "Answers once `count` calls of it are running at once in this process (alone, after 15 s).",
    inputSchema: { count: z.number().int().min(1) },
  },
  async ({ count }) => {
    const met = await meet(count);
    return { content: [{ type: "text", text: met >= count ? `met ${met}` : `alone: ${met} running` }] };
  },
);

await server.connect(new StdioServerTransport());
