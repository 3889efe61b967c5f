// `npm run demo`: one real conversation with the built daemon, as a user would have it. The model is the
// project's scripted server (it calls the echo tool of a real MCP server, then answers); everything
// else is real: the daemon as a child process, ACP over stdio with the ACP SDK's client, the tool
// host, and the events kept on disk.
import { readdirSync } from "node:fs";
import { join, relative } from "node:path";
import * as acp from "@agentclientprotocol/sdk";
import type { SessionNotification } from "@agentclientprotocol/sdk";
import { z } from "zod";
import { paths, readEventsFrom } from "../store/index.js";
import { configure, openClient, scriptedSettings, startDaemon, stdioStream, tempDir } from "./acp-client.js";
import { ROOT } from "./fixtures/built.js";
import { startModelServer, type RecordedRequest } from "./model-server.js";

const EVERYTHING = `"${process.execPath}" "${join(ROOT, "node_modules/@modelcontextprotocol/server-everything/dist/index.js")}" stdio`;
const out = (s: string) => process.stdout.write(s);

/** What the tool answered, as the model was sent it. */
function toolAnswer(request: RecordedRequest): string {
  const tool = [...(request.body.messages ?? [])].reverse().find((m) => m.role === "tool");
  return typeof tool?.content === "string" ? tool.content : "";
}

/** Shows each update as a chat would: the answer as it streams, each tool call and its result. */
let speaking = false;
function show({ update }: SessionNotification): void {
  switch (update.sessionUpdate) {
    case "agent_message_chunk":
      if (update.content.type !== "text") break;
      if (!speaking) out("agent> ");
      speaking = true;
      out(update.content.text);
      break;
    case "tool_call":
      if (speaking) out("\n");
      speaking = false;
      out(`  ⚙ ${update.title} ${JSON.stringify(update.rawInput)}  [${update.status}]\n`);
      break;
    case "tool_call_update": {
      const text = (update.content ?? []).map((c) => (c.type === "content" && c.content.type === "text" ? c.content.text : "")).join("");
      out(`  ↳ ${update.status}: ${text}\n`);
      break;
    }
    default:
      break;
  }
}

async function main(argv: string[]): Promise<void> {
  // The folder is removed at the end, unless asked to keep it for a look (npm run demo -- --keep).
  const keep = argv.includes("--keep");
  const unknown = argv.find((a) => a !== "--keep");
  if (unknown !== undefined) throw new Error(`unknown argument ${unknown}; usage: npm run demo [-- --keep]`);
  const folder = tempDir("lnk-demo-");
  const agentDir = join(folder.path, "agent");
  const model = await startModelServer();
  model.script(
    { tool_calls: [{ name: "everything__echo", arguments: { message: "Hello from Link Harness" } }], usage: { prompt_tokens: 420, completion_tokens: 18 } },
    (request) => ({ text: `The echo tool answered: "${toolAnswer(request)}". It works.`, chunks: 8, usage: { prompt_tokens: 470, completion_tokens: 14, cached_tokens: 400 } }),
  );
  configure(agentDir, scriptedSettings(model.url));

  out(`Link Harness demo\n  agent folder: ${agentDir}\n  model: scripted server at ${model.url}\n  tool: everything (@modelcontextprotocol/server-everything, over stdio)\n\n`);
  const daemon = startDaemon(["--agent", agentDir], { LNK_TOOL_EVERYTHING: EVERYTHING });
  try {
    const client = await openClient(stdioStream(daemon.child), show);
    const { sessionId } = await client.agent.request(acp.methods.agent.session.new, { cwd: agentDir, mcpServers: [] });
    const question = "Please call the echo tool with the words: Hello from Link Harness";
    out(`you> ${question}\n\n`);
    const answer = await client.agent.request(acp.methods.agent.session.prompt, {
      sessionId,
      prompt: [{ type: "text", text: question }],
      _meta: { link: { verbosity: "all" } },
    });
    // `usage` is unstable in ACP v1: it arrives beside the stop reason.
    const { usage } = z.object({ usage: z.record(z.string(), z.number()).optional() }).loose().parse(answer);
    out(`\n\n[${answer.stopReason}] tokens: ${JSON.stringify(usage ?? {})}\n`);

    client.close();
    daemon.child.stdin?.end();
    await daemon.exited;

    const conv = paths({ dir: agentDir }).conversation(sessionId);
    out(`\nThe conversation is kept in ${conv.dir}\n`);
    for (const name of readdirSync(conv.dir).sort()) out(`  ${name}\n`);
    out(`\nIts events:\n`);
    for (const { n, event } of readEventsFrom(conv, 1)) {
      const what =
        event.kind === "message"
          ? event.role === "assistant" && event.tool_calls?.length
            ? `assistant calls ${event.tool_calls.map((c) => c.name).join(", ")}`
            : `${event.role}: ${event.text.split("\n").at(-1)}`
          : event.kind === "tool_result"
            ? `tool result (${event.tool}): ${event.text}`
            : event.kind;
      out(`  ${relative(folder.path, conv.event(n))}  ${what}\n`);
    }
    out(`\nThe daemon's log (stderr):\n${daemon.stderr().replace(/^/gm, "  ").trimEnd()}\n`);
    out(keep ? `\nThe demo's folder is kept: ${folder.path}\n` : `\nThe demo's folder was removed (npm run demo -- --keep keeps it).\n`);
  } finally {
    await daemon.stop();
    await model.close();
    if (!keep) folder.remove();
  }
}

main(process.argv.slice(2)).then(
  () => process.exit(0),
  (e: unknown) => {
    process.stderr.write(`demo failed: ${e instanceof Error ? e.message : String(e)}\n`);
    process.exit(1);
  },
);
