// A scripted OpenAI-compatible chat-completions server on loopback: the only stand-in
// for the paid model API in tests, the benchmark and the demo, so it speaks the real
// wire format (SSE chunks, tool-call deltas, usage, error bodies), refuses the tools
// OpenAI's API refuses (more than 128, a name past 64 characters or outside its
// pattern), and records every request so a test can assert what the model was sent.
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import { pathToFileURL } from "node:url";
import { z } from "zod";

const ToolCallSchema = z.strictObject({
  id: z.string().optional(),
  name: z.string(),
  arguments: z.union([z.string(), z.record(z.string(), z.unknown())]),
  /** The number the stream gives the call (a hostile endpoint's, say); left out, its place among the calls. */
  index: z.number().int().nonnegative().optional(),
});

/**
 * Numbers to report in place of the ones the server counts. Left out, prompt_tokens are the
 * request's messages' JSON by four characters a token, and cached_tokens the same count of the
 * longest start those bytes share with one of the last requests (a provider's prompt cache, so the
 * figures are real); once prompt_tokens are scripted, cached_tokens are 0 unless scripted too.
 */
const UsageSchema = z.strictObject({
  prompt_tokens: z.number().int().nonnegative().optional(),
  completion_tokens: z.number().int().nonnegative().optional(),
  cached_tokens: z.number().int().nonnegative().optional(),
  cost: z.number().optional(),
});

export const AnswerReplySchema = z.strictObject({
  text: z.string().optional(),
  reasoning_content: z.string().optional(),
  reasoning: z.string().optional(),
  reasoning_details: z.array(z.unknown()).optional(),
  tool_calls: z.array(ToolCallSchema).optional(),
  usage: UsageSchema.optional(),
  /** Split `text` into this many content deltas. */
  chunks: z.number().int().positive().optional(),
  /** Wait this long before the first byte. */
  delayMs: z.number().nonnegative().optional(),
  /** Wait this long between streamed chunks. */
  chunkDelayMs: z.number().nonnegative().optional(),
  finish_reason: z.string().optional(),
  /** Send headers and a first chunk, then never finish (kill and cancel tests). */
  hang: z.boolean().optional(),
  /**
   * Send headers, the first chunk and `after` more, then no data again: only an SSE comment
   * (`: keepalive`) every `keepaliveMs` when set, until the client hangs up (stalled-stream tests).
   */
  stall: z.strictObject({ after: z.number().int().nonnegative(), keepaliveMs: z.number().positive().optional() }).optional(),
  /**
   * The usage object exactly as sent, as JSON text, in place of the one made from `usage`: a
   * provider's odd numbers (negative, fractional, `1e999`, strings) reach the client as they are.
   */
  usageJson: z.string().optional(),
  /**
   * Each event's data as it is, in place of the chunks made from the fields above (a `[DONE]` only
   * where listed): a broken or hostile endpoint's chunks, which a reply function can make of what
   * the request carried (its Authorization header, echoed back).
   */
  events: z.array(z.string()).optional(),
  /** The answer's content type in place of text/event-stream. */
  contentType: z.string().optional(),
});

export const ErrorReplySchema = z.strictObject({
  error: z.strictObject({
    status: z.number().int().min(400).max(599),
    message: z.string(),
    code: z.string().optional(),
    type: z.string().optional(),
    /** Response headers sent with the error (`retry-after`, `retry-after-ms`, `x-should-retry`). */
    headers: z.record(z.string(), z.string()).optional(),
    /** Append the request's Authorization header to the message, as some endpoints echo the key they refused. */
    echoAuthorization: z.boolean().optional(),
  }),
});

export const ReplySchema = z.union([ErrorReplySchema, AnswerReplySchema]);
export type AnswerReply = z.infer<typeof AnswerReplySchema>;
export type ErrorReply = z.infer<typeof ErrorReplySchema>;
export type Reply = z.infer<typeof ReplySchema>;

