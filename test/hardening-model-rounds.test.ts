// What one prompt can make its requests grow to, over the built daemon on stdio with the real ACP
// client and the scripted server: an answer is bounded by the bytes it adds to a request (a control
// character takes six as JSON), and a turn's own rounds, which never drop from its window, are
// checked against the window before each is sent, not sent once past it.
import * as acp from "@agentclientprotocol/sdk";
import { describe, expect, it } from "vitest";
import { paths, readEventsFrom } from "../store/index.js";
import { configure, daemonTestHooks, failure, openClient, scriptedSettings, startDaemon, stdioStream, tempDir, watched, type Client, type Daemon } from "./acp-client.js";
import type { ModelServer } from "./model-server.js";
import { BIN, ROOT } from "./fixtures/built.js";
import { MODEL_ANSWER_MAX_BYTES } from "../turn/model.js";

let server: ModelServer;
const cleanup = daemonTestHooks([BIN, "dist/daemon/serve.js", "dist/acp/app.js"], (s) => (server = s));

const EVERYTHING = `"${process.execPath}" "${ROOT}node_modules/@modelcontextprotocol/server-everything/dist/index.js" stdio`;

async function session(extra: Record<string, unknown> = {}, env: NodeJS.ProcessEnv = {}): Promise<{ dir: string; d: Daemon; c: Client; sessionId: string }> {
  const dir = tempDir("lnk-hardening-rounds-");
  cleanup.push(() => dir.remove());
  configure(dir.path, scriptedSettings(server.url, extra));
  const d = watched(startDaemon(["--agent", dir.path], env), cleanup);
  const c = await openClient(stdioStream(d.child));
  cleanup.push(() => c.close());
  const { sessionId } = await c.agent.request(acp.methods.agent.session.new, { cwd: ROOT, mcpServers: [] });
  return { dir: dir.path, d, c, sessionId };
}

const prompt = (c: Client, sessionId: string, s: string) => c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: s }] });
const events = (dir: string, thread: string) => readEventsFrom(paths({ dir }).conversation(thread), 1).map((e) => e.event);

describe("what one prompt makes its requests grow to", { timeout: 60_000 }, () => {
  it("an answer of control characters is cut at the bytes it would add, six a character, not at as many characters", async () => {
    const { dir, d, c, sessionId } = await session();
    // Some 4.3 MB as JSON, in 700,000 characters.
    server.script({ text: "\u0001".repeat(Math.ceil(MODEL_ANSWER_MAX_BYTES / 6) + 10_000), chunks: 16 });
    const cut = await failure(prompt(c, sessionId, "say nothing, at length"));
    expect(cut.message).toContain(`the model's answer ran past ${MODEL_ANSWER_MAX_BYTES} bytes as JSON, the most one answer holds`);
    expect(events(dir, sessionId).at(-1)).toMatchObject({ kind: "failure", reason: "model_error" });
    expect(await d.stop()).toEqual({ code: 0, signal: null });
  });

  it("calls that outgrew the window are not run: the turn fails as context_too_long, saying so", async () => {
    const { dir, d, c, sessionId } = await session({ window: { max: 16_000 } });
    // A call of some 25,000 tokens: past the conversation's share of a window of 16,000.
    server.script({ tool_calls: [{ id: "c1", name: "fs__write", arguments: { text: "word ".repeat(20_000) } }] });
    const failed = await failure(prompt(c, sessionId, "write it all"));
    expect(failed.message).toMatch(/this turn's rounds outgrew the window: its messages hold about \d+ tokens, past the conversation's share \d+ \(window 16000 from settings\), so its calls were not run/);
    expect(server.requests).toHaveLength(1);
    expect(c.updates.some((u) => u.update.sessionUpdate === "tool_call")).toBe(false);
    expect(events(dir, sessionId).at(-1)).toMatchObject({ kind: "failure", reason: "context_too_long" });
    // The conversation goes on: its next turn's window drops the turn that outgrew it.
    server.script({ text: "Fine." });
    expect(await prompt(c, sessionId, "never mind")).toMatchObject({ stopReason: "end_turn" });
    expect(JSON.stringify(server.requests[1]?.body.messages)).not.toContain("word word");
    expect(await d.stop()).toEqual({ code: 0, signal: null });
  });

  it("a round whose calls' answers outgrew the window is not sent", async () => {
    const { dir, d, c, sessionId } = await session({ window: { max: 22_000 } }, { LNK_TOOL_EVERYTHING: EVERYTHING });
    // A call of some 10,000 tokens, within the share; its answer (the same, up to 32 KiB) is past it.
    server.script({ tool_calls: [{ id: "c1", name: "everything__echo", arguments: { message: "word ".repeat(8_000) } }] }, { text: "Never asked." });
    const failed = await failure(prompt(c, sessionId, "echo it all"));
    expect(failed.message).toMatch(/this turn's rounds outgrew the window: .*, so the next round was not sent/);
    expect(c.updates.filter((u) => u.update.sessionUpdate === "tool_call_update").map((u) => u.update)).toEqual([expect.objectContaining({ toolCallId: "c1", status: "completed" })]);
    expect(server.requests).toHaveLength(1);
    expect(events(dir, sessionId).map((e) => e.kind)).toEqual(["message", "message", "tool_result", "failure"]);
    expect(await d.stop()).toEqual({ code: 0, signal: null });
  });

  it("a round within the window is sent as ever", async () => {
    const { d, c, sessionId } = await session({ window: { max: 16_000 } });
    server.script({ tool_calls: [{ id: "c1", name: "fs__write", arguments: { text: "word ".repeat(100) } }] }, { text: "Done." });
    expect(await prompt(c, sessionId, "write a little")).toMatchObject({ stopReason: "end_turn" });
    expect(server.requests).toHaveLength(2);
    expect(await d.stop()).toEqual({ code: 0, signal: null });
  });
});
