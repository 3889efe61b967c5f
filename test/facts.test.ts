// A model's window and what it reads: your facts file over Link's, field by field and by specificity,
// edits seen without a restart, each local runtime asked (against a scripted server speaking its
// documented answer) for the conversation's model, its answer kept for a bounded time and a failure
// briefly, the answer share as set, Link's max against yours, the endpoint's models, and parts sent
// or named as left out.
import { mkdirSync, mkdtempSync, rmSync, unlinkSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import type { Part, Settings } from "../protocol/index.js";
import { appendEvent, paths, readEventsFrom, readMark, writeSettings, type AgentRef } from "../store/index.js";
import { forgetFacts, layeredFacts, modelWindow, UNKNOWN_WINDOW, type RuntimeReport } from "../turn/facts.js";
import { partsFor, PART_MAX, PARTS_MAX } from "../turn/parts.js";
import {
  ANSWER_KEPT_MS,
  FAILURE_KEPT_MS,
  forgetRuntimeAnswers,
  listedModels,
  mayBeRuntime,
  OLLAMA_DEFAULT_CONTEXT,
  runtimeWindow,
  settleRuntimeAsks,
} from "../turn/runtime.js";
import { runTurn } from "../turn/turn.js";
import { roughTokens } from "../turn/window.js";
import { freePort } from "./fixtures/port.js";
import { startModelServer, type ModelServer, type RecordedRequest } from "./model-server.js";

const dirs: string[] = [];
const tmp = (prefix: string) => {
  const d = mkdtempSync(join(tmpdir(), prefix));
  dirs.push(d);
  return d;
};
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});
afterEach(() => {
  forgetRuntimeAnswers();
  forgetFacts();
});

/** An environment whose facts file is in a folder of its own, holding `toml` when given. */
function envWith(toml?: string): { env: NodeJS.ProcessEnv; file: string } {
  const config = tmp("lh-facts-config-");
  mkdirSync(join(config, "lnk"));
  const file = join(config, "lnk", "model-facts.toml");
  if (toml !== undefined) writeFileSync(file, toml);
  return { env: { XDG_CONFIG_HOME: config }, file };
}

const hosted = (extra: Partial<Settings> = {}): Settings => ({ model: { provider: "openai", name: "gpt-4o", base_url: "https://api.example.invalid/v1" }, ...extra });
/** A runtime that says nothing, counting how often it was asked. */
function silent(): RuntimeReport & { calls: string[] } {
  const calls: string[] = [];
  const report = (async (_s: Settings, model: string) => {
    calls.push(model);
    return { none: "no runtime" };
  }) as RuntimeReport & { calls: string[] };
  report.calls = calls;
  return report;
}