// Loose on purpose: only the fields the server reads are checked, the rest pass through
// so a test can assert anything the client sent.
const ContentPartSchema = z.looseObject({ type: z.string(), text: z.string().optional() });
const MessageSchema = z.looseObject({
  role: z.string(),
  content: z.union([z.string(), z.array(ContentPartSchema), z.null()]).optional(),
});
export const ChatRequestSchema = z.looseObject({
  model: z.string().optional(),
  messages: z.array(MessageSchema).optional(),
  stream: z.boolean().nullish(),
  stream_options: z.looseObject({ include_usage: z.boolean().nullish() }).nullish(),
});
export type ChatRequest = z.infer<typeof ChatRequestSchema>;
export type ChatMessage = z.infer<typeof MessageSchema>;

export interface RecordedRequest {
  method: string;
  path: string;
  headers: IncomingHttpHeaders;
  /** The parsed JSON body; `{}` for a request without one. */
  body: ChatRequest;
  /** Date.now() when the body had been read. */
  time: number;
  /** performance.now() of this process when the request reached the server, before its body was read. */
  arrived: number;
  /** performance.now() when the exchange was over (answered, or hung up); undefined until then. */
  over?: number;
  /** performance.now() of this process when the server took the connection the request came on. */
  connectedAt: number;
  /** Set when the client hung up before the answer was complete. */
  aborted: boolean;
  /** Settles once the exchange is over (answered, or hung up): `aborted` is final then. */
  ended: Promise<void>;
}

export type ReplyFn = (request: RecordedRequest) => Reply | Promise<Reply>;
export type ScriptStep = Reply | ReplyFn;

export interface ModelServerOptions {
  /** 0 (the default) picks a free port. */
  port?: number;
  /** Used when the script queue is empty; defaults to `echoReply`. */
  fallback?: ReplyFn;
  /** The model id listed by GET /v1/models. */
  model?: string;
  /** Serve Ollama's POST /api/show with this trained window. */
  ollama?: OllamaScript;
}

/** Ollama: POST /api/show (trained window, the Modelfile's num_ctx), GET /api/ps (a loaded model's context). */
export interface OllamaScript {
  contextLength: number;
  arch?: string;
  /** `num_ctx N` in /api/show's parameters. */
  numCtx?: number;
  /** Listed by /api/ps as loaded with this context_length. */
  loaded?: number;
}

/**
 * What the server answers as a local runtime, beside chat completions: each as that runtime's
 * documentation says. A test may change it between requests.
 */
export interface RuntimeScript {
  /** The ids GET /v1/models lists; left out, the server's one model. */
  models?: string[];
  ollama?: OllamaScript;
  /** llama.cpp's server: GET /props with default_generation_settings.n_ctx. */
  llamacpp?: { nCtx: number };
  /** vLLM: each model GET /v1/models lists has this max_model_len. */
  vllm?: { maxModelLen: number };
  /** LM Studio: GET /api/v0/models lists each model, loaded with `loaded` tokens, or not loaded. */
  lmstudio?: { loaded?: number; max: number };
  /** Each answer of a runtime's own API (not GET /v1/models) waits for this first: a runtime slow to say. */
  until?: Promise<unknown>;
}

/** The paths a runtime's or a provider's own API answers: asked by the harness, never the model's turn. */
const RUNTIME_PATHS = new Set(["/v1/models", "/api/show", "/api/ps", "/props", "/api/v0/models"]);

export interface ModelServer {
  /** Base URL ending in `/v1`, as the `openai` client's `baseURL`. */
  readonly url: string;
  /** Every request received, in order, but those to a runtime's own API or the list of models (see `asked`). */
  readonly requests: RecordedRequest[];
  /** Every request to a runtime's own API or to GET /v1/models, in order. */
  readonly asked: RecordedRequest[];
  /** How many connections it took since `time` (performance.now() of this process). */
  connectionsSince(time: number): number;
  /** What it answers as a runtime; changed by a test as it goes. */
  runtime: RuntimeScript;
  /**
   * The longest description of a function it takes, refusing a longer one as OpenAI's API does for
   * some of its models (1,024 characters); none unless a test sets it.
   */
  descriptionMax: number | undefined;
  /** Scripted replies not yet used. */
  readonly pending: number;
  fallback: ReplyFn;
  /** Append replies; each chat-completions request takes the next one. */
  script(...replies: ScriptStep[]): void;
  /** Resolves with the `count`-th request (1-based) once it has arrived. */
  waitForRequest(count?: number): Promise<RecordedRequest>;
  close(): Promise<void>;
}

