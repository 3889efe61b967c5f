// An endpoint that says the key it was sent back, anywhere but in an error's words (hardening-model
// covers those): in the content type of an answer that is no stream, around the fault of an event
// that is not JSON, in the answer's text (whole, and split across its chunks), its thinking, and its
// calls' ids, names and arguments. Over the built daemon on stdio with the real ACP client and the
// scripted server: the key is in nothing the client gets, the log says or the folder keeps.
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import * as acp from "@agentclientprotocol/sdk";
import { describe, expect, it } from "vitest";
import { paths, readEventsFrom } from "../store/index.js";
import { answerText, configure, daemonTestHooks, failure, lockFreed, scriptedSettings, stdioSession, tempDir, type Client } from "./acp-client.js";
import type { ModelServer, RecordedRequest } from "./model-server.js";
import { BIN, ROOT } from "./fixtures/built.js";

let server: ModelServer;
const cleanup = daemonTestHooks([BIN, "dist/daemon/serve.js", "dist/acp/app.js"], (s) => (server = s));

const KEY = "sk-live-0123456789abcdef-SECRET";
/** Any part of the key long enough to matter. */
const PARTS = [KEY, KEY.slice(0, 12), KEY.slice(8, 20), "0123456789"];

function agent(): string {
  const dir = tempDir("lnk-hardening-echo-");
  cleanup.push(() => dir.remove());
  const settings = scriptedSettings(server.url) as { model: Record<string, unknown> };
  configure(dir.path, { ...settings, model: { ...settings.model, key: KEY } });
  return dir.path;
}

const session = (dir: string) => stdioSession(dir, cleanup, ROOT);

const prompt = (c: Client, sessionId: string, s: string) => c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: s }] });
const events = (dir: string, thread: string) => readEventsFrom(paths({ dir }).conversation(thread), 1).map((e) => e.event);

/** Every file of the conversation's folder, as text, once its turn has let its lock go. */
async function onDisk(dir: string, thread: string): Promise<string> {
  const conv = paths({ dir }).conversation(thread);
  await lockFreed(conv.lock);
  return readdirSync(conv.dir)
    .map((n) => join(conv.dir, n))
    .map((f) => readFileSync(f, "utf8"))
    .join("\n");
}

/** The parts of the key in `text`. */
const leaked = (text: string): string[] => PARTS.filter((p) => text.includes(p));

/** The Authorization header the daemon sent, as the endpoint echoes it. */
const auth = (r: RecordedRequest): string => String(r.headers.authorization);
/** The key the daemon sent. */
const keyOf = (r: RecordedRequest): string => auth(r).replace(/^Bearer /, "");
const data = (delta: Record<string, unknown>, finish: string | null = null) => JSON.stringify({ id: "r1", object: "chat.completion.chunk", choices: [{ index: 0, delta, finish_reason: finish }] });

describe("an endpoint that echoes the key outside an error's words", { timeout: 30_000 }, () => {
  it("in the content type of a 200 that is no stream, or around the fault of an event that is not JSON: the failure names neither", async () => {
    const dir = agent();
    const { d, c, sessionId } = await session(dir);
    server.script(
      (r) => ({ contentType: `text/html ${auth(r)}`, events: ["<html>"] }),
      (r) => ({ contentType: `text/html-${auth(r).replace(/ /g, "_")}`, events: ["<html>"] }),
      (r) => ({ events: [`{"you sent": ${auth(r)}}`] }),
      (r) => ({ events: [data({ content: "ok" }), `{"id":"x","note":"${auth(r)}" oops}`] }),
    );
    const failed = [];
    for (const s of ["one", "two", "three", "four"]) failed.push(await failure(prompt(c, sessionId, s)));
    expect(failed.map((f) => f.message)).toEqual([
      expect.stringContaining("the model answered 200 with an unexpected content type, not a stream of events"),
      // A type of a media type's characters is named, with the key taken out of it.
      expect.stringContaining("the model answered 200 with text/html-Bearer_[redacted], not a stream of events"),
      expect.stringMatching(/the model sent an event that is not JSON(?: \(at position \d+\))?$/),
      expect.stringMatching(/the model sent an event that is not JSON \(at position \d+\)$/),
    ]);
    expect(events(dir, sessionId).filter((e) => e.kind === "failure")).toEqual(Array.from({ length: 4 }, () => expect.objectContaining({ reason: "model_error" })));
    expect(leaked(JSON.stringify(failed))).toEqual([]);
    expect(leaked(await onDisk(dir, sessionId))).toEqual([]);
    expect(leaked(JSON.stringify(c.updates))).toEqual([]);
    expect(await d.stop()).toEqual({ code: 0, signal: null });
    expect(leaked(d.stderr())).toEqual([]);
  });

  it("in the answer: its text (whole, and split across chunks), its thinking, its calls' ids, names and arguments", async () => {
    const dir = agent();
    const { d, c, sessionId } = await session(dir);
    server.script(
      (r) => ({
        events: [
          data({ content: `whole: ${keyOf(r)}; split: ${keyOf(r).slice(0, 15)}` }),
          data({ content: keyOf(r).slice(15, 20) }),
          data({ content: `${keyOf(r).slice(20)} end` }),
          data({ reasoning_content: `thinking ${keyOf(r)}`, reasoning_details: [{ type: "reasoning.text", text: keyOf(r) }] }),
          data({}, "stop"),
          "[DONE]",
        ],
      }),
      (r) => ({
        events: [data({ tool_calls: [{ index: 0, id: `id-${keyOf(r)}`, type: "function", function: { name: `tool_${keyOf(r)}`, arguments: `{"k":"${keyOf(r)}"}` } }] }), data({}, "tool_calls"), "[DONE]"],
      }),
      { text: "Done." },
    );
    expect(await prompt(c, sessionId, "one")).toMatchObject({ stopReason: "end_turn" });
    expect(answerText(c.updates)).toBe("whole: [redacted]; split: [redacted] end");
    expect(await prompt(c, sessionId, "two")).toMatchObject({ stopReason: "end_turn" });
    const answers = events(dir, sessionId).filter((e) => e.kind === "message" && e.role === "assistant");
    expect(answers[0]).toMatchObject({
      text: "whole: [redacted]; split: [redacted] end",
      thinking: { reasoning_content: "thinking [redacted]", reasoning_details: [{ type: "reasoning.text", text: "[redacted]" }] },
    });
    expect(answers[1]).toMatchObject({ tool_calls: [{ id: "id-[redacted]", name: "tool_[redacted]", arguments: '{"k":"[redacted]"}' }] });
    // The call was answered as one of no tool, under the id it was kept with.
    const call = c.updates.find((u) => u.update.sessionUpdate === "tool_call");
    expect(call?.update).toMatchObject({ toolCallId: "id-[redacted]" });
    expect(leaked(await onDisk(dir, sessionId))).toEqual([]);
    expect(leaked(JSON.stringify(c.updates))).toEqual([]);
    // Nor is it sent back to the model with the conversation.
    expect(leaked(JSON.stringify(server.requests.at(-1)?.body))).toEqual([]);
    expect(await d.stop()).toEqual({ code: 0, signal: null });
    expect(leaked(d.stderr())).toEqual([]);
  });
});
