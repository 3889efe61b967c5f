// The model's facts through the built daemon: the ACP model option's list from a scripted /models, the
// runtime asked about the conversation's model once the option sets it, an endpoint that can't be
// reached named in the failure and the log (never the key), and `lnk-link-harness facts`.
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import * as acp from "@agentclientprotocol/sdk";
import type { ContentBlock, SessionConfigOption } from "@agentclientprotocol/sdk";
import { describe, expect, it } from "vitest";
import { paths, readEventsFrom, readMark } from "../store/index.js";
import { readShippedFacts } from "../turn/facts.js";
import { configure, daemonTestHooks, failure, scriptedSettings, startDaemon, stdioClient, tempDir, watched } from "./acp-client.js";
import { BIN, MAIN, ROOT } from "./fixtures/built.js";
import { run } from "./fixtures/child.js";
import { freePort } from "./fixtures/port.js";
import type { ModelServer } from "./model-server.js";

let server: ModelServer;
const cleanup = daemonTestHooks([BIN, "dist/daemon/facts.js", "dist/acp/model.js", "dist/turn/runtime.js"], (s) => (server = s));

/** A folder of its own for the facts file, so the machine's own never weighs. */
function config(toml?: string): string {
  const dir = tempDir("lnk-facts-config-");
  cleanup.push(() => dir.remove());
  mkdirSync(join(dir.path, "lnk"));
  if (toml !== undefined) writeFileSync(join(dir.path, "lnk", "model-facts.toml"), toml);
  return dir.path;
}

function agent(settings: Record<string, unknown>): string {
  const dir = tempDir();
  cleanup.push(() => dir.remove());
  configure(dir.path, settings);
  return dir.path;
}

const text = (s: string): ContentBlock[] => [{ type: "text", text: s }];
const optionValues = (options: readonly SessionConfigOption[] | undefined | null): string[] => {
  const first = options?.[0];
  return first?.type === "select" ? (first.options as { value: string }[]).map((o) => o.value) : [];
};

describe("the model option and the conversation's model", { timeout: 60_000 }, () => {
  it("offers the agent's model, the conversation's and the provider's; a value not offered is still taken", async () => {
    server.runtime = { models: ["big-model", "scripted-model", "tiny-model"] };
    const dir = agent(scriptedSettings(server.url));
    const d = watched(startDaemon(["--agent", dir], { XDG_CONFIG_HOME: config() }), cleanup);
    const c = await stdioClient(d, cleanup);
    const made = await c.agent.request(acp.methods.agent.session.new, { cwd: ROOT, mcpServers: [] });
    // Answered at once, never waiting for the endpoint: its list follows as an update once it answers.
    expect(optionValues(made.configOptions)).toEqual(["scripted-model"]);
    const update = await c.waitForUpdate((n) => n.update.sessionUpdate === "config_option_update");
    expect(update.sessionId).toBe(made.sessionId);
    expect(optionValues((update.update as { configOptions: SessionConfigOption[] }).configOptions)).toEqual(["scripted-model", "big-model", "tiny-model"]);
    // Kept: the next session is answered with it at once, and sent no update.
    const next = await c.agent.request(acp.methods.agent.session.new, { cwd: ROOT, mcpServers: [] });
    expect(optionValues(next.configOptions)).toEqual(["scripted-model", "big-model", "tiny-model"]);
    // Asked once, with the agent's key as the model call would send it, and kept.
    const set = await c.agent.request(acp.methods.agent.session.setConfigOption, { sessionId: made.sessionId, configId: "model", value: "unlisted-model" });
    expect(set.configOptions[0]).toMatchObject({ currentValue: "unlisted-model" });
    expect(optionValues(set.configOptions)).toEqual(["unlisted-model", "scripted-model", "big-model", "tiny-model"]);
    expect(server.asked.filter((r) => r.path === "/v1/models")).toHaveLength(1);
    await c.agent.request(acp.methods.agent.session.prompt, { sessionId: made.sessionId, prompt: text("hi") });
    expect(server.requests.at(-1)?.body.model).toBe("unlisted-model");
  });

  it("asks the runtime about the model the option set, and the turn's window is that model's", async () => {
    server.runtime = { ollama: { contextLength: 131_072, numCtx: 8192 } };
    const dir = agent({ model: { provider: "ollama", name: "small-model", base_url: server.url } });
    const d = watched(startDaemon(["--agent", dir], { XDG_CONFIG_HOME: config() }), cleanup);
    const c = await stdioClient(d, cleanup);
    const { sessionId } = await c.agent.request(acp.methods.agent.session.new, { cwd: ROOT, mcpServers: [] });
    await c.agent.request(acp.methods.agent.session.setConfigOption, { sessionId, configId: "model", value: "big-model" });
    server.script({ error: { status: 400, message: "the prompt is too long", code: "context_length_exceeded" } });
    // A failed turn is answered as an error saying why.
    expect((await failure(c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: text("hello") }))).message).toContain("window 8192 from runtime");
    // The agent's model is asked about ahead, once, when the session opens; the turn's, before its request.
    const shown = server.asked.filter((r) => r.path === "/api/show").map((r) => r.body.model);
    expect(shown.filter((m) => m === "big-model")).toHaveLength(1);
    expect(shown.filter((m) => m !== "big-model")).toEqual(shown.includes("small-model") ? ["small-model"] : []);
    expect(server.requests.at(-1)?.body.model).toBe("big-model");
    const last = readEventsFrom(paths({ dir }).conversation(sessionId), 1).at(-1)?.event;
    expect(last).toMatchObject({ kind: "failure", reason: "context_too_long", message: expect.stringContaining("window 8192 from runtime") });
  });
});