/** The last user message's text. */
export function lastUserText(request: RecordedRequest): string {
  const user = [...(request.body.messages ?? [])].reverse().find((m) => m.role === "user");
  return user ? contentText(user.content) : "";
}

/** Echoes the last user message's last line: the message itself, without the line that heads it (date, channel, speaker). */
export const echoReply: ReplyFn = (request) => ({ text: `echo: ${lastUserText(request).split("\n").at(-1) ?? ""}` });

function contentText(content: ChatMessage["content"]): string {
  if (typeof content === "string") return content;
  return (content ?? []).map((part) => part.text ?? "").join("");
}

const tokens = (chars: number): number => Math.ceil(chars / 4);

/** Splits by code points into at most `n` nearly equal, non-empty pieces. */
function pieces(text: string, n: number): string[] {
  const chars = Array.from(text);
  const count = Math.max(1, Math.min(n, chars.length));
  const out: string[] = [];
  for (let i = 0; i < count; i++) {
    const piece = chars.slice(Math.floor((i * chars.length) / count), Math.floor(((i + 1) * chars.length) / count));
    if (piece.length > 0) out.push(piece.join(""));
  }
  return out;
}

const newId = (prefix: string): string => `${prefix}${randomBytes(12).toString("hex")}`;

interface Call {
  id: string;
  name: string;
  arguments: string;
  index?: number;
}

function calls(reply: AnswerReply): Call[] {
  return (reply.tool_calls ?? []).map((call) => ({
    id: call.id ?? newId("call_"),
    name: call.name,
    arguments: typeof call.arguments === "string" ? call.arguments : JSON.stringify(call.arguments),
    ...(call.index !== undefined ? { index: call.index } : {}),
  }));
}

/** How many of the last requests' messages a request's start is compared with, as a provider's cache would. */
const CACHED_REQUESTS = 8;

/** The length of the longest start `a` and `b` share. */
function sharedStart(a: string, b: string): number {
  const most = Math.min(a.length, b.length);
  let i = 0;
  // A chunk at a time, then a character at a time.
  while (i + 256 <= most && a.slice(i, i + 256) === b.slice(i, i + 256)) i += 256;
  while (i < most && a.charCodeAt(i) === b.charCodeAt(i)) i++;
  return i;
}

function usageOf(reply: AnswerReply, request: RecordedRequest, toolCalls: Call[], cachedChars: number) {
  const scripted = reply.usage;
  const answerChars =
    (reply.text ?? "").length +
    (reply.reasoning_content ?? reply.reasoning ?? "").length +
    toolCalls.reduce((sum, call) => sum + call.name.length + call.arguments.length, 0);
  const prompt = scripted?.prompt_tokens ?? tokens(JSON.stringify(request.body.messages ?? []).length);
  const completion = scripted?.completion_tokens ?? Math.max(1, tokens(answerChars));
  const cached = scripted?.cached_tokens ?? (scripted?.prompt_tokens !== undefined ? 0 : Math.min(prompt, Math.floor(cachedChars / 4)));
  return {
    prompt_tokens: prompt,
    completion_tokens: completion,
    total_tokens: prompt + completion,
    prompt_tokens_details: { cached_tokens: cached },
    ...(scripted?.cost !== undefined ? { cost: scripted.cost } : {}),
  };
}

function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { ...headers, "content-type": "application/json", "content-length": Buffer.byteLength(text) });
  res.end(text);
}

// The body OpenAI sends with an error status.
function sendError(res: ServerResponse, error: ErrorReply["error"], request?: RecordedRequest): void {
  const type = error.type ?? (error.status >= 500 ? "server_error" : "invalid_request_error");
  const auth = request?.headers.authorization;
  const message = error.echoAuthorization ? `${error.message} (you sent: ${auth ?? "no Authorization header"})` : error.message;
  sendJson(res, error.status, { error: { message, type, code: error.code ?? null, param: null } }, error.headers);
}

/** The most functions a request may offer, and the pattern of a function's name, as OpenAI's API holds them. */
const TOOLS_MAX = 128;
const FUNCTION_NAME = /^[a-zA-Z0-9_-]+$/;
const FUNCTION_NAME_MAX = 64;

