// The model call: any OpenAI-compatible chat-completions endpoint, streamed, accumulated here.
// Unknown delta keys (reasoning_content, reasoning, reasoning_details) are appended, not overwritten.
import { z } from "zod";
import type { Settings, Thinking, ToolCall, Usage } from "../protocol/index.js";
import { encodeBody } from "./body.js";
import { lazyImport } from "./load.js";
import type { ChatMessage } from "./prompt.js";
import type { OfferedCall } from "./tools.js";

const Delta = z
  .object({
    content: z.string().nullish(),
    reasoning_content: z.string().nullish(),
    reasoning: z.string().nullish(),
    reasoning_details: z.array(z.unknown()).nullish(),
    refusal: z.string().nullish(),
    tool_calls: z
      .array(
        z
          .object({
            index: z.number().int().nonnegative(),
            id: z.string().nullish(),
            function: z.object({ name: z.string().nullish(), arguments: z.string().nullish() }).loose().nullish(),
          })
          .loose(),
      )
      .nullish(),
  })
  .loose();

const Chunk = z
  .object({
    id: z.string().nullish(),
    choices: z.array(z.object({ delta: Delta.nullish(), finish_reason: z.string().nullish() }).loose()).nullish(),
    usage: z
      .object({
        prompt_tokens: z.number().nullish(),
        completion_tokens: z.number().nullish(),
        prompt_tokens_details: z.object({ cached_tokens: z.number().nullish() }).loose().nullish(),
        // DeepSeek names its cache hits so.
        prompt_cache_hit_tokens: z.number().nullish(),
        // Only some providers (OpenRouter) report what a request cost.
        cost: z.number().nullish(),
      })
      .loose()
      .nullish(),
  })
  .loose();

export interface ModelRequest {
  settings: Settings;
  model: string;
  messages: ChatMessage[];
  calls: readonly OfferedCall[];
  /** Tell the model to call nothing (the last ask after the rounds). */
  callNothing?: boolean;
  signal?: AbortSignal;
  onText?: (delta: string) => void;
  /** The conversation it is for: the bytes of the messages it shares with its previous request are reused. */
  conversation?: string;
}

export interface ModelAnswer {
  text: string;
  thinking?: Thinking;
  toolCalls: ToolCall[];
  usage?: Usage;
  cost?: number;
  responseId?: string;
  finishReason?: string;
  latencyMs: number;
  /** The time from the request's bytes being handed to the client to the end of its answer (ms, not rounded). */
  waitedMs: number;
  /** The stream was cut by the signal. */
  aborted: boolean;
}

export type ModelFailureReason = "context_too_long" | "model_error" | "network";

export class ModelError extends Error {
  constructor(
    readonly reason: ModelFailureReason,
    message: string,
    readonly status?: number,
  ) {
    super(message);
    this.name = "ModelError";
  }
}

/** The key is never logged; without one (Link's proxy adds it) a placeholder is sent. */
const PLACEHOLDER_KEY = "link-proxy-adds-the-key";
export const MAX_RETRIES = 2;

type OpenAIClass = typeof import("openai").default;
/** A load that failed is tried again by the next turn (turn/load.ts). */
const openaiModule = lazyImport(() => import("openai"), () => import.meta.resolve("openai"));
let OpenAICtor: OpenAIClass | undefined;
const clients = new Map<string, InstanceType<OpenAIClass>>();

async function client(settings: Settings): Promise<InstanceType<OpenAIClass>> {
  // Loaded when a turn first needs it, so the daemon starts fast.
  OpenAICtor ??= (await openaiModule()).default;
  const key = settings.model.key ?? process.env.LNK_MODEL_KEY ?? PLACEHOLDER_KEY;
  const id = `${settings.model.base_url}\0${key}`;
  let c = clients.get(id);
  if (!c) {
    c = new OpenAICtor({ baseURL: settings.model.base_url, apiKey: key, maxRetries: MAX_RETRIES, timeout: 10 * 60_000 });
    clients.set(id, c);
  }
  return c;
}

function isTooLong(status: number | undefined, code: string | null | undefined, message: string): boolean {
  if (code === "context_length_exceeded" || code === "string_above_max_length") return true;
  return (status === 400 || status === 413) && /context|too long|maximum.*tokens|prompt is too long|token limit/i.test(message);
}

/** What an error of the endpoint means for the turn. */
async function classify(e: unknown): Promise<ModelError> {
  const { APIError, APIConnectionError } = await openaiModule();
  if (e instanceof APIConnectionError) return new ModelError("network", `cannot reach the model: ${e.message}`);
  if (e instanceof APIError) {
    const status = typeof e.status === "number" ? e.status : undefined;
    const message = e.message.replace(/\s+/g, " ");
    if (isTooLong(status, e.code, message)) return new ModelError("context_too_long", message, status);
    return new ModelError("model_error", `the model answered ${status ?? "an error"}: ${message}`, status);
  }
  return new ModelError("network", `the model's stream failed: ${(e as Error).message ?? String(e)}`);
}