describe("a runtime slow to say its window", { timeout: 60_000 }, () => {
  it("keeps a new conversation's first request from waiting for it; its usage and mark still have that window", async () => {
    // The runtime answers only once the model was asked: a turn that waited for it before its
    // request would wait until its ask gave up (1.5 s), and take no window from it.
    const asked = server.waitForRequest();
    server.runtime = { ollama: { contextLength: 131_072, numCtx: 8192 }, until: asked };
    const dir = agent({ model: { provider: "ollama", name: "small-model", base_url: server.url } });
    const d = watched(startDaemon(["--agent", dir], { XDG_CONFIG_HOME: config() }), cleanup);
    const c = await stdioClient(d, cleanup);
    const { sessionId } = await c.agent.request(acp.methods.agent.session.new, { cwd: ROOT, mcpServers: [] });
    const usage = c.waitForUpdate((n) => n.update.sessionUpdate === "usage_update");
    const answered = await c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: text("hello") });
    expect(answered.stopReason).toBe("end_turn");
    expect(server.asked.some((r) => r.path === "/api/show")).toBe(true);
    // The answer waited for it: the usage update says the runtime's window.
    expect((await usage).update).toMatchObject({ sessionUpdate: "usage_update", size: 8192 });
    // The next turn, of a conversation with events, counts with that window at once (it waits for
    // the first's lock, so the first's mark is made by then).
    server.script({ error: { status: 400, message: "the prompt is too long", code: "context_length_exceeded" } });
    const refused = await failure(c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: text("again") }));
    // The mark the first turn made is for that window's share: 8,192 less the answer's 2,048 and the
    // margin's 410, less the instructions; the second turn counted with the same.
    const mark = readMark(paths({ dir }).conversation(sessionId));
    expect(mark?.budget).toBeGreaterThan(4_000);
    expect(mark?.budget).toBeLessThanOrEqual(8192 - 2048 - 410);
    expect(refused.message).toContain(`window 8192 from runtime, conversation's share ${String(mark?.budget)}`);
  });
});

describe("a runtime's window that the instructions and tools fill", { timeout: 60_000 }, () => {
  it("fails a new conversation's first turn as too long, naming them, and sends nothing: the runtime would cut the prompt short", async () => {
    server.runtime = { ollama: { contextLength: 131_072, numCtx: 1024 } };
    const dir = agent({ model: { provider: "ollama", name: "small-model", base_url: server.url } });
    const d = watched(startDaemon(["--agent", dir], { XDG_CONFIG_HOME: config() }), cleanup);
    const c = await stdioClient(d, cleanup);
    const everything: acp.McpServer = { name: "everything", command: process.execPath, args: [join(ROOT, "node_modules/@modelcontextprotocol/server-everything/dist/index.js"), "stdio"], env: [] };
    const { sessionId } = await c.agent.request(acp.methods.agent.session.new, { cwd: ROOT, mcpServers: [everything] });
    const before = server.requests.length;
    const refused = await failure(c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: text("hello") }));
    expect(refused.message).toMatch(/the instructions and the tools offered take about \d+ tokens, of them \d+ tool calls offered, about \d+ tokens, all the 1024-token window \(from runtime\) leaves a request: the request was not sent/);
    expect(server.requests.length).toBe(before);
    const kinds = readEventsFrom(paths({ dir }).conversation(sessionId), 1).map((e) => e.event.kind);
    expect(kinds).toEqual(["message", "failure"]);
  });
});

describe("Link's facts", { timeout: 60_000 }, () => {
  it("are the shipped file's in the daemon, which holds them as its build read them", async () => {
    // No runtime answers here: the window is Link's entry for the model.
    server.runtime = {};
    const shipped = readShippedFacts()["qwen3-coder"];
    expect(shipped?.window).toBeGreaterThan(0);
    const dir = agent({ model: { provider: "qwen", name: "qwen3-coder", base_url: server.url } });
    const d = watched(startDaemon(["--agent", dir], { XDG_CONFIG_HOME: config() }), cleanup);
    const c = await stdioClient(d, cleanup);
    const { sessionId } = await c.agent.request(acp.methods.agent.session.new, { cwd: ROOT, mcpServers: [] });
    server.script({ error: { status: 400, message: "the prompt is too long", code: "context_length_exceeded" } });
    const refused = await failure(c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: text("hello") }));
    expect(refused.message).toContain(`window ${String(shipped?.window)} from link`);
  });
});

