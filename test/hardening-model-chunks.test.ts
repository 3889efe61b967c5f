// Chunks of an answer not of a chunk's shape, over the built daemon on stdio with the real ACP client
// and the scripted server: what can be taken unambiguously is (a call numbered "0", content sent as
// parts of text), and a chunk that would lose text or calls fails the turn saying what was wrong,
// where it was skipped with no word and the answer kept without them.
import * as acp from "@agentclientprotocol/sdk";
import { describe, expect, it } from "vitest";
import { paths, readEventsFrom } from "../store/index.js";
import { answerText, configure, daemonTestHooks, failure, scriptedSettings, stdioSession, tempDir, type Client } from "./acp-client.js";
import type { ModelServer } from "./model-server.js";
import { BIN, ROOT } from "./fixtures/built.js";

let server: ModelServer;
const cleanup = daemonTestHooks([BIN, "dist/daemon/serve.js", "dist/acp/app.js"], (s) => (server = s));

function agent(): string {
  const dir = tempDir("lnk-hardening-chunks-");
  cleanup.push(() => dir.remove());
  configure(dir.path, scriptedSettings(server.url));
  return dir.path;
}

const session = (dir: string) => stdioSession(dir, cleanup, ROOT);

const prompt = (c: Client, sessionId: string, s: string) => c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: s }] });
const events = (dir: string, thread: string) => readEventsFrom(paths({ dir }).conversation(thread), 1).map((e) => e.event);
const data = (choice: Record<string, unknown>) => JSON.stringify({ id: "r1", object: "chat.completion.chunk", choices: [{ index: 0, ...choice }] });

describe("chunks not of a chunk's shape", { timeout: 30_000 }, () => {
  it("a call numbered by a string of digits is made, content sent as parts of text is the answer's text", async () => {
    const dir = agent();
    const { d, c, sessionId } = await session(dir);
    server.script(
      { events: [data({ delta: { content: "Calling." } }), data({ delta: { tool_calls: [{ index: "0", id: "c1", type: "function", function: { name: "fs__read", arguments: "{}" } }] }, finish_reason: "tool_calls" }), "[DONE]"] },
      { events: [data({ delta: { content: [{ type: "text", text: "Answer " }, { type: "text", text: "in parts." }] } }), data({ delta: {}, finish_reason: "stop" }), "[DONE]"] },
    );
    expect(await prompt(c, sessionId, "go")).toMatchObject({ stopReason: "end_turn" });
    expect(c.updates.find((u) => u.update.sessionUpdate === "tool_call")?.update).toMatchObject({ toolCallId: "c1", title: "fs: read" });
    // The call was answered to the model (as text: no tool is offered).
    expect(server.requests[1]?.body.messages?.at(-1)).toMatchObject({ role: "assistant", content: expect.stringContaining("[fs__read answered: there is no tool fs__read]") });
    expect(answerText(c.updates)).toBe("Calling.Answer in parts.");
    expect(events(dir, sessionId).filter((e) => e.kind === "message" && e.role === "assistant").map((e) => e.kind === "message" && e.text)).toEqual(["Calling.", "Answer in parts."]);
    expect(await d.stop()).toEqual({ code: 0, signal: null });
  });

  it("halves of a UTF-16 pair: two sent in two chunks are one character, a lone one is U+FFFD, in the updates and in what is kept", async () => {
    const dir = agent();
    const { d, c, sessionId } = await session(dir);
    // JSON.stringify writes each lone half as a \\udXXX escape, as an endpoint's JSON may hold one.
    server.script(
      {
        events: [
          data({ delta: { content: "a pair \ud83d", reasoning_content: "thought \udc00 alone" } }),
          data({ delta: { content: "\ude00 whole, a half \ud83d" } }),
          data({ delta: { content: " alone, and \ude00 one", reasoning_details: [{ type: "reasoning.text", text: "detail \ud800" }] } }),
          data({ delta: { tool_calls: [{ index: 0, id: "c\udfff1", type: "function", function: { name: "fs__read", arguments: '{"p":"\ud800"}' } }] }, finish_reason: "tool_calls" }),
          "[DONE]",
        ],
      },
      { text: "Fine." },
    );
    expect(await prompt(c, sessionId, "go")).toMatchObject({ stopReason: "end_turn" });
    const said = "a pair 😀 whole, a half \ufffd alone, and \ufffd one";
    expect(answerText(c.updates)).toBe(`${said}Fine.`);
    const answer = events(dir, sessionId).find((e) => e.kind === "message" && e.role === "assistant");
    expect(answer).toMatchObject({
      text: said,
      thinking: { reasoning_content: "thought \ufffd alone", reasoning_details: [{ type: "reasoning.text", text: "detail \ufffd" }] },
      tool_calls: [{ id: "c\ufffd1", name: "fs__read", arguments: '{"p":"\ufffd"}' }],
    });
    // Nothing kept, and nothing shown, holds a lone half.
    expect(JSON.stringify(events(dir, sessionId))).not.toMatch(/\\ud[89a-f]/);
    expect(JSON.stringify(c.updates)).not.toMatch(/\\ud[89a-f]/);
    expect(await d.stop()).toEqual({ code: 0, signal: null });
  });

  it("one that would lose text or calls fails the turn as model_error, naming what was wrong and quoting nothing of it; the conversation goes on", async () => {
    const dir = agent();
    const { d, c, sessionId } = await session(dir);
    server.script(
      { events: [data({ delta: { content: "Hello there, the answer is 42." }, finish_reason: 0 }), "[DONE]"] },
      { events: [data({ delta: { tool_calls: [{ index: "first", id: "c1", function: { name: "secret-tool-name", arguments: "{}" } }] } }), data({ delta: {}, finish_reason: "tool_calls" }), "[DONE]"] },
      { events: [`{"choices":[${Array(50_000).fill('{"delta":5}').join(",")}]}`, "[DONE]"] },
      { text: "Fine." },
    );
    const failed = [];
    for (const s of ["one", "two", "three"]) failed.push((await failure(prompt(c, sessionId, s))).message);
    expect(failed).toEqual([
      "Internal error: the model's stream was cut: the model sent a chunk with text, thinking or calls that can't be read: choices[0].finish_reason is not a string",
      "Internal error: the model's stream was cut: the model sent a chunk with text, thinking or calls that can't be read: choices[0].delta.tool_calls[0].index is not a number",
      "Internal error: the model's stream was cut: the model sent a chunk of 50000 choices, where one holds at most 16",
    ]);
    expect(events(dir, sessionId).filter((e) => e.kind === "failure")).toEqual(Array.from({ length: 3 }, () => expect.objectContaining({ reason: "model_error" })));
    expect(c.updates.some((u) => u.update.sessionUpdate === "tool_call")).toBe(false);
    expect(await prompt(c, sessionId, "again")).toMatchObject({ stopReason: "end_turn" });
    expect(await d.stop()).toEqual({ code: 0, signal: null });
  });
});