function toolParams(calls: readonly OfferedCall[]) {
  return calls.map((c) => ({ type: "function" as const, function: { name: c.name, description: c.description, parameters: c.parameters } }));
}

/** What the body's own keys override, left out of the settings' params so each key appears once. */
const OWN_KEYS = new Set(["model", "messages", "stream", "stream_options", "tools", "tool_choice"]);

/** The request's body, as bytes; with `conversation`, what it shares with that conversation's previous request is copied. */
export function requestBody(req: Pick<ModelRequest, "settings" | "model" | "messages" | "calls" | "callNothing" | "conversation">): Uint8Array {
  const params = Object.fromEntries(Object.entries(req.settings.model.params ?? {}).filter(([k]) => !OWN_KEYS.has(k)));
  const tail: Record<string, unknown> = { stream: true, stream_options: { include_usage: true } };
  if (req.calls.length > 0) {
    tail.tools = toolParams(req.calls);
    if (req.callNothing) tail.tool_choice = "none";
  }
  return encodeBody({ ...params, model: req.model }, req.messages, tail, req.conversation);
}

/** Asks the model once, streaming; text deltas go to onText as they arrive. */
export async function askModel(req: ModelRequest): Promise<ModelAnswer> {
  const c = await client(req.settings);
  const body = requestBody(req);
  // From here on it is the model's time: the request on its way, the model thinking, its answer coming.
  const started = performance.now();
  let text = "";
  let reasoningContent: string | undefined;
  let reasoning: string | undefined;
  let reasoningDetails: unknown[] | undefined;
  const calls: { id: string; name: string; arguments: string }[] = [];
  let usage: Usage | undefined;
  let cost: number | undefined;
  let responseId: string | undefined;
  let finishReason: string | undefined;
  try {
    // Sent as encoded: fields the SDK doesn't know (reasoning_content on a message) pass through.
    const stream: AsyncIterable<unknown> = await c.post("/chat/completions", {
      body,
      headers: { "content-type": "application/json" },
      stream: true,
      signal: req.signal ?? null,
    });
    for await (const raw of stream) {
      const chunk = Chunk.safeParse(raw);
      if (!chunk.success) continue;
      const { id, choices, usage: u } = chunk.data;
      if (id) responseId ??= id;
      if (u) {
        const cached = u.prompt_tokens_details?.cached_tokens ?? u.prompt_cache_hit_tokens ?? 0;
        usage = { in: u.prompt_tokens ?? 0, out: u.completion_tokens ?? 0, cached };
        if (typeof u.cost === "number") cost = u.cost;
      }
      for (const choice of choices ?? []) {
        if (choice.finish_reason) finishReason = choice.finish_reason;
        const d = choice.delta;
        if (!d) continue;
        if (d.reasoning_content) reasoningContent = (reasoningContent ?? "") + d.reasoning_content;
        if (d.reasoning) reasoning = (reasoning ?? "") + d.reasoning;
        if (d.reasoning_details) reasoningDetails = [...(reasoningDetails ?? []), ...d.reasoning_details];
        if (d.content) {
          text += d.content;
          req.onText?.(d.content);
        }
        for (const tc of d.tool_calls ?? []) {
          const at = (calls[tc.index] ??= { id: "", name: "", arguments: "" });
          if (tc.id) at.id = tc.id;
          if (tc.function?.name) at.name += tc.function.name;
          if (tc.function?.arguments) at.arguments += tc.function.arguments;
        }
      }
    }
  } catch (e) {
    if (!req.signal?.aborted) throw await classify(e);
  }
  const waited = performance.now() - started;
  const thinking: Thinking = {};
  if (reasoningContent !== undefined) thinking.reasoning_content = reasoningContent;
  if (reasoning !== undefined) thinking.reasoning = reasoning;
  if (reasoningDetails !== undefined) thinking.reasoning_details = reasoningDetails;
  const toolCalls = calls
    .filter((c) => c && c.name)
    .map((c, i) => ({ id: c.id || `call_${responseId ?? "x"}_${i}`, name: c.name, arguments: c.arguments || "{}" }));
  return {
    text,
    ...(Object.keys(thinking).length ? { thinking } : {}),
    toolCalls,
    ...(usage ? { usage } : {}),
    ...(cost !== undefined ? { cost } : {}),
    ...(responseId ? { responseId } : {}),
    ...(finishReason ? { finishReason } : {}),
    latencyMs: Math.round(waited),
    waitedMs: waited,
    aborted: req.signal?.aborted ?? false,
  };
}
