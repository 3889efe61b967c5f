import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import OpenAI from "openai";
import type { ChatCompletionChunk } from "openai/resources/chat/completions";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { startModelServer, type ModelServer } from "./model-server.js";

let server: ModelServer;
let client: OpenAI;

beforeEach(async () => {
  server = await startModelServer({ ollama: { contextLength: 32768 } });
  client = new OpenAI({ baseURL: server.url, apiKey: "x", maxRetries: 0 });
});
afterEach(async () => {
  await server.close();
});

const ask = (text: string) => [{ role: "user" as const, content: text }];

// What a harness does with a stream: append content and reasoning, merge tool calls by index.
async function collect(stream: AsyncIterable<ChatCompletionChunk>) {
  let content = "";
  let reasoning = "";
  const order: string[] = [];
  const calls: { id: string; name: string; arguments: string }[] = [];
  let finish: string | null = null;
  let usage: ChatCompletionChunk["usage"] = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    const choice = chunk.choices[0];
    if (!choice) continue;
    const delta = choice.delta;
    // reasoning_content is not in the client's types; it passes through as sent.
    if ("reasoning_content" in delta && typeof delta.reasoning_content === "string") {
      reasoning += delta.reasoning_content;
      order.push("reasoning");
    }
    if (delta.content) {
      content += delta.content;
      order.push("content");
    }
    for (const call of delta.tool_calls ?? []) {
      const into = (calls[call.index] ??= { id: "", name: "", arguments: "" });
      into.id ||= call.id ?? "";
      into.name += call.function?.name ?? "";
      into.arguments += call.function?.arguments ?? "";
    }
    finish = choice.finish_reason ?? finish;
  }
  return { content, reasoning, order, calls, finish, usage };
}

