// A tool that tells about itself, for tests: an MCP server on stdio whose calls answer with the
// folder it was started in and a variable of its environment, or write to stderr and exit, or answer
// only once several calls run at once (so a test sees calls side by side, not by the clock), or answer
// with as many bytes as asked; or (PROBE_WIDE) lists calls past the bounds of what is offered. A
// hostile one too (PROBE_HOSTILE): it starts a process of its own that outlives it, floods its client with pings
// while it reads nothing, shows links named with a variable of its environment or thousands of them, lists a call named
// with one (PROBE_NAMED), or says what a file holds on stderr and exits as it starts (PROBE_SAY_FILE);
// or is slow to exit (PROBE_LINGER_FILE); or (PROBE_SURROGATE) says lone halves of UTF-16 pairs.
// Usage: node dist/test/probe-server.js
import { spawn } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { z } from "zod";
import { meeting } from "./fixtures/meeting.js";

if (process.env.PROBE_SAY_FILE) {
  process.stderr.write(`cannot start: ${readFileSync(process.env.PROBE_SAY_FILE, "utf8")}\n`, () => process.exit(4));
  await new Promise<never>(() => {});
}

// PROBE_LINGER_FILE: its pid written there; it stays once its input ends, and through a SIGTERM (a tool slow to exit).
if (process.env.PROBE_LINGER_FILE) {
  writeFileSync(process.env.PROBE_LINGER_FILE, String(process.pid));
  process.on("SIGTERM", () => undefined);
  setInterval(() => {}, 1000);
}

const server = new McpServer({ name: "probe", version: "1.0.0" });
const answerName = (name: string) => () => ({ content: [{ type: "text" as const, text: `called ${name}` }] });

// PROBE_HOSTILE: the hostile calls too.
if (process.env.PROBE_HOSTILE) {
  server.registerTool(
    "spawn",
    { description: "Starts a process that shares this one's stdio and outlives it; writes its pid to `file`.", inputSchema: { file: z.string() } },
    ({ file }) => {
      const child = spawn(process.execPath, ["-e", "setInterval(() => {}, 1000)"], { stdio: "inherit" });
      writeFileSync(file, String(child.pid));
      return { content: [{ type: "text", text: `started ${child.pid}` }] };
    },
  );

  server.registerTool(
    "spawn_exit",
    { description: "Starts a process that shares this one's stdio, writes its pid to `file`, then exits without answering.", inputSchema: { file: z.string() } },
    ({ file }) => {
      const child = spawn(process.execPath, ["-e", "setInterval(() => {}, 1000)"], { stdio: "inherit" });
      writeFileSync(file, String(child.pid));
      process.exit(3);
    },
  );

  server.registerTool("flood", { description: "Reads nothing more, and pings its client without end; never answers." }, () => {
    process.stdin.pause();
    const more = (): void => {
      for (let i = 0; i < 200; i++) void server.server.ping().catch(() => undefined);
      setImmediate(more);
    };
    more();
    return new Promise<never>(() => {});
  });

  server.registerTool(
    "many_links",
    { description: "Shows `count` resource links, each addressed in at least `uri_bytes` characters.", inputSchema: { count: z.number().int().min(1), uri_bytes: z.number().int().min(0).optional() } },
    ({ count, uri_bytes }) => {
      const path = "p".repeat(uri_bytes ?? 0);
      return {
        content: [
          { type: "text", text: `${count} links` },
          ...Array.from({ length: count }, (_, i) => ({ type: "resource_link" as const, uri: `file:///links/${i}/${path}`, name: `link ${i}` })),
        ],
      };
    },
  );

  server.registerTool("links", { description: "Shows a link and an image named with a variable of its environment.", inputSchema: { name: z.string() } }, ({ name }) => {
    const value = process.env[name] ?? "";
    return {
      content: [
        { type: "text", text: "shown" },
        { type: "resource_link", uri: `file:///tmp/x?k=${value}`, name: `leak ${value}`, mimeType: "text/plain" },
        { type: "resource_link", uri: "file:///tmp/plain", name: "plain" },
        { type: "image", data: "iVBORw0KGgo=", mimeType: `image/${value}` },
      ],
    };
  });
}

// PROBE_SURROGATE: a call described, schemed and answered with lone UTF-16 surrogates, halves of a pair.
if (process.env.PROBE_SURROGATE) {
  server.registerTool(
    "surrogate",
    { description: "Answers with lone halves \ud800 of a pair \udc00.", inputSchema: { note: z.string().optional().describe("A field described \udbff with a lone half.") } },
    () => ({ content: [{ type: "text", text: "lone \ud800 high and \udc00 low, a pair 😀 kept" }] }),
  );
}

if (process.env.PROBE_NAMED) server.registerTool(`k_${process.env.PROBE_NAMED}`, { description: "Named with a secret." }, answerName("named"));

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

server.registerTool("image", { description: "Shows an image of `bytes` bytes, saying so in text.", inputSchema: { bytes: z.number().int().min(1) } }, ({ bytes }) => ({
  content: [
    { type: "text", text: `an image of ${bytes} bytes` },
    { type: "image", data: Buffer.alloc(bytes, 7).toString("base64"), mimeType: "image/png" },
  ],
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

// PROBE_WIDE=N: N calls more, each named past what a provider takes with the tool's name before it
// (and last in the order of names), then one named in other letters, one described at length, one
// whose arguments' schema is over 64 KiB and one named in 2,000 characters; each answers with its name.
const wide = Number(process.env.PROBE_WIDE ?? 0);
for (let i = 0; i < wide; i++) {
  const name = `zz_a_call_named_at_such_length_that_with_its_tool_it_passes_sixty_four_${String(i).padStart(3, "0")}`;
  server.registerTool(name, { description: `Wide call ${i}.` }, answerName(name));
}
if (wide > 0) {
  server.registerTool("appel.à-nommer ✓", { description: "Named in other letters." }, answerName("appel.à-nommer ✓"));
  server.registerTool("described_at_length", { description: `${"A call described at length. ".repeat(1000)}The end.` }, answerName("described_at_length"));
  const fields = Object.fromEntries(Array.from({ length: 1000 }, (_, i) => [`field_${i}`, z.string().optional().describe("A field among a thousand, each with a sentence of its own to say.")]));
  server.registerTool("schema_of_a_thousand_fields", { description: "Takes a thousand fields.", inputSchema: fields }, answerName("schema_of_a_thousand_fields"));
  server.registerTool("n".repeat(2000), { description: "Named at length." }, answerName("n…"));
}
// PROBE_HEAVY=N: N calls more, each described in 8 KiB: a list of megabytes.
for (let i = 0; i < Number(process.env.PROBE_HEAVY ?? 0); i++) {
  server.registerTool(`heavy_${String(i).padStart(4, "0")}`, { description: `Heavy call ${i}. ${"x".repeat(8180)}` }, answerName(`heavy_${i}`));
}

await server.connect(new StdioServerTransport());