/** What OpenAI's API says of a request's tools it refuses (its own words and codes), if it would. */
function toolsRefused(body: ChatRequest, descriptionMax: number | undefined): { message: string; code: string } | undefined {
  const tools: unknown = (body as { tools?: unknown }).tools;
  if (tools === undefined) return undefined;
  if (!Array.isArray(tools)) return { message: "Invalid type for 'tools': expected an array of objects, but got a non-array value instead.", code: "invalid_type" };
  if (tools.length > TOOLS_MAX) {
    return { message: `Invalid 'tools': array too long. Expected an array with maximum length ${TOOLS_MAX}, but got an array with length ${tools.length} instead.`, code: "array_above_max_length" };
  }
  for (const [i, tool] of tools.entries()) {
    const name: unknown = (tool as { function?: { name?: unknown } } | null)?.function?.name;
    if (typeof name !== "string") return { message: `Missing required parameter: 'tools[${i}].function.name'.`, code: "missing_required_parameter" };
    if (name.length > FUNCTION_NAME_MAX) {
      return { message: `Invalid 'tools[${i}].function.name': string too long. Expected a string with maximum length ${FUNCTION_NAME_MAX}, but got a string with length ${name.length} instead.`, code: "string_above_max_length" };
    }
    if (!FUNCTION_NAME.test(name)) {
      return { message: `Invalid 'tools[${i}].function.name': string does not match pattern. Expected a string that matches the pattern '${FUNCTION_NAME.source}'.`, code: "invalid_value" };
    }
    const description: unknown = (tool as { function?: { description?: unknown } }).function?.description;
    if (descriptionMax !== undefined && typeof description === "string" && description.length > descriptionMax) {
      return {
        message: `Invalid 'tools[${i}].function.description': string too long. Expected a string with maximum length ${descriptionMax}, but got a string with length ${description.length} instead.`,
        code: "string_above_max_length",
      };
    }
  }
  return undefined;
}

/** Sleeps unless the client hangs up first; false when it did. */
async function wait(ms: number | undefined, gone: AbortSignal): Promise<boolean> {
  if (ms !== undefined && ms > 0) await sleep(ms, undefined, { signal: gone }).catch(() => undefined);
  return !gone.aborted;
}