describe("your facts over Link's", () => {
  it("takes each field from the most specific entry that has it, yours at equal specificity", async () => {
    const { env } = envWith(`
[models."qwen3"]
window = 8192
inputs = ["text", "image"]
[models."gpt-4o"]
answer = 1000
[models."qwen3-coder"]
answer = 2048
[models."qwen3-coder:30b"]
inputs = ["text", "document"]
`);
    // Your qwen3 doesn't shadow Link's more specific qwen3-coder window (262,144)...
    const coder = layeredFacts("qwen3-coder:30b", env);
    expect(coder.window).toEqual({ value: 262_144, from: "link", entry: "qwen3-coder" });
    // ... your qwen3-coder answer, as specific as Link's, wins over it, and only the answer ...
    expect(coder.answer).toEqual({ value: 2048, from: "yours", entry: "qwen3-coder" });
    // ... and your more specific qwen3-coder:30b gives what it has (inputs), the rest coming from
    // the less specific entries that have it.
    expect(coder.inputs).toEqual({ value: ["text", "document"], from: "yours", entry: "qwen3-coder:30b" });
    expect(layeredFacts("qwen3-coder:14b", env).inputs).toEqual({ value: ["text"], from: "link", entry: "qwen3-coder" });
    expect(layeredFacts("qwen3:8b", env).inputs).toEqual({ value: ["text", "image"], from: "yours", entry: "qwen3" });
    // For qwen3 itself your entry is the most specific: your window.
    expect(layeredFacts("qwen3:8b", env).window).toEqual({ value: 8192, from: "yours", entry: "qwen3" });
    // Field by field: your gpt-4o answer, Link's gpt-4o window; a provider prefix is ignored.
    const gpt = layeredFacts("openai/gpt-4o-2024-08-06", env);
    expect(gpt.window).toMatchObject({ value: 128_000, from: "link" });
    expect(gpt.answer).toMatchObject({ value: 1000, from: "yours" });
  });

  it("sees an edit of your file, and its removal, without a restart", async () => {
    const { env, file } = envWith(`[models."my-model"]\nwindow = 65536\n`);
    const report = silent();
    expect(await modelWindow(hosted(), "my-model", { report, env })).toMatchObject({ window: 65_536, source: "yours" });
    writeFileSync(file, `[models."my-model"]\nwindow = 131072\nanswer = 9000\n`);
    expect(await modelWindow(hosted({ model: { ...hosted().model, answer: 20_000 } }), "my-model", { report, env })).toMatchObject({ window: 131_072, source: "yours", answer: 9000 });
    unlinkSync(file);
    expect(await modelWindow(hosted(), "my-model", { report, env })).toMatchObject({ window: UNKNOWN_WINDOW, source: "unknown" });
  });

  it("gives a model nobody described the unknown window, or the settings' window.unknown", async () => {
    const { env } = envWith();
    const report = silent();
    expect(await modelWindow(hosted(), "nobody-knows-me", { report, env })).toMatchObject({ window: 32_768, source: "unknown", answer: 4096, answerSource: "default" });
    expect(await modelWindow(hosted({ window: { unknown: 10_000 } }), "nobody-knows-me", { report, env })).toMatchObject({ window: 10_000, source: "unknown", answer: 2500 });
    // The runtime is asked about the model in question.
    expect(report.calls).toEqual(["nobody-knows-me", "nobody-knows-me"]);
  });

  it("refuses a facts file that isn't, naming it", async () => {
    const { env, file } = envWith(`[models."x"]\ninputs = ["smell"]\n`);
    await expect(modelWindow(hosted(), "x", { report: silent(), env })).rejects.toThrow(file);
  });
});

describe("the window you set and Link's max", () => {
  it("takes window.max as set, beyond the model's window, and asks no runtime", async () => {
    const { env } = envWith();
    const report = silent();
    expect(await modelWindow(hosted({ window: { max: 1_000_000 } }), "gpt-4o", { report, env })).toMatchObject({ window: 1_000_000, source: "settings" });
    expect(report.calls).toEqual([]);
  });

  it("holds window.link_max to the model's window, and window.max wins over it", async () => {
    const { env } = envWith();
    const report = silent();
    expect(await modelWindow(hosted({ window: { link_max: 100_000 } }), "gpt-4o", { report, env })).toMatchObject({ window: 100_000, source: "link-max", modelWindow: 128_000 });
    expect(await modelWindow(hosted({ window: { link_max: 500_000 } }), "gpt-4o", { report, env })).toMatchObject({ window: 128_000, source: "link" });
    expect(await modelWindow(hosted({ window: { link_max: 500_000, max: 400_000 } }), "gpt-4o", { report, env })).toMatchObject({ window: 400_000, source: "settings" });
  });
});

describe("the answer's share", () => {
  it("is taken as set, held only to the model's longest; a default is bounded by the window", async () => {
    const { env } = envWith(`[models."local-32k"]\nwindow = 32768\n`);
    const report = silent();
    const set = (answer: number, extra: Partial<Settings> = {}) => hosted({ model: { ...hosted().model, answer }, ...extra });
    // 16,000 of a 32,768 window is 16,000, not a quarter of it.
    expect(await modelWindow(set(16_000), "local-32k", { report, env })).toMatchObject({ window: 32_768, answer: 16_000, answerSource: "settings" });
    expect(await modelWindow(hosted({ window: { answer: 20_000 } }), "local-32k", { report, env })).toMatchObject({ answer: 20_000, answerSource: "settings" });
    // gpt-4o answers at most 16,384 tokens.
    expect(await modelWindow(set(20_000), "gpt-4o", { report, env })).toMatchObject({ answer: 16_384, answerSource: "settings", longest: { value: 16_384, from: "link" } });
    // The default, 4,096, at most a quarter of the window.
    expect(await modelWindow(hosted({ window: { max: 8000 } }), "local-32k", { report, env })).toMatchObject({ answer: 2000, answerSource: "default" });
    expect(await modelWindow(hosted(), "local-32k", { report, env })).toMatchObject({ answer: 4096, answerSource: "default" });
  });
});