describe("scripted model server", () => {
  it("streams a text answer in deltas, with usage when include_usage is set", async () => {
    server.script({ text: "Hello there, world.", chunks: 4, usage: { prompt_tokens: 120, completion_tokens: 5, cached_tokens: 100, cost: 0.0012 } }, { text: "again" });
    const first = await collect(
      await client.chat.completions.create({ model: "m1", messages: ask("hi"), stream: true, stream_options: { include_usage: true } }),
    );
    expect(first.content).toBe("Hello there, world.");
    expect(first.order).toEqual(["content", "content", "content", "content"]);
    expect(first.finish).toBe("stop");
    expect(first.usage).toMatchObject({ prompt_tokens: 120, completion_tokens: 5, total_tokens: 125, prompt_tokens_details: { cached_tokens: 100 }, cost: 0.0012 });

    const second = await collect(await client.chat.completions.create({ model: "m1", messages: ask("hi"), stream: true }));
    expect(second.content).toBe("again");
    expect(second.usage).toBeNull();
  });

  it("computes usage when none is scripted and answers without streaming", async () => {
    server.script({ text: "a".repeat(40) });
    const completion = await client.chat.completions.create({ model: "m2", messages: ask("x".repeat(400)) });
    expect(completion.object).toBe("chat.completion");
    expect(completion.model).toBe("m2");
    expect(completion.choices[0]?.message.content).toBe("a".repeat(40));
    expect(completion.usage?.completion_tokens).toBe(10);
    expect(completion.usage?.prompt_tokens).toBeGreaterThanOrEqual(100);
    expect(completion.usage?.prompt_tokens).toBeLessThan(130);
  });

  it("streams tool calls as OpenAI's deltas, merged by index", async () => {
    server.script({
      text: "Let me look.",
      tool_calls: [
        { id: "call_a", name: "files__read", arguments: { path: "/tmp/a.txt", lines: [1, 20] } },
        { name: "memory__search", arguments: '{"query":"pelicans"}' },
      ],
    });
    const stream = await client.chat.completions.create({ model: "m", messages: ask("read it"), stream: true });
    const got = await collect(stream);
    expect(got.finish).toBe("tool_calls");
    expect(got.content).toBe("Let me look.");
    expect(got.calls).toHaveLength(2);
    expect(got.calls[0]).toEqual({ id: "call_a", name: "files__read", arguments: '{"path":"/tmp/a.txt","lines":[1,20]}' });
    expect(got.calls[1]?.name).toBe("memory__search");
    expect(got.calls[1]?.id).toMatch(/^call_/);
    expect(JSON.parse(got.calls[1]?.arguments ?? "")).toEqual({ query: "pelicans" });
  });

  it("streams reasoning_content as deltas before the content", async () => {
    server.script({ reasoning_content: "The user greets me; greet back.", text: "Hi!" });
    const got = await collect(await client.chat.completions.create({ model: "m", messages: ask("hello"), stream: true }));
    expect(got.reasoning).toBe("The user greets me; greet back.");
    expect(got.order.filter((o) => o === "reasoning").length).toBeGreaterThan(1);
    expect(got.order.indexOf("content")).toBeGreaterThan(got.order.lastIndexOf("reasoning"));
    expect(got.content).toBe("Hi!");
  });

  it("answers a context overflow as OpenAI does: 400 context_length_exceeded", async () => {
    const message = "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.";
    server.script({ error: { status: 400, code: "context_length_exceeded", message } });
    const error = await client.chat.completions.create({ model: "m", messages: ask("long"), stream: true }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.BadRequestError);
    expect(error).toMatchObject({ status: 400, code: "context_length_exceeded", type: "invalid_request_error" });
    expect(String((error as Error).message)).toContain("maximum context length is 8192 tokens");
  });

  it("refuses the tools OpenAI's API refuses: more than 128, a name past 64 characters or outside its pattern", async () => {
    const fn = (name: string) => ({ type: "function" as const, function: { name, parameters: { type: "object", properties: {} } } });
    const refused = async (tools: ReturnType<typeof fn>[]) => client.chat.completions.create({ model: "m", messages: ask("hi"), tools }).catch((e: unknown) => e);
    expect(await refused(Array.from({ length: 129 }, (_, i) => fn(`f${i}`)))).toMatchObject({ status: 400, code: "array_above_max_length" });
    expect(await refused([fn("a".repeat(65))])).toMatchObject({ status: 400, code: "string_above_max_length" });
    expect(await refused([fn("ok"), fn("has a space")])).toMatchObject({ status: 400, code: "invalid_value" });
    // A description past the bound a test sets, as some of OpenAI's models refuse it.
    server.descriptionMax = 1024;
    const described = { ...fn("described"), function: { ...fn("described").function, description: "d".repeat(1025) } };
    const long = await client.chat.completions.create({ model: "m", messages: ask("hi"), tools: [described] }).catch((e: unknown) => e);
    expect(long).toMatchObject({ status: 400, code: "string_above_max_length" });
    expect(String((long as Error).message)).toContain("Invalid 'tools[0].function.description': string too long. Expected a string with maximum length 1024, but got a string with length 1025 instead.");
    server.descriptionMax = undefined;
    // At the bounds, taken.
    const taken = await client.chat.completions.create({ model: "m", messages: ask("hi"), tools: Array.from({ length: 128 }, (_, i) => fn(`${"f".repeat(60)}${i}`.slice(-64))) });
    expect(taken.choices[0]?.message.content).toBe("echo: hi");
  });

  it("lets the client retry a 503 and succeed on the next scripted reply", async () => {
    server.script({ error: { status: 503, message: "The server is overloaded." } }, { text: "recovered" });
    const retrying = new OpenAI({ baseURL: server.url, apiKey: "x", maxRetries: 2 });
    const got = await collect(await retrying.chat.completions.create({ model: "m", messages: ask("hi"), stream: true }));
    expect(got.content).toBe("recovered");
    expect(server.requests).toHaveLength(2);
    expect(server.pending).toBe(0);
  });

  it("records what the model was sent", async () => {
    server.script({ text: "ok" });
    await collect(
      await client.chat.completions.create({
        model: "deepseek-chat",
        messages: [
          { role: "system", content: "You are terse." },
          { role: "user", content: [{ type: "text", text: "what is 2+2?" }] },
        ],
        tools: [{ type: "function", function: { name: "calc", parameters: { type: "object" } } }],
        stream: true,
      }),
    );
    const [request] = server.requests;
    expect(request?.path).toBe("/v1/chat/completions");
    expect(request?.headers.authorization).toBe("Bearer x");
    expect(request?.body.model).toBe("deepseek-chat");
    expect(request?.body.messages).toEqual([
      { role: "system", content: "You are terse." },
      { role: "user", content: [{ type: "text", text: "what is 2+2?" }] },
    ]);
    expect(request?.body.tools).toEqual([{ type: "function", function: { name: "calc", parameters: { type: "object" } } }]);
  });

  it("echoes when the script is empty, and serves /v1/models and /api/show", async () => {
    const got = await client.chat.completions.create({ model: "m", messages: ask("ping") });
    expect(got.choices[0]?.message.content).toBe("echo: ping");
    const models = await client.models.list();
    expect(models.data.map((m) => m.id)).toEqual(["scripted"]);
    const show = await fetch(server.url.replace(/\/v1$/, "/api/show"), { method: "POST", body: JSON.stringify({ model: "m" }) });
    expect(await show.json()).toMatchObject({ model_info: { "llama.context_length": 32768 } });
  });

  it("holds a hanging answer until the client aborts, then records the abort", async () => {
    server.script({ text: "never", hang: true }, { text: "next" });
    const controller = new AbortController();
    const stream = await client.chat.completions.create(
      { model: "m", messages: ask("wait"), stream: true },
      { signal: controller.signal },
    );
    const reading = collect(stream).catch((e: unknown) => e);
    const request = await server.waitForRequest(1);
    controller.abort();
    await reading;
    await expect.poll(() => request.aborted, { timeout: 5_000 }).toBe(true);
    // The server is still healthy after the hang-up.
    const next = await client.chat.completions.create({ model: "m", messages: ask("again") });
    expect(next.choices[0]?.message.content).toBe("next");
  });

  it("stops a slow stream when the client goes away, and close() ends open sockets", async () => {
    server.script({ text: "slow answer here", chunks: 10, chunkDelayMs: 200 }, { hang: true });
    const stream = await client.chat.completions.create({ model: "m", messages: ask("slow"), stream: true });
    for await (const chunk of stream) {
      if (chunk.choices[0]?.delta.content) break; // Leaving the loop cancels the response.
    }
    await expect.poll(() => server.requests[0]?.aborted, { timeout: 5_000 }).toBe(true);
    const hanging = client.chat.completions.create({ model: "m", messages: ask("hang") }).catch((e: unknown) => e);
    await server.waitForRequest(2);
    // Closing ends the hanging answer's connection (the test's own time bounds how soon).
    await server.close();
    expect(await hanging).toBeInstanceOf(OpenAI.APIConnectionError);
  });
});

describe("model server as a process", () => {
  it("prints its URL, plays a script file, then echoes", async () => {
    const dir = mkdtempSync(join(tmpdir(), "model-server-"));
    const file = join(dir, "script.json");
    writeFileSync(file, JSON.stringify([{ text: "from the script" }]));
    const child = spawn(process.execPath, ["--import", "tsx", "test/model-server.ts", "--echo", "--script", file], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    try {
      const line = await new Promise<string>((resolve, reject) => {
        createInterface({ input: child.stdout }).once("line", resolve);
        child.once("exit", (code) => reject(new Error(`model-server exited with ${String(code)}`)));
      });
      expect(line).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/v1$/);
      const cli = new OpenAI({ baseURL: line, apiKey: "x", maxRetries: 0 });
      const first = await cli.chat.completions.create({ model: "m", messages: ask("one") });
      const second = await cli.chat.completions.create({ model: "m", messages: ask("two") });
      expect(first.choices[0]?.message.content).toBe("from the script");
      expect(second.choices[0]?.message.content).toBe("echo: two");
    } finally {
      const exited = new Promise((resolve) => child.once("exit", resolve));
      child.kill("SIGTERM");
      await exited;
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