async function answer(res: ServerResponse, request: RecordedRequest, reply: AnswerReply, gone: AbortSignal, cachedChars: number) {
  const toolCalls = calls(reply);
  const finish = reply.finish_reason ?? (toolCalls.length > 0 ? "tool_calls" : "stop");
  const usage = usageOf(reply, request, toolCalls, cachedChars);
  const head = { id: newId("chatcmpl-"), created: Math.floor(Date.now() / 1000), model: request.body.model ?? "scripted" };
  if (!(await wait(reply.delayMs, gone))) return;

  if (request.body.stream !== true) {
    if (reply.hang) return void res.writeHead(200, { "content-type": "application/json" }).flushHeaders();
    const message = {
      role: "assistant",
      content: reply.text ?? null,
      refusal: null,
      ...(reply.reasoning_content !== undefined ? { reasoning_content: reply.reasoning_content } : {}),
      ...(reply.reasoning !== undefined ? { reasoning: reply.reasoning } : {}),
      ...(reply.reasoning_details !== undefined ? { reasoning_details: reply.reasoning_details } : {}),
      ...(toolCalls.length > 0
        ? { tool_calls: toolCalls.map((c) => ({ id: c.id, type: "function", function: { name: c.name, arguments: c.arguments } })) }
        : {}),
    };
    const choice = { index: 0, message, logprobs: null, finish_reason: finish };
    return sendJson(res, 200, { ...head, object: "chat.completion", choices: [choice], usage });
  }

  const includeUsage = request.body.stream_options?.include_usage === true;
  const chunk = (choices: unknown[], extra: object = {}) =>
    ({ ...head, object: "chat.completion.chunk", system_fingerprint: null, choices, ...(includeUsage ? { usage: null } : {}), ...extra });
  const delta = (d: object, finishReason: string | null = null) => chunk([{ index: 0, delta: d, logprobs: null, finish_reason: finishReason }]);

  const rest: object[] = [];
  for (const piece of pieces(reply.reasoning_content ?? "", 3)) rest.push(delta({ reasoning_content: piece }));
  for (const piece of pieces(reply.reasoning ?? "", 3)) rest.push(delta({ reasoning: piece }));
  if (reply.reasoning_details !== undefined) rest.push(delta({ reasoning_details: reply.reasoning_details }));
  for (const piece of pieces(reply.text ?? "", reply.chunks ?? 3)) rest.push(delta({ content: piece }));
  toolCalls.forEach((call, place) => {
    const index = call.index ?? place;
    rest.push(delta({ tool_calls: [{ index, id: call.id, type: "function", function: { name: call.name, arguments: "" } }] }));
    for (const piece of pieces(call.arguments, 3)) rest.push(delta({ tool_calls: [{ index, function: { arguments: piece } }] }));
  });
  rest.push(delta({}, finish));
  // The usage object is spliced in as text, so numbers JSON can hold but a check would refuse reach the client.
  const USAGE_MARK = "\u0000usage\u0000";
  if (includeUsage) rest.push(chunk([], { usage: reply.usageJson !== undefined ? USAGE_MARK : usage }));
  const encode = (data: object) => {
    const text = JSON.stringify(data);
    return reply.usageJson !== undefined ? text.replace(JSON.stringify(USAGE_MARK), () => reply.usageJson ?? "null") : text;
  };

  res.writeHead(200, { "content-type": reply.contentType ?? "text/event-stream; charset=utf-8", "cache-control": "no-cache", "x-request-id": newId("req_") });
  const send = (data: string) => res.write(`data: ${data}\n\n`);
  if (reply.events !== undefined) {
    for (const data of reply.events) {
      if (!(await wait(reply.chunkDelayMs, gone))) return;
      send(data);
    }
    return void res.end();
  }
  send(JSON.stringify(delta({ role: "assistant", content: "" })));
  if (reply.hang) return; // The response stays open until the client or close() ends the socket.
  if (reply.stall) {
    for (const data of rest.slice(0, reply.stall.after)) send(encode(data));
    const every = reply.stall.keepaliveMs;
    // Comments only, never data: the stream looks alive and says nothing, until the client hangs up.
    while (every !== undefined && (await wait(every, gone))) res.write(": keepalive\n\n");
    return;
  }
  for (const data of rest) {
    if (!(await wait(reply.chunkDelayMs, gone))) return;
    send(encode(data));
  }
  send("[DONE]");
  res.end();
}

/**
 * Whether a request's JSON holds a string (or a key) with a lone UTF-16 surrogate, as an escape
 * (`\ud800` without the other half): DeepSeek, OpenAI and Anthropic refuse such a body with a 400,
 * as strict JSON parsers do (serde_json: "lone leading surrogate in hex escape").
 */
function holdsLoneSurrogate(value: unknown): boolean {
  const stack: unknown[] = [value];
  while (stack.length > 0) {
    const v = stack.pop();
    if (typeof v === "string") {
      if (!v.isWellFormed()) return true;
    } else if (v !== null && typeof v === "object") {
      for (const [k, item] of Object.entries(v)) {
        if (!k.isWellFormed()) return true;
        stack.push(item);
      }
    }
  }
  return false;
}

async function readBody(req: IncomingMessage): Promise<string> {
  const parts: Buffer[] = [];
  for await (const part of req) parts.push(Buffer.isBuffer(part) ? part : Buffer.from(String(part)));
  return Buffer.concat(parts).toString("utf8");
}