describe("the window and the answer's share a turn counts with", () => {
  let server: ModelServer;
  beforeAll(async () => {
    server = await startModelServer();
    server.fallback = () => ({ text: "fine" });
  });
  afterAll(() => server.close());

  /** An agent of `model` with these settings' window and answer, its conversation "t" holding eight turns of some 500 tokens each. */
  async function longAgent(model: string, extra: Partial<Settings>): Promise<AgentRef> {
    const agent: AgentRef = { dir: tmp("lh-facts-turn-") };
    writeSettings(agent, { model: { provider: "local", name: model, base_url: server.url }, ...extra });
    const conv = paths(agent).conversation("t");
    const time = new Date().toISOString();
    for (let i = 0; i < 8; i++) {
      await appendEvent(conv, { v: 1, kind: "message", role: "user", time, text: `question ${i} ${"x".repeat(1000)}`, header: "[h]" });
      await appendEvent(conv, { v: 1, kind: "message", role: "assistant", time, text: `answer ${i} ${"y".repeat(1000)}`, model, provider: "local", latency_ms: 1, stop: "end_turn" });
    }
    return agent;
  }

  /** A turn of the conversation: what the model was sent, the instructions' tokens, the window the usage says, and the mark made. */
  async function ask(agent: AgentRef, env: NodeJS.ProcessEnv) {
    let size: number | undefined;
    expect((await runTurn({ agent, thread: "t", message: { text: "and now?" }, env }, (e) => e.type === "usage" && (size = e.size))).stop).toBe("end_turn");
    const messages = server.requests.at(-1)?.body.messages ?? [];
    const sent = JSON.stringify(messages);
    const fixed = roughTokens(String(messages[0]?.content));
    return { first: sent.includes("question 0 x"), fixed, size, mark: readMark(paths(agent).conversation("t")) };
  }

  it("holds Link's max to the model's window: a model's smaller window drops the oldest turns, and a max under it is the window", async () => {
    const { env } = envWith(`[models."small-model"]\nwindow = 4096\n`);
    const agent = await longAgent("small-model", { window: { link_max: 1_000_000 } });
    // Some 4,000 tokens: past the share of the model's 4,096 (less its answer's 1,024 and the margin's 256).
    const held = await ask(agent, env);
    expect(held.size).toBe(4096);
    expect(held.first).toBe(false);
    expect(held.mark?.budget).toBe(4096 - 1024 - 256 - held.fixed);
    expect(held.mark?.event).toBeGreaterThan(1);
    // Link's max under the model's window is the window.
    writeSettings(agent, { model: { provider: "local", name: "small-model", base_url: server.url }, window: { link_max: 3000 } });
    const under = await ask(agent, env);
    expect(under.size).toBe(3000);
    expect(under.mark?.budget).toBe(3000 - 750 - 256 - under.fixed);
  });

  it("holds the answer's share the settings set to the model's longest: the conversation keeps the rest of the window", async () => {
    const { env } = envWith(`[models."short-model"]\nwindow = 8192\nanswer = 1000\n`);
    // An answer's share of 6,000 would leave the conversation under 1,800 tokens of the 8,192; held
    // to the model's 1,000, some 4,000 tokens of it fit whole.
    const agent = await longAgent("short-model", { model: { provider: "local", name: "short-model", base_url: server.url, answer: 6000 } });
    const held = await ask(agent, env);
    expect(held.size).toBe(8192);
    expect(held.first).toBe(true);
    expect(held.mark).toMatchObject({ event: 1, budget: 8192 - 1000 - 410 - held.fixed });
    // Under the model's longest, the share is taken as set.
    writeSettings(agent, { model: { provider: "local", name: "short-model", base_url: server.url, answer: 500 } });
    const set = await ask(agent, env);
    expect(set.mark).toMatchObject({ event: 1, budget: 8192 - 500 - 410 - set.fixed });
  });
});

