// The spec's four-turn memory test: a gate code said early in a chat, beyond the window, is found
// through memory, and a search never finds its own question (the copy holds no message being answered).
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import { McpToolHost } from "../daemon/tools/host.js";
import { paths, readEventsFrom, writeSettings } from "../store/index.js";
import { runTurn } from "../turn/turn.js";
import type { ToolServer } from "../turn/tools.js";
import { assertBuilt, ROOT } from "./fixtures/built.js";
import { startModelServer, type ModelServer, type RecordedRequest } from "./model-server.js";

let server: ModelServer;
let host: McpToolHost;
let dir: string;

beforeAll(async () => {
  assertBuilt(["dist/test/memory-server.js"], ["test/memory-server.ts"]);
  server = await startModelServer();
  host = new McpToolHost();
  dir = mkdtempSync(join(tmpdir(), "lh-memory-"));
});
afterAll(async () => {
  await host.close();
  await server.close();
  rmSync(dir, { recursive: true, force: true });
});

function messages(r: RecordedRequest): { role: string; content?: unknown }[] {
  return (r.body as { messages: { role: string; content?: unknown }[] }).messages;
}

/** The model: asked about the gate code, it searches memory, then answers from what memory found. */
function reply(r: RecordedRequest) {
  const sent = messages(r);
  const last = sent.at(-1)!;
  if (last.role === "tool") {
    const found = /gate code is (\d+)/.exec(String(last.content));
    return { text: found ? `The gate code is ${found[1]}.` : "I can't find it." };
  }
  if (String(last.content).includes("What is the gate code")) {
    return { tool_calls: [{ name: "memory__search", arguments: { query: "gate code" } }] };
  }
  return { text: `Noted: ${String(last.content).slice(-40)}` };
}

it("finds a gate code said beyond the window through memory, never its own question", async () => {
  const agent = { dir };
  // A window that holds about one turn of filler, so the first turn drops out of it.
  writeSettings(agent, { model: { provider: "test", name: "scripted", base_url: server.url }, window: { max: 3_000, answer: 200, margin: 100 } });
  const tools: ToolServer[] = [{ name: "memory", source: { type: "stdio", command: process.execPath, args: [join(ROOT, "dist/test/memory-server.js"), dir] } }];
  server.fallback = reply;
  const say = (text: string) => runTurn({ agent, thread: "telegram-42", message: { text, channel: "telegram" }, tools: host, toolServers: tools }, () => {});

  // 1: the code, early in the chat.
  await say("Remember this: the gate code is 4417.");
  // 2: enough talk to push it out of the window.
  await say(`Here are my notes for the trip. ${"We walk along the river and look at boats. ".repeat(220)}`);
  // 3: asked, beyond the window: found by memory.
  const asked = await say("What is the gate code?");
  expect(asked.stop).toBe("end_turn");
  const third = server.requests.filter((r) => r.path.endsWith("/chat/completions")).slice(-2);
  expect(JSON.stringify(messages(third[0]!))).not.toContain("4417");
  const toolAnswer = messages(third[1]!).find((m) => m.role === "tool")!;
  expect(String(toolAnswer.content)).toContain("gate code is 4417");
  // The search didn't find the question it searched for.
  expect(String(toolAnswer.content)).not.toContain("What is the gate code");
  const conv = paths(agent).conversation("telegram-42");
  const answer = readEventsFrom(conv, 1).at(-1)!.event;
  expect(answer).toMatchObject({ role: "assistant", text: "The gate code is 4417." });

  // 4: asked again: memory finds the code and the last answer, never a tool's call or answer, nor this question.
  await say("What is the gate code, again?");
  const fourth = server.requests.at(-1)!;
  const again = String(messages(fourth).filter((m) => m.role === "tool").at(-1)!.content);
  expect(again).toContain("4417");
  expect(again).not.toContain("What is the gate code, again");
  expect(again).not.toContain("memory__search");
  const copy = readFileSync(conv.transcript, "utf8");
  expect(copy).not.toContain("memory__search");
  expect(copy).toContain("What is the gate code, again?");
  expect(copy.trimEnd().endsWith("-->")).toBe(true);
});