export async function startModelServer(opts: ModelServerOptions = {}): Promise<ModelServer> {
  const queue: ScriptStep[] = [];
  const requests: RecordedRequest[] = [];
  const asked: RecordedRequest[] = [];
  const waiters: { count: number; resolve: (r: RecordedRequest) => void }[] = [];
  const sockets = new Set<Socket>();
  /** When each connection was taken (performance.now()). */
  const taken = new WeakMap<Socket, number>();
  /** When each connection was taken, in order. */
  const takenAt: number[] = [];
  /** The last requests' messages as JSON: what the prompt cache holds. */
  const cache: string[] = [];

  const record = (request: RecordedRequest) => {
    requests.push(request);
    for (const waiter of waiters.filter((w) => w.count <= requests.length)) {
      waiters.splice(waiters.indexOf(waiter), 1);
      waiter.resolve(requests[waiter.count - 1] ?? request);
    }
  };

  async function handle(req: IncomingMessage, res: ServerResponse, gone: AbortSignal): Promise<void> {
    const arrived = performance.now();
    const path = new URL(req.url ?? "/", "http://127.0.0.1").pathname;
    const text = await readBody(req);
    let json: unknown = {};
    try {
      if (text.trim() !== "") json = JSON.parse(text);
    } catch {
      json = undefined;
    }
    const parsed = ChatRequestSchema.safeParse(json);
    let ended!: () => void;
    const request: RecordedRequest = {
      method: req.method ?? "GET",
      path,
      headers: req.headers,
      body: parsed.success ? parsed.data : {},
      time: Date.now(),
      arrived,
      connectedAt: taken.get(req.socket) ?? Number.NaN,
      aborted: false,
      ended: new Promise<void>((resolve) => (ended = resolve)),
    };
    res.on("close", () => {
      request.over = performance.now();
      if (!res.writableFinished) request.aborted = true;
      ended();
    });
    if (RUNTIME_PATHS.has(path)) asked.push(request);
    else record(request);

    const rt = server.runtime;
    const ids = rt.models ?? [opts.model ?? "scripted"];
    if (RUNTIME_PATHS.has(path) && path !== "/v1/models" && rt.until) {
      await Promise.race([rt.until, new Promise((resolve) => gone.addEventListener("abort", resolve, { once: true }))]);
      if (gone.aborted) return;
    }
    if (req.method === "GET" && path === "/v1/models") {
      // vLLM's entries carry max_model_len; an OpenAI-compatible list, only the id.
      const data = ids.map((id) => ({ id, object: "model", created: 0, owned_by: rt.vllm ? "vllm" : "model-server", ...(rt.vllm ? { root: id, parent: null, max_model_len: rt.vllm.maxModelLen } : {}) }));
      return sendJson(res, 200, { object: "list", data });
    }
    if (req.method === "POST" && path === "/api/show") {
      if (!rt.ollama) return sendJson(res, 404, { error: "not found" });
      const arch = rt.ollama.arch ?? "llama";
      return sendJson(res, 200, {
        ...(rt.ollama.numCtx !== undefined ? { parameters: `stop                           "<|im_end|>"\nnum_ctx                        ${rt.ollama.numCtx}\ntemperature                    0.7` } : {}),
        model_info: { "general.architecture": arch, [`${arch}.context_length`]: rt.ollama.contextLength },
        details: { format: "gguf", family: arch, families: [arch], parameter_size: "8B", quantization_level: "Q4_K_M" },
        capabilities: ["completion", "tools"],
      });
    }
    if (req.method === "GET" && path === "/api/ps") {
      if (!rt.ollama) return sendJson(res, 404, { error: "not found" });
      const loaded = rt.ollama.loaded;
      const models = loaded === undefined ? [] : ids.map((id) => ({ name: id, model: id, size: 1, digest: "0", expires_at: "2026-12-01T00:00:00Z", size_vram: 1, context_length: loaded }));
      return sendJson(res, 200, { models });
    }
    if (req.method === "GET" && path === "/props") {
      if (!rt.llamacpp) return sendError(res, { status: 404, message: "File Not Found", type: "not_found_error" });
      return sendJson(res, 200, {
        default_generation_settings: { id: 0, n_ctx: rt.llamacpp.nCtx, speculative: false, is_processing: false, params: { n_predict: -1 } },
        total_slots: 1,
        model_path: "/models/model.gguf",
        chat_template: "",
        modalities: { vision: false, audio: false },
        build_info: "b6000",
      });
    }
    if (req.method === "GET" && path === "/api/v0/models") {
      const lm = rt.lmstudio;
      if (!lm) return sendJson(res, 404, { error: "Unexpected endpoint or method. (GET /api/v0/models)" });
      const data = ids.map((id) => ({
        id,
        object: "model",
        type: "llm",
        publisher: "lmstudio-community",
        arch: "qwen3",
        compatibility_type: "gguf",
        quantization: "Q4_K_M",
        state: lm.loaded !== undefined ? "loaded" : "not-loaded",
        max_context_length: lm.max,
        ...(lm.loaded !== undefined ? { loaded_context_length: lm.loaded } : {}),
      }));
      return sendJson(res, 200, { object: "list", data });
    }
    if (req.method !== "POST" || path !== "/v1/chat/completions") {
      return sendError(res, { status: 404, message: `Unknown request URL: ${req.method} ${path}`, code: "unknown_url" });
    }
    if (!parsed.success || request.body.messages === undefined) {
      const message = parsed.success ? "Missing required parameter: 'messages'." : `Invalid body: ${parsed.error.message}`;
      return sendError(res, { status: 400, message });
    }

    if (holdsLoneSurrogate(json)) return sendError(res, { status: 400, message: "Failed to parse the request body as JSON: lone leading surrogate in hex escape" });
    const refused = toolsRefused(request.body, server.descriptionMax);
    if (refused) return sendError(res, { status: 400, ...refused });

    const sent = JSON.stringify(request.body.messages);
    const cachedChars = cache.reduce((most, earlier) => Math.max(most, sharedStart(earlier, sent)), 0);
    cache.push(sent);
    if (cache.length > CACHED_REQUESTS) cache.shift();
    const step = queue.shift() ?? server.fallback;
    const reply = typeof step === "function" ? await step(request) : step;
    if ("error" in reply) return sendError(res, reply.error, request);
    await answer(res, request, reply, gone, cachedChars);
  }

  const http = createServer((req, res) => {
    const hangUp = new AbortController();
    res.on("close", () => hangUp.abort());
    // A client that hangs up mid-stream is expected (cancel tests), not a failure.
    res.on("error", () => undefined);
    handle(req, res, hangUp.signal).catch((error: unknown) => {
      process.stderr.write(`model-server: ${error instanceof Error ? error.message : String(error)}\n`);
      if (!res.headersSent) sendError(res, { status: 500, message: "model-server failed" });
      else res.destroy();
    });
  });
  http.on("connection", (socket) => {
    const now = performance.now();
    taken.set(socket, now);
    takenAt.push(now);
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
  });
  await new Promise<void>((resolve, reject) => {
    http.once("error", reject);
    http.listen(opts.port ?? 0, "127.0.0.1", () => resolve());
  });
  const { port } = http.address() as AddressInfo;

  const server: ModelServer = {
    url: `http://127.0.0.1:${port}/v1`,
    requests,
    asked,
    connectionsSince: (time) => takenAt.filter((t) => t >= time).length,
    runtime: { ...(opts.ollama ? { ollama: opts.ollama } : {}) },
    descriptionMax: undefined,
    get pending() {
      return queue.length;
    },
    fallback: opts.fallback ?? echoReply,
    script: (...replies) => void queue.push(...replies),
    waitForRequest: (count = requests.length + 1) => {
      const got = requests[count - 1];
      if (got) return Promise.resolve(got);
      return new Promise((resolve) => waiters.push({ count, resolve }));
    },
    close: () =>
      new Promise<void>((resolve) => {
        http.close(() => resolve());
        for (const socket of sockets) socket.destroy();
      }),
  };
  return server;
}