describe("each local runtime, against a server speaking its answer", () => {
  let server: ModelServer;
  beforeAll(async () => {
    server = await startModelServer({ model: "local-model" });
  });
  afterAll(() => server.close());
  afterEach(() => {
    server.runtime = {};
    server.asked.length = 0;
  });
  const local = (extra: Partial<Settings> = {}): Settings => ({ model: { provider: "local", name: "local-model", base_url: server.url }, ...extra });
  const asked = (path: string) => server.asked.filter((r) => r.path === path);

  it("Ollama: its default context under the trained window, OLLAMA_CONTEXT_LENGTH, window.trained, the Modelfile's num_ctx, a loaded model's context", async () => {
    server.runtime = { ollama: { contextLength: 131_072 } };
    expect((await runtimeWindow(local(), "local-model", { env: {} })).answer).toMatchObject({ runtime: "ollama", window: OLLAMA_DEFAULT_CONTEXT });
    expect(asked("/api/show").map((r) => r.body.model)).toEqual(["local-model"]);
    // Each setting the answer depends on is part of its key: asked again, answered anew.
    expect((await runtimeWindow(local(), "local-model", { env: { OLLAMA_CONTEXT_LENGTH: "16384" } })).answer).toMatchObject({ window: 16_384, how: expect.stringContaining("OLLAMA_CONTEXT_LENGTH") });
    expect((await runtimeWindow(local({ window: { trained: true } }), "local-model", { env: {} })).answer).toMatchObject({ window: 131_072 });
    // A trained window smaller than the default is the window.
    server.runtime = { ollama: { contextLength: 2048 } };
    forgetRuntimeAnswers();
    expect((await runtimeWindow(local(), "local-model", { env: {} })).answer).toMatchObject({ window: 2048 });
    // num_ctx in its Modelfile is what Ollama runs the model with.
    server.runtime = { ollama: { contextLength: 131_072, numCtx: 8192 } };
    forgetRuntimeAnswers();
    expect((await runtimeWindow(local(), "local-model", { env: {} })).answer).toMatchObject({ runtime: "ollama", window: 8192, how: "num_ctx of its Modelfile" });
    // A loaded model's context (/api/ps) is what it runs with now.
    server.runtime = { ollama: { contextLength: 131_072, numCtx: 8192, loaded: 12_288 } };
    forgetRuntimeAnswers();
    expect((await runtimeWindow(local(), "local-model", { env: {} })).answer).toMatchObject({ window: 12_288, at: expect.stringMatching(/\/api\/ps$/) });
  });

  it("llama.cpp's server: n_ctx of /props", async () => {
    server.runtime = { llamacpp: { nCtx: 6144 } };
    expect((await runtimeWindow(local(), "local-model")).answer).toEqual({ runtime: "llama.cpp", window: 6144, at: server.url.replace(/\/v1$/, "/props"), how: "n_ctx of /props" });
  });

  it("vLLM: max_model_len of the model it lists, and nothing for a model it doesn't", async () => {
    server.runtime = { vllm: { maxModelLen: 24_576 }, models: ["local-model"] };
    expect((await runtimeWindow(local(), "local-model")).answer).toMatchObject({ runtime: "vllm", window: 24_576 });
    expect(await runtimeWindow(local(), "another-model")).toEqual({ none: expect.stringContaining("knows another-model") });
  });

  it("LM Studio: a loaded model's loaded_context_length, one not loaded its default unless window.trained", async () => {
    server.runtime = { lmstudio: { loaded: 8192, max: 32_768 } };
    expect((await runtimeWindow(local(), "local-model")).answer).toMatchObject({ runtime: "lmstudio", window: 8192 });
    server.runtime = { lmstudio: { max: 32_768 } };
    forgetRuntimeAnswers();
    expect((await runtimeWindow(local(), "local-model")).answer).toMatchObject({ runtime: "lmstudio", window: 4096 });
    expect((await runtimeWindow(local({ window: { trained: true } }), "local-model")).answer).toMatchObject({ window: 32_768 });
  });

  it("an OpenAI-compatible server that is no runtime says nothing, and Link's facts or the unknown window count", async () => {
    const { env } = envWith();
    expect(await runtimeWindow(local(), "local-model", { env })).toEqual({ none: expect.stringContaining("no runtime at") });
    expect(await modelWindow(local(), "local-model", { env })).toMatchObject({ window: UNKNOWN_WINDOW, source: "unknown" });
    expect(await modelWindow(local(), "qwen2.5:7b", { env })).toMatchObject({ window: 32_768, source: "link" });
  });

  it("the runtime's answer beats Link's facts but not your file", async () => {
    server.runtime = { ollama: { contextLength: 40_960, numCtx: 8192 } };
    const { env, file } = envWith();
    expect(await modelWindow(local(), "qwen3:8b", { env })).toMatchObject({ window: 8192, source: "runtime", runtime: { runtime: "ollama" } });
    writeFileSync(file, `[models."qwen3"]\nwindow = 20000\n`);
    expect(await modelWindow(local(), "qwen3:8b", { env })).toMatchObject({ window: 20_000, source: "yours" });
  });

  it("keeps an answer for a bounded time, then asks again off the turn's path", async () => {
    server.runtime = { llamacpp: { nCtx: 6144 } };
    let now = 1_000_000;
    const clock = { now: () => now };
    expect((await runtimeWindow(local(), "local-model", clock)).answer?.window).toBe(6144);
    server.runtime = { llamacpp: { nCtx: 12_288 } };
    // Within the time kept: the answer kept, nothing asked.
    now += ANSWER_KEPT_MS - 1;
    expect((await runtimeWindow(local(), "local-model", clock)).answer?.window).toBe(6144);
    expect(asked("/props")).toHaveLength(1);
    // Past it: the answer kept is used once more while it is asked again, and the next turn has the new one.
    now += 2;
    expect((await runtimeWindow(local(), "local-model", clock)).answer?.window).toBe(6144);
    await settleRuntimeAsks();
    expect(asked("/props")).toHaveLength(2);
    expect((await runtimeWindow(local(), "local-model", clock)).answer?.window).toBe(12_288);
  });

  it("keeps a failure only briefly: a runtime down at the first turn is found once it is up", async () => {
    const port = await freePort();
    const settings: Settings = { model: { provider: "ollama", name: "late-model", base_url: `http://127.0.0.1:${port}/v1` } };
    let now = 5_000_000;
    const clock = { now: () => now, env: {} };
    expect(await runtimeWindow(settings, "late-model", clock)).toEqual({ none: `no runtime answered at http://127.0.0.1:${port}/v1 (connection refused)` });
    const late = await startModelServer({ port, model: "late-model" });
    try {
      late.runtime = { ollama: { contextLength: 131_072, numCtx: 16_384 } };
      now += FAILURE_KEPT_MS - 1;
      expect((await runtimeWindow(settings, "late-model", clock)).answer).toBeUndefined();
      now += 2;
      expect((await runtimeWindow(settings, "late-model", clock)).answer).toMatchObject({ runtime: "ollama", window: 16_384 });
    } finally {
      await late.close();
    }
  });

  it("skips a runtime that doesn't answer in time, for that turn", async () => {
    // A server that accepts and never answers.
    const { createServer } = await import("node:http");
    const silentServer = createServer(() => undefined);
    await new Promise<void>((resolve) => silentServer.listen(0, "127.0.0.1", resolve));
    const address = silentServer.address();
    const port = typeof address === "object" && address ? address.port : 0;
    try {
      const found = await runtimeWindow({ model: { provider: "vllm", name: "m", base_url: `http://127.0.0.1:${port}/v1` } }, "m", { timeoutMs: 200 });
      expect(found).toEqual({ none: `no runtime answered at http://127.0.0.1:${port}/v1 (none answered within 0.2 s)` });
    } finally {
      silentServer.closeAllConnections();
      await new Promise<void>((resolve) => silentServer.close(() => resolve()));
    }
  });

  it("never asks a hosted endpoint what only a local runtime answers", async () => {
    expect(mayBeRuntime(hosted())).toBe(false);
    expect(mayBeRuntime({ model: { provider: "Ollama", name: "m", base_url: "http://gpu-box:11434/v1" } })).toBe(true);
    for (const host of ["127.0.0.1", "localhost", "[::1]", "192.168.1.20", "10.0.0.5", "172.20.1.1", "studio.local"]) {
      expect(mayBeRuntime({ model: { provider: "x", name: "m", base_url: `http://${host}:1234/v1` } }), host).toBe(true);
    }
    for (const host of ["8.8.8.8", "172.32.0.1", "api.openai.com", "[2001:db8::1]"]) {
      expect(mayBeRuntime({ model: { provider: "x", name: "m", base_url: `http://${host}/v1` } }), host).toBe(false);
    }
    expect(await runtimeWindow(hosted(), "gpt-4o")).toEqual({ none: expect.stringContaining("not asked") });
    // Said again as it was the first time, each endpoint by its provider and its URL together.
    for (let again = 0; again < 2; again++) {
      expect(mayBeRuntime({ model: { provider: "Ollama", name: "m", base_url: "http://8.8.8.8/v1" } })).toBe(true);
      expect(mayBeRuntime({ model: { provider: "x", name: "m", base_url: "http://8.8.8.8/v1" } })).toBe(false);
      expect(mayBeRuntime({ model: { provider: "x", name: "m", base_url: "http://127.0.0.1:1234/v1" } })).toBe(true);
    }
  });

  it("lists the endpoint's models, with the key, kept like a runtime's answer", async () => {
    server.runtime = { models: ["local-model", "big-model", "tiny-model"] };
    const settings = { ...local(), model: { ...local().model, key: "sk-list-key" } };
    expect(await listedModels(settings)).toEqual(["local-model", "big-model", "tiny-model"]);
    expect(await listedModels(settings)).toEqual(["local-model", "big-model", "tiny-model"]);
    const lists = asked("/v1/models");
    expect(lists).toHaveLength(1);
    expect(lists[0]?.headers.authorization).toBe("Bearer sk-list-key");
    expect(await listedModels({ model: { provider: "x", name: "m", base_url: `http://127.0.0.1:${await freePort()}/v1` } })).toBeUndefined();
  });

  it("keeps an endpoint's answer that it has no list (404) as an answer, not as a failure asked again soon", async () => {
    let requests = 0;
    const none = createServer((_req, res) => {
      requests++;
      res.writeHead(404).end();
    });
    await new Promise<void>((resolve) => none.listen(0, "127.0.0.1", resolve));
    try {
      const { port } = none.address() as AddressInfo;
      const settings: Settings = { model: { provider: "x", name: "m", base_url: `http://127.0.0.1:${port}/v1` } };
      let now = 9_000_000;
      const clock = { now: () => now };
      expect(await listedModels(settings, clock)).toBeUndefined();
      now += FAILURE_KEPT_MS + 1;
      expect(await listedModels(settings, clock)).toBeUndefined();
      expect(requests).toBe(1);
    } finally {
      await new Promise((resolve) => none.close(resolve));
    }
  });
});

