// A small stand-in for Link Memory, for tests: an MCP server on stdio that searches the agent's
// conversations (`<agent>/chats/<thread>/transcript.md`) with memory's four calls.
// Usage: node dist/test/memory-server.js <agent folder>   (or LINK_AGENT_DIR=<agent folder>)
// It is a separate program, as Link Memory is: it reads the folder itself, not through the store.
import { lstatSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { z } from "zod";

const MAX_HITS = 20;

function text(value: string, isError = false): CallToolResult {
  return { content: [{ type: "text", text: value }], ...(isError ? { isError } : {}) };
}

/** A regular file or folder inside the agent's folder, never followed through a link. */
function isReal(path: string, kind: "file" | "dir"): boolean {
  try {
    const st = lstatSync(path);
    return kind === "file" ? st.isFile() : st.isDirectory();
  } catch {
    return false;
  }
}

function validThread(name: string): boolean {
  return name !== "" && name.length <= 200 && !name.startsWith(".") && !/[/\\\0]/.test(name);
}

function threads(agentDir: string): string[] {
  const chats = join(agentDir, "chats");
  if (!isReal(chats, "dir")) return [];
  return readdirSync(chats)
    .filter((t) => validThread(t) && isReal(join(chats, t, "transcript.md"), "file"))
    .sort();
}

function transcript(agentDir: string, thread: string): string | undefined {
  if (!validThread(thread)) return undefined;
  const path = join(agentDir, "chats", thread, "transcript.md");
  return isReal(path, "file") ? readFileSync(path, "utf8") : undefined;
}

/** Lines holding the query, or every word of it, case-insensitive: `<thread>: <line>`, at most 20. */
function search(agentDir: string, query: string): string[] {
  const q = query.trim().toLowerCase();
  if (q === "") return [];
  const words = q.split(/\s+/);
  const hits: string[] = [];
  for (const thread of threads(agentDir)) {
    for (const line of (transcript(agentDir, thread) ?? "").split("\n")) {
      const l = line.toLowerCase();
      if (l.includes(q) || words.every((w) => l.includes(w))) {
        hits.push(`${thread}: ${line.trim()}`);
        if (hits.length >= MAX_HITS) return hits;
      }
    }
  }
  return hits;
}

function main(): void {
  const agentDir = process.argv[2] ?? process.env.LINK_AGENT_DIR;
  if (agentDir === undefined || agentDir === "") {
    process.stderr.write("usage: memory-server <agent folder> (or LINK_AGENT_DIR)\n");
    process.exit(2);
  }
  const server = new McpServer({ name: "link-memory-test", version: "0.1.0" });
  server.registerTool(
    "search",
    {
      description: "Search what was said in the agent's conversations. Answers matching lines as <thread>: <line>.",
      inputSchema: { query: z.string().describe("Words to look for") },
    },
    ({ query }) => {
      const hits = search(agentDir, query);
      return text(hits.length === 0 ? `nothing found for "${query}"` : hits.join("\n"));
    },
  );
  server.registerTool(
    "read",
    {
      description: "Read one conversation's transcript, by its thread name (as search and list give it).",
      inputSchema: { path: z.string().describe("The thread name") },
    },
    ({ path }) => {
      const body = transcript(agentDir, path);
      return body === undefined ? text(`there is no conversation ${path}`, true) : text(body);
    },
  );
  server.registerTool("list", { description: "List the agent's conversations by thread name." }, () =>
    text(threads(agentDir).join("\n")),
  );
  server.registerTool("links", { description: "List links between conversations and notes." }, () => ({
    content: [{ type: "text", text: "[]" }],
    structuredContent: { links: [] },
  }));
  void server.connect(new StdioServerTransport());
}

main();