// `node dist/test/model-server.js [--port N] [--echo] [--script FILE]`: prints its URL
// as one line on stdout, plays the script's replies, then echoes the last user message.
async function main(argv: string[]): Promise<void> {
  let port = 0;
  let scriptFile: string | undefined;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === "--port") port = Number(argv[++i]);
    else if (arg === "--script") scriptFile = argv[++i];
    else if (arg !== "--echo") throw new Error(`unknown argument ${String(arg)}`);
  }
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new Error("--port wants a port number");
  const server = await startModelServer({ port });
  if (scriptFile !== undefined) {
    let json: unknown;
    try {
      json = JSON.parse(readFileSync(scriptFile, "utf8"));
    } catch (error) {
      throw new Error(`${scriptFile}: ${error instanceof Error ? error.message : String(error)}`, { cause: error });
    }
    const replies = z.array(ReplySchema).safeParse(json);
    if (!replies.success) throw new Error(`${scriptFile}: not a list of replies: ${z.prettifyError(replies.error)}`);
    server.script(...replies.data);
  }
  process.stdout.write(`${server.url}\n`);
  const stop = () => void server.close().then(() => process.exit(0));
  process.once("SIGINT", stop);
  process.once("SIGTERM", stop);
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main(process.argv.slice(2)).catch((error: unknown) => {
    process.stderr.write(`model-server: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exit(2);
  });
}