describe("the runtime is asked about the conversation's model", () => {
  let server: ModelServer;
  beforeAll(async () => {
    server = await startModelServer();
  });
  afterAll(() => server.close());

  it("after /model:set, a turn's window is the chosen model's, as the runtime says", async () => {
    const agent: AgentRef = { dir: tmp("lh-facts-agent-") };
    writeSettings(agent, { model: { provider: "local", name: "small-model", base_url: server.url } });
    // vLLM serves both; only the chosen one is big.
    server.runtime = { models: ["small-model", "big-model"], vllm: { maxModelLen: 4096 } };
    const conv = paths(agent).conversation("chosen");
    await runTurn({ agent, thread: "chosen", message: { text: "hello" } }, () => undefined);
    await appendEvent(conv, { v: 1, kind: "command", name: "/model:set", model: "big-model", time: new Date().toISOString() });
    server.runtime = { models: ["small-model", "big-model"], vllm: { maxModelLen: 9000 } };
    forgetRuntimeAnswers();
    // The model refuses the prompt as too long: the failure says the window the turn used and where from.
    server.script({ error: { status: 400, message: "This model's maximum context length is 9000 tokens.", code: "context_length_exceeded" } });
    await runTurn({ agent, thread: "chosen", message: { text: "again" } }, () => undefined);
    const last = (server.requests as RecordedRequest[]).at(-1);
    expect(last?.body.model).toBe("big-model");
    const failure = readEventsFrom(conv, 1).at(-1)?.event;
    expect(failure).toMatchObject({ kind: "failure", reason: "context_too_long", message: expect.stringContaining("window 9000 from runtime") });
  });
});