describe("a model that can't be reached", { timeout: 60_000 }, () => {
  it("fails the turn naming the endpoint and why, logs it as failed with its reason, and never says the key", async () => {
    const port = await freePort();
    const key = "sk-never-shown-4242";
    const dir = agent({ model: { provider: "hosted", name: "m", base_url: `http://127.0.0.1:${port}/v1`, key } });
    const d = watched(startDaemon(["--agent", dir], { XDG_CONFIG_HOME: config() }), cleanup);
    const c = await stdioClient(d, cleanup);
    const { sessionId } = await c.agent.request(acp.methods.agent.session.new, { cwd: ROOT, mcpServers: [] });
    const refused = await failure(c.agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: text("anyone there?") }));
    expect(refused.message).toContain(`cannot reach the model at http://127.0.0.1:${port}/v1 (connection refused)`);
    expect(refused.message).not.toContain(key);
    const last = readEventsFrom(paths({ dir }).conversation(sessionId), 1).at(-1)?.event;
    expect(last).toMatchObject({ kind: "failure", reason: "network", message: `cannot reach the model at http://127.0.0.1:${port}/v1 (connection refused)` });
    const line = await d.waitForLog(/"msg":"turn failed"/);
    expect(JSON.parse(line)).toMatchObject({ level: "warn", reason: "network", failure: expect.stringContaining(`127.0.0.1:${port}/v1 (connection refused)`) });
    expect(d.stderr()).not.toMatch(/"msg":"turn ended"/);
    expect(d.stderr()).not.toContain(key);
    expect(JSON.stringify(readEventsFrom(paths({ dir }).conversation(sessionId), 1))).not.toContain(key);
  });
});

describe("lnk-link-harness facts", { timeout: 60_000 }, () => {
  const facts = (args: string[], xdg: string) => run(process.execPath, [MAIN, "facts", ...args], { env: { ...process.env, XDG_CONFIG_HOME: xdg } });

  it("prints the window and answer share a turn would use and where each came from", async () => {
    server.runtime = { ollama: { contextLength: 131_072, numCtx: 8192 } };
    const xdg = config(`[models."qwen3-coder"]\nanswer = 2048\n`);
    const dir = agent({ model: { provider: "ollama", name: "local-model", base_url: server.url, answer: 3000 } });
    const got = await facts(["--agent", dir], xdg);
    expect(got.code, got.stderr).toBe(0);
    expect(got.stdout).toContain(`model      local-model (the agent's model), of ollama at ${server.url}\n`);
    expect(got.stdout).toContain(`window     8,192 tokens: the runtime: Ollama at ${server.url.replace(/\/v1$/, "/api/show")} (num_ctx of its Modelfile)\n`);
    expect(got.stdout).toContain("answer     3,000 tokens: the settings' model.answer, taken as set\n");
    expect(got.stdout).toContain("inputs     text, image, document: nobody said, so each part is sent and the provider decides\n");

    // MODEL: another model of the provider, your file's answer over Link's for it.
    const coder = await facts(["--agent", dir, "qwen3-coder:30b"], xdg);
    expect(coder.stdout).toContain("model      qwen3-coder:30b, of ollama");
    expect(coder.stdout).toMatch(/answer {5}2,048 tokens: the settings' model\.answer \(3000\), held to the model's longest, 2,048 tokens from your file, entry "qwen3-coder"/);
    expect(coder.stdout).toContain(`inputs     text: Link's facts, entry "qwen3-coder"`);
  });

  it("says where an unknown model's window came from, and Link's max held to it", async () => {
    const dir = agent({ model: { provider: "hosted", name: "mystery", base_url: "https://api.example.invalid/v1" }, window: { link_max: 20_000 } });
    const got = await facts(["--agent", dir], config());
    expect(got.stdout).toContain("window     20,000 tokens: Link's max (window.link_max), held to the model's 32,768 tokens from nobody described this model");
    expect(got.stdout).toContain("runtime    not asked: the endpoint is not on this machine or its network");
    expect(got.stdout).toContain("answer     4,096 tokens: the default (4,096), at most a quarter of the window");
  });

  it("refuses bad input in one line, writing nothing", async () => {
    const xdg = config();
    const two = await facts(["a", "b"], xdg);
    expect(two.code).toBe(2);
    expect(two.stderr).toBe("lnk-link-harness: facts takes at most one MODEL\n");
    const empty = tempDir();
    cleanup.push(() => empty.remove());
    const none = await facts(["--agent", empty.path], xdg);
    expect(none.code).toBe(2);
    expect(none.stderr).toContain("has no settings: run lnk-link-harness configure");
    const broken = config("[models\n");
    const dir = agent(scriptedSettings(server.url));
    const bad = await facts(["--agent", dir], broken);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/^lnk-link-harness: model facts .*model-facts\.toml: /);
  });
});