describe("parts, by what the model reads and the contract's limits", () => {
  const png = (bytes = 8): Part => ({ type: "image_url", image_url: { url: `data:image/png;base64,${Buffer.alloc(bytes).toString("base64")}` } });
  const pdf: Part = { type: "file", file: { filename: "report.pdf", file_data: `data:application/pdf;base64,${Buffer.from("%PDF-1.7").toString("base64")}` } };
  const notes: Part = { type: "file", file: { filename: "notes.md", file_data: "data:text/markdown;base64,IyBub3Rlcw==" } };

  it("sends every part to a model that reads them", () => {
    expect(partsFor("look", [png(), pdf, notes], ["text", "image", "document"])).toEqual({ text: "look", parts: [png(), pdf, notes], leftOut: [] });
  });

  it("sends none to a model that reads text only, and names each in the text", () => {
    const got = partsFor("look", [png(), pdf], ["text"]);
    expect(got.parts).toEqual([]);
    expect(got.text).toBe("look\n[left out of this message: image 1 (this model reads text only); report.pdf (this model reads text only)]");
  });

  it("sends images and not documents to a model that reads images", () => {
    const got = partsFor("", [png(), pdf], ["text", "image"]);
    expect(got.parts).toEqual([png()]);
    expect(got.text).toBe("[left out of this message: report.pdf (this model reads images, not documents)]");
  });

  it("leaves out a type the contract doesn't take, a part over 10 MiB, one past the 8th, and a link", () => {
    const bmp: Part = { type: "image_url", image_url: { url: "data:image/bmp;base64,Qk0=" } };
    const zip: Part = { type: "file", file: { filename: "a.zip", file_data: "data:application/zip;base64,UEs=" } };
    const link: Part = { type: "image_url", image_url: { url: "https://example.com/cat.png" } };
    const big = png(PART_MAX + 3);
    const many = Array.from({ length: PARTS_MAX + 1 }, () => png());
    const got = partsFor("x", [bmp, zip, link, big, ...many], ["text", "image", "document"]);
    expect(got.parts).toHaveLength(PARTS_MAX);
    expect(got.leftOut).toEqual([
      "image 1 (image/bmp is not a PNG, JPEG, GIF or WebP image)",
      "a.zip (application/zip is not a PDF or text document)",
      "image 3 (it is not a data: URL)",
      "image 4 (10.0 MiB, over the 10.0 MiB a part may be)",
      `image ${4 + PARTS_MAX + 1} (past the ${PARTS_MAX} parts a message may hold)`,
    ]);
  });

  it("a turn sends a text-only model no image, and the message says so", async () => {
    const server = await startModelServer();
    try {
      const { env } = envWith(`[models."text-model"]\ninputs = ["text"]\n`);
      const agent: AgentRef = { dir: tmp("lh-parts-agent-") };
      writeSettings(agent, { model: { provider: "local", name: "text-model", base_url: server.url } });
      const before = { ...process.env };
      process.env.XDG_CONFIG_HOME = env.XDG_CONFIG_HOME;
      try {
        await runTurn({ agent, thread: "t", message: { text: "what is this?", parts: [png()] } }, () => undefined);
      } finally {
        process.env.XDG_CONFIG_HOME = before.XDG_CONFIG_HOME;
        if (before.XDG_CONFIG_HOME === undefined) delete process.env.XDG_CONFIG_HOME;
      }
      const sent = JSON.stringify(server.requests.at(-1)?.body.messages);
      expect(sent).not.toContain("image_url");
      expect(sent).toContain("what is this?\\n[left out of this message: image 1 (this model reads text only)]");
      // The event keeps what was sent, so every later turn sends the same bytes.
      const stored = readEventsFrom(paths(agent).conversation("t"), 1)[0]?.event;
      expect(stored).toMatchObject({ kind: "message", role: "user", text: expect.stringContaining("left out") });
      expect(stored && "parts" in stored ? stored.parts : undefined).toBeUndefined();
    } finally {
      await server.close();
    }
  });
});
