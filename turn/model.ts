// The model call: any OpenAI-compatible chat-completions endpoint, streamed, accumulated here.
// Unknown delta keys (reasoning_content, reasoning, reasoning_details) are appended, not overwritten.
import { setTimeout as sleep } from "node:timers/promises";
import { nestsWithin, THINKING_DEPTH_MAX, TIMEOUT_DEFAULTS, type Settings, type Thinking, type TimeoutsSettings, type ToolCall, type Usage } from "../protocol/index.js";
import { encodeBody, jsonBytes } from "./body.js";
import { readChunk, Refused, type ReportedUsage } from "./chunk.js";
import { lazyImport } from "./load.js";
import type { ChatMessage } from "./prompt.js";
import { envSecrets, RedactedStream, redactor, settingsSecrets, type Redactor } from "./redact.js";
import { wellFormed, wellFormedValue, WellFormedPieces } from "./wellformed.js";
import { connectionFault } from "./faults.js";
import { checkRequest, nodeFetch, readAnswerEvents, sendChecked, TooLarge, type CheckedRequest } from "./http.js";
import { endpointName } from "./runtime.js";
import { keepRecent, recentOr } from "./recent.js";
import { cutDescription, type OfferedCall } from "./tools.js";

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
  /** The agent's environment (its LNK_MODEL_KEY, and the secrets kept out of errors); left out, the process's. */
  env?: NodeJS.ProcessEnv;
}

export interface ModelAnswer {
  text: string;
  thinking?: Thinking;
  toolCalls: ToolCall[];
  usage?: Usage;
  cost?: number;
  /** The provider's numbers left out of `usage` and `cost` as not sane, each `<field> <value as sent>`. */
  leftOut?: string[];
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
/** A request the endpoint refused for now (429, 5xx…) or never reached is asked again this many times. */
export const MAX_RETRIES = 2;

type OpenAIClass = typeof import("openai").default;
/** A load that failed is tried again by the next turn (turn/load.ts). */
const openaiModule = lazyImport(() => import("openai"), () => import.meta.resolve("openai"));
let OpenAICtor: OpenAIClass | undefined;

/** A request of the SDK's, as it handed it to nodeFetch: where it went and with which headers, checked once. */
type Made = CheckedRequest;

/**
 * The SDK's client of an endpoint and key, with the request it made for its last chat completion. A
 * client's requests differ only in their body and, by its header, their timeout: once it has made
 * one, the next of the same timeout is sent as it was, its target and headers as checked then (sendAgain), which
 * spares a turn the SDK's steps before and after its fetch (a quarter of a millisecond a turn in a
 * warm process, more in its first turns); its answer, or its error, is the same.
 */
class ModelClient {
  /** The last chat completion's request, by the timeout it was made for, as its header says it (whole seconds). */
  private readonly made = new Map<string, Made>();
  readonly sdk: InstanceType<OpenAIClass>;

  constructor(ctor: OpenAIClass, baseURL: string, apiKey: string) {
    // No retries of the client's own: its wait before one honours any retry-after and can't be cut short.
    // Over Node's own HTTP client (turn/http.ts) rather than its fetch.
    this.sdk = madeAlone(ctor, { baseURL, apiKey, maxRetries: 0, fetch: (input, init) => this.fetch(input, init) });
  }

  /** The request this client made for a chat completion of this timeout (ms), if it has made one. */
  madeFor(timeout: number): Made | undefined {
    // The SDK's header for it: its whole seconds.
    return this.made.get(String(Math.trunc(timeout / 1000)));
  }

  /** The SDK's fetch: notes a chat completion's request, then sends it. */
  private fetch(input: string | URL | Request, init: RequestInit = {}): Promise<Response> {
    let checked: CheckedRequest;
    try {
      checked = checkRequest(input, init.headers);
    } catch {
      // Refused as fetch refuses it, in nodeFetch's words.
      return nodeFetch(input, init);
    }
    // Only a request that says its timeout is noted: no other is sent again.
    const timeout = checked.headers["x-stainless-timeout"];
    if (init.method === "POST" && timeout !== undefined && checked.url.pathname.endsWith("/chat/completions")) {
      if (this.made.size >= MADE_KEPT && !this.made.has(timeout)) this.made.clear();
      this.made.set(timeout, checked);
    }
    return nodeFetch(input, init);
  }
}

/** The most timeouts a client keeps a request for: agents of one endpoint and key rarely set more than one. */
const MADE_KEPT = 8;

/** The clients made, one an endpoint and key, the one used most lately last. */
const clients = new Map<string, ModelClient>();
/**
 * The most clients kept: past it, the one used least lately is let go (a turn that needs it again
 * makes it again). A key changed again and again (the settings edited, a key rotated, an agent of
 * a process serving many) would otherwise leave a client a key behind, each holding its key.
 */
export const CLIENTS_KEPT = 64;

/** How many clients are kept now (tests). */
export const clientsKept = (): number => clients.size;

/**
 * Loads the model's client ahead of the first turn (a process started blank, waiting for its agent),
 * and makes the one these settings' turns will use, when they are given.
 */
export async function preloadModelClient(settings?: Settings, env?: NodeJS.ProcessEnv): Promise<void> {
  OpenAICtor ??= (await openaiModule()).default;
  if (settings) await client(settings, env);
}

/**
 * The client with nothing of the process's environment in it: the settings alone say what a request
 * carries. Left to itself, it sends OPENAI_ORG_ID and OPENAI_PROJECT_ID as headers, and every header
 * OPENAI_CUSTOM_HEADERS names, to whatever endpoint the settings name (a provider other than OpenAI,
 * Link's proxy, each agent's endpoint in a process serving many), and OPENAI_LOG has it log each
 * request: the body (the conversation) in full, and those headers unredacted. It reads the
 * variables as it is made, and only then: OPENAI_CUSTOM_HEADERS, which no option overrides, is out
 * of the environment for that moment (nothing else runs meanwhile).
 */
function madeAlone(ctor: OpenAIClass, options: ConstructorParameters<OpenAIClass>[0] & object): InstanceType<OpenAIClass> {
  const own = { ...options, organization: null, project: null, webhookSecret: null, logLevel: "off" as const };
  const custom = process.env.OPENAI_CUSTOM_HEADERS;
  if (custom === undefined) return new ctor(own);
  delete process.env.OPENAI_CUSTOM_HEADERS;
  try {
    return new ctor(own);
  } finally {
    process.env.OPENAI_CUSTOM_HEADERS = custom;
  }
}

async function client(settings: Settings, env: NodeJS.ProcessEnv = process.env): Promise<ModelClient> {
  // Loaded when a turn first needs it, so the daemon starts fast.
  OpenAICtor ??= (await openaiModule()).default;
  return clientOf(OpenAICtor, settings, env);
}

/**
 * The client of the settings' endpoint and key, made if none is kept. Once the SDK is loaded, a
 * turn has its client, and its request is made, in the same step as it asks (askModel), with no
 * pass of promises between: Node's HTTP client writes it at its next tick.
 */
function clientOf(ctor: OpenAIClass, settings: Settings, env: NodeJS.ProcessEnv): ModelClient {
  const key = settings.model.key ?? env.LNK_MODEL_KEY ?? PLACEHOLDER_KEY;
  return recentOr(clients, `${settings.model.base_url}\0${key}`, CLIENTS_KEPT, () => new ModelClient(ctor, settings.model.base_url, key));
}

function isTooLong(status: number | undefined, code: string | null | undefined, message: string): boolean {
  if (code === "context_length_exceeded" || code === "string_above_max_length") return true;
  return (status === 400 || status === 413) && /context|too long|maximum.*tokens|prompt is too long|token limit/i.test(message);
}

/** The most of an endpoint's own words a failure quotes (an error's body may be a whole page). */
export const QUOTED_MAX = 2000;

/** Words cut to QUOTED_MAX, once their secrets are out (a cut first could leave half of one). */
function shortened(words: string): string {
  return words.length <= QUOTED_MAX ? words : `${words.slice(0, QUOTED_MAX)}… (${words.length - QUOTED_MAX} more characters)`;
}

/** What went wrong, and whether asking again may help and how long the endpoint asked to wait first. */
interface Classified {
  error: ModelError;
  retry: boolean;
  /** The wait the endpoint asked for (retry-after-ms, retry-after), in ms. */
  asked?: number;
}

/** What an error of the endpoint means for the turn; its words never hold a secret, and name the endpoint. */
async function classify(e: unknown, secrets: Redactor, endpoint: string): Promise<Classified> {
  const { APIError, APIConnectionError, APIConnectionTimeoutError } = await openaiModule();
  if (e instanceof APIConnectionError) {
    const why = e instanceof APIConnectionTimeoutError ? "timed out" : (connectionFault(e.cause) ?? e.message.replace(/\.$/, "").toLowerCase());
    return { error: new ModelError("network", secrets.redact(`cannot reach the model at ${endpoint} (${why})`)), retry: true };
  }
  if (e instanceof APIError) {
    const status = typeof e.status === "number" ? e.status : undefined;
    // The SDK's message starts with the status, which the failure says already.
    const message = shortened(secrets.redact(e.message.replace(/\s+/g, " ").replace(/^\d{3} /, "")));
    if (isTooLong(status, e.code, message)) return { error: new ModelError("context_too_long", message, status), retry: false };
    const error = new ModelError("model_error", `the model answered ${status ?? "an error"}: ${message}`, status);
    const asked = retryAfter(e.headers);
    return { error, retry: status !== undefined && shouldRetry(status, e.headers), ...(asked !== undefined ? { asked } : {}) };
  }
  if (e instanceof TooLarge) return { error: new ModelError("model_error", `the model's stream from ${endpoint} was cut: ${e.message}`), retry: false };
  return { error: new ModelError("network", secrets.redact(`the model's stream from ${endpoint} failed: ${(e as Error).message ?? String(e)}`)), retry: false };
}

/** As the endpoint says (x-should-retry), else the statuses that mean "not now": 408, 409, 429, 5xx. */
function shouldRetry(status: number, headers: Headers | undefined): boolean {
  const said = headers?.get("x-should-retry");
  if (said === "true" || said === "false") return said === "true";
  return status === 408 || status === 409 || status === 429 || status >= 500;
}

/** The wait an endpoint asks for before a retry, in ms: retry-after-ms, else retry-after (seconds or a date). */
function retryAfter(headers: Headers | undefined): number | undefined {
  const ms = Number.parseFloat(headers?.get("retry-after-ms") ?? "");
  if (Number.isFinite(ms) && ms >= 0) return ms;
  const after = headers?.get("retry-after")?.trim();
  if (!after) return undefined;
  const s = Number(after);
  if (Number.isFinite(s)) return s >= 0 ? s * 1000 : undefined;
  const date = Date.parse(after);
  return Number.isFinite(date) ? Math.max(0, date - Date.now()) : undefined;
}

/** Exponential backoff with jitter, as the openai client's own: 0.5 s, 1 s, … at most 8 s. */
function backoff(retry: number): number {
  return Math.min(500 * 2 ** retry, 8_000) * (1 - Math.random() * 0.25);
}

/** Seconds as a person reads them: 3600, 0.5. */
function secondsText(ms: number): string {
  return String(Number((ms / 1000).toFixed(3)));
}

function toolParams(calls: readonly OfferedCall[], describedUpTo: number | undefined) {
  return calls.map((c) => ({
    type: "function" as const,
    function: { name: c.name, description: describedUpTo === undefined ? c.description : cutDescription(c.description, describedUpTo), parameters: c.parameters },
  }));
}

/**
 * The longest description of a call each endpoint takes, as it said when it refused a longer one
 * (OpenAI's API, some of its models and the proxies before it: 1,024 characters), by its base URL:
 * its requests are sent with each call's description cut to it from then on, the same at every
 * turn. An endpoint that never refused one is sent the descriptions whole.
 */
const describedUpTo = new Map<string, number>();
/** The most endpoints whose bound is kept; past it, the one kept least lately is let go (it says its bound again). */
const DESCRIBED_KEPT = 64;
/** An endpoint's refusal of a description, in OpenAI's words, with the bound it takes. */
const DESCRIPTION_REFUSED = /Invalid 'tools\[\d+\]\.function\.description': string too long\. Expected a string with maximum length (\d+)/;

/** The bound on a call's description an error says its endpoint takes, when it is a refusal of one longer. */
function descriptionBound(e: unknown): number | undefined {
  const said = DESCRIPTION_REFUSED.exec(e instanceof Error ? e.message : "")?.[1];
  const bound = Number(said);
  return said !== undefined && Number.isSafeInteger(bound) && bound >= 16 ? bound : undefined;
}

/** What the body's own keys override, left out of the settings' params so each key appears once. */
const OWN_KEYS = new Set(["model", "messages", "stream", "stream_options", "tools", "tool_choice"]);

/** The request's body, as bytes; with `conversation`, what it shares with that conversation's previous request is copied. */
export function requestBody(req: Pick<ModelRequest, "settings" | "model" | "messages" | "calls" | "callNothing" | "conversation">): Uint8Array {
  const params = Object.fromEntries(Object.entries(req.settings.model.params ?? {}).filter(([k]) => !OWN_KEYS.has(k)));
  const tail: Record<string, unknown> = { stream: true, stream_options: { include_usage: true } };
  if (req.calls.length > 0) {
    tail.tools = toolParams(req.calls, describedUpTo.get(req.settings.model.base_url));
    if (req.callNothing) tail.tool_choice = "none";
  }
  try {
    return encodeBody({ ...params, model: req.model }, req.messages, tail, req.conversation);
  } catch (e) {
    // A window too large to be made one string here (some 512 MiB of JSON: a window of a million
    // tokens of images and files) is one no endpoint takes either: said as that, not as a fault.
    if (e instanceof RangeError) throw new ModelError("context_too_long", `the request is too large to make (${e.message}): start a new conversation with /new, or send smaller images and files`);
    throw e;
  }
}

/** A bound of the settings that cut a request short, in the words of the failure it makes. */
class Cut extends Error {
  constructor(
    message: string,
    readonly reason: ModelFailureReason = "network",
  ) {
    super(message);
  }
}

/**
 * The most one answer holds, in bytes of its text, its thinking and its calls together as JSON writes
 * them (UTF-8, and six bytes for a control character it escapes): some million tokens, more than any
 * model writes in one answer, and as much as it adds to each request after it and to its event on
 * disk (store/files.ts LIMITS.event). Counted in characters, an answer of control characters took
 * six times as much. An endpoint that streams past it (a model that never stops, one that floods)
 * has its answer cut there, as a timeout cuts it.
 */
export const MODEL_ANSWER_MAX_BYTES = 4 * 1024 * 1024;
/** The most calls one answer makes: its calls are numbered from 0, and one numbered past this cuts it. */
export const MODEL_ANSWER_MAX_CALLS = 128;

/**
 * The most tokens one answer counts, and the most it costs: far past any provider's (a window of
 * some million tokens, an answer of a few dollars), and low enough that no sum of them a person
 * could make leaves the numbers' range.
 */
export const ANSWER_TOKENS_MAX = 1e9;
export const ANSWER_COST_MAX = 1e6;
/** A count of tokens is a non-negative whole number; a cost a finite non-negative one; each up to its bound. */
const saneCount = (v: unknown): v is number => typeof v === "number" && Number.isSafeInteger(v) && v >= 0 && v <= ANSWER_TOKENS_MAX;
const saneCost = (v: unknown): v is number => typeof v === "number" && Number.isFinite(v) && v >= 0 && v <= ANSWER_COST_MAX;
/** A value as the provider sent it, short. */
const sent = (v: unknown): string => (typeof v === "number" ? String(v) : (JSON.stringify(v) ?? String(v)).slice(0, 40));

/**
 * One answer as it streams in: text, thinking and calls appended, the provider's numbers checked.
 * Its text goes on to onText with its secrets taken out (a key the endpoint echoes), as does all
 * of the answer made of it.
 */
class Streamed {
  text = "";
  reasoningContent: string | undefined;
  reasoning: string | undefined;
  reasoningDetails: unknown[] | undefined;
  readonly calls: { id: string; name: string; arguments: string }[] = [];
  usage: Usage | undefined;
  cost: number | undefined;
  readonly leftOut = new Map<string, string>();
  responseId: string | undefined;
  finishReason: string | undefined;
  /** The endpoint said the answer is whole: [DONE]. */
  ended = false;
  /** Bytes of text, thinking and calls so far (MODEL_ANSWER_MAX_BYTES). */
  size = 0;
  /** A call numbered past MODEL_ANSWER_MAX_CALLS, left out: the answer is cut. */
  private pastCalls: number | undefined;
  /** Thinking details nested past THINKING_DEPTH_MAX: the answer is cut. */
  private tooDeep = false;
  /** Why a chunk with text, thinking or calls was refused: the answer is cut. */
  private refused: string | undefined;

  /** The text handed on to onText, if any: made well-formed, then its secrets taken out. */
  private readonly shown: { pieces: WellFormedPieces; redacted: RedactedStream } | undefined;

  constructor(
    onText: ((delta: string) => void) | undefined,
    private readonly secrets: Redactor,
  ) {
    if (onText) {
      const redacted = new RedactedStream(secrets, onText);
      this.shown = { pieces: new WellFormedPieces((piece) => redacted.push(piece)), redacted };
    }
  }

  add(raw: unknown): void {
    const chunk = readChunk(raw);
    if (!chunk) return;
    if (chunk instanceof Refused) {
      this.refused ??= chunk.why;
      return;
    }
    const { id, choices, usage: u } = chunk;
    if (id) this.responseId ??= id;
    if (u) this.report(u);
    for (const choice of choices ?? []) {
      if (choice.finish_reason) this.finishReason = choice.finish_reason;
      const d = choice.delta;
      if (!d) continue;
      if (d.reasoning_content) {
        this.reasoningContent = (this.reasoningContent ?? "") + d.reasoning_content;
        this.size += jsonBytes(d.reasoning_content);
      }
      if (d.reasoning) {
        this.reasoning = (this.reasoning ?? "") + d.reasoning;
        this.size += jsonBytes(d.reasoning);
      }
      if (d.reasoning_details) {
        // Never written as JSON before its depth is known: too deep, V8 runs out of stack doing it.
        if (!nestsWithin(d.reasoning_details, THINKING_DEPTH_MAX)) {
          this.tooDeep = true;
          continue;
        }
        // Added one by one: copying all kept so far at each chunk made many small chunks cost their square.
        const kept = (this.reasoningDetails ??= []);
        for (const detail of d.reasoning_details) kept.push(detail);
        this.size += Buffer.byteLength(JSON.stringify(d.reasoning_details));
      }
      if (d.content) {
        this.text += d.content;
        this.size += jsonBytes(d.content);
        this.shown?.pieces.push(d.content);
      }
      for (const tc of d.tool_calls ?? []) {
        // Never an array as long as a number the endpoint sent: one of billions would take minutes to walk.
        if (tc.index >= MODEL_ANSWER_MAX_CALLS) {
          this.pastCalls ??= tc.index;
          continue;
        }
        const at = (this.calls[tc.index] ??= { id: "", name: "", arguments: "" });
        if (tc.id) {
          at.id = tc.id;
          this.size += jsonBytes(tc.id);
        }
        if (tc.function?.name) {
          at.name += tc.function.name;
          this.size += jsonBytes(tc.function.name);
        }
        if (tc.function?.arguments) {
          at.arguments += tc.function.arguments;
          this.size += jsonBytes(tc.function.arguments);
        }
      }
    }
  }

  /** Why the answer must be cut here (over a bound of one answer), or undefined. */
  over(): string | undefined {
    if (this.refused !== undefined) return this.refused;
    if (this.pastCalls !== undefined) return `the model's answer made a call numbered ${this.pastCalls}, where one answer makes at most ${MODEL_ANSWER_MAX_CALLS}`;
    if (this.tooDeep) return `the model's reasoning_details nest deeper than ${THINKING_DEPTH_MAX} arrays and objects, which no provider's do`;
    if (this.size > MODEL_ANSWER_MAX_BYTES) return `the model's answer ran past ${MODEL_ANSWER_MAX_BYTES} bytes as JSON, the most one answer holds`;
    return undefined;
  }

  /** The provider's counts, each kept only when sane: an odd one counts as 0 (as a missing one does) and is named. */
  private report(u: ReportedUsage): void {
    const count = (field: string, v: unknown): number => {
      this.leftOut.delete(field);
      if (v === undefined || v === null) return 0;
      if (saneCount(v)) return v;
      this.leftOut.set(field, `${field} ${sent(v)}`);
      return 0;
    };
    const cachedField = u.prompt_tokens_details?.cached_tokens != null ? "cached_tokens" : "prompt_cache_hit_tokens";
    this.usage = {
      in: count("prompt_tokens", u.prompt_tokens),
      out: count("completion_tokens", u.completion_tokens),
      cached: count(cachedField, u.prompt_tokens_details?.cached_tokens ?? u.prompt_cache_hit_tokens),
    };
    if (u.cost === undefined || u.cost === null) return;
    this.leftOut.delete("cost");
    if (saneCost(u.cost)) this.cost = u.cost;
    else this.leftOut.set("cost", `cost ${sent(u.cost)}`);
  }

  /**
   * The answer, with no secret in anything the endpoint said (its text, thinking and calls, its id,
   * the counts left out), its id bounded, and no lone surrogate in it (a JSON string may hold one: kept
   * in an event, a reader that decodes strictly would refuse it); what is held of its text is handed on.
   */
  answer(waited: number, aborted: boolean): ModelAnswer {
    const secrets = this.secrets;
    // As the text was shown: made well-formed, then its secrets taken out.
    const clean = { redact: (text: string) => secrets.redact(wellFormed(text)), redactValue: <T>(value: T): T => secrets.redactValue(wellFormedValue(value)) };
    this.shown?.pieces.flush();
    this.shown?.redacted.flush();
    const responseId = this.responseId ? clean.redact(this.responseId).slice(0, RESPONSE_ID_MAX) : undefined;
    const thinking: Thinking = {};
    if (this.reasoningContent !== undefined) thinking.reasoning_content = clean.redact(this.reasoningContent);
    if (this.reasoning !== undefined) thinking.reasoning = clean.redact(this.reasoning);
    if (this.reasoningDetails !== undefined) thinking.reasoning_details = clean.redactValue(this.reasoningDetails);
    // Each call's answer is matched to it by its id: one the endpoint sent twice, or none, is given one of its own.
    const ids = new Set<string>();
    const toolCalls = this.calls
      .filter((c) => c && c.name)
      .map((c, i) => {
        let id = clean.redact(c.id);
        for (let k = 0; !id || ids.has(id); k++) id = `call_${responseId ?? "x"}_${i}${k ? `_${k}` : ""}`;
        ids.add(id);
        return { id, name: clean.redact(c.name), arguments: clean.redact(c.arguments) || "{}" };
      });
    return {
      text: clean.redact(this.text),
      ...(Object.keys(thinking).length ? { thinking } : {}),
      toolCalls,
      ...(this.usage ? { usage: this.usage } : {}),
      ...(this.cost !== undefined ? { cost: this.cost } : {}),
      ...(this.leftOut.size ? { leftOut: [...this.leftOut.values()].map((l) => clean.redact(l)) } : {}),
      ...(responseId ? { responseId } : {}),
      ...(this.finishReason ? { finishReason: this.finishReason } : {}),
      latencyMs: Math.round(waited),
      waitedMs: waited,
      aborted,
    };
  }
}

/** The most of the endpoint's own id for its answer that is kept. */
const RESPONSE_ID_MAX = 256;

/** Each frozen settings' redactor, with the frozen environment it was made with. */
const redactors = new WeakMap<Settings, { env: NodeJS.ProcessEnv; secrets: Redactor }>();

/**
 * What a request's answer is kept clean of: the secrets of its settings and its environment. Made
 * once while both are the objects they were, each frozen (settings as read: store/settings.ts; a
 * daemon's environment), so nothing of them can have changed: finding them again for each request
 * cost it 0.025 ms.
 */
function secretsOf(settings: Settings, env: NodeJS.ProcessEnv): Redactor {
  const kept = redactors.get(settings);
  if (kept?.env === env) return kept.secrets;
  const secrets = redactor(settingsSecrets(settings), envSecrets(env));
  if (Object.isFrozen(settings) && Object.isFrozen(env)) redactors.set(settings, { env, secrets });
  return secrets;
}

/**
 * Asks the model, streaming; text deltas go to onText as they arrive. A request the endpoint refuses
 * for now is asked again, after the wait it asks for when that is within `timeouts.retry_wait`; every
 * wait and every request ends at once when the signal aborts.
 */
export async function askModel(req: ModelRequest): Promise<ModelAnswer> {
  const env = req.env ?? process.env;
  const c = OpenAICtor ? clientOf(OpenAICtor, req.settings, env) : await client(req.settings, env);
  let body = requestBody(req);
  const limits = { ...TIMEOUT_DEFAULTS, ...req.settings.timeouts };
  // What its answer is kept clean of, the text it streams too.
  const secrets = secretsOf(req.settings, env);
  // From here on it is the model's time: the request on its way, the model thinking, its answer coming.
  const started = performance.now();
  let described = false;
  for (let retry = 0; ; retry++) {
    const into = new Streamed(req.onText, secrets);
    let failed: unknown;
    try {
      await streamOnce(c, body, req, limits, into);
    } catch (e) {
      failed = e;
    }
    if (failed === undefined || req.signal?.aborted) return into.answer(performance.now() - started, req.signal?.aborted ?? false);
    if (failed instanceof Cut) throw new ModelError(failed.reason, `the model's stream was cut: ${failed.message}`);
    // Its words are the endpoint's in part (a content type): kept clean all the same.
    if (failed instanceof NotAStream) throw new ModelError("model_error", secrets.redact(failed.message));
    // Once the client was sent text, the answer is not asked again: it would be sent twice.
    const streamed = into.text.length > 0;
    // A description longer than the endpoint takes: asked again at once, once, with each cut to its
    // bound, which its requests keep from now on (a second refusal is the failure it says).
    const bound = req.calls.length > 0 && !streamed && !described ? descriptionBound(failed) : undefined;
    const base = req.settings.model.base_url;
    if (bound !== undefined && bound < (describedUpTo.get(base) ?? Number.POSITIVE_INFINITY) && req.calls.some((call) => call.description.length > bound)) {
      described = true;
      keepRecent(describedUpTo, base, bound, DESCRIBED_KEPT);
      body = requestBody(req);
      continue;
    }
    const { error, retry: again, asked } = await classify(failed, secrets, endpointName(req.settings.model.base_url));
    if (!again || streamed || retry >= MAX_RETRIES) throw error;
    const cap = limits.retry_wait * 1000;
    if (asked !== undefined && asked > cap) {
      throw new ModelError(
        error.reason,
        `${error.message} (it asked to wait ${secondsText(asked)} s before trying again, longer than the ${secondsText(cap)} s a retry waits at most (timeouts.retry_wait))`,
        error.status,
      );
    }
    try {
      await sleep(Math.min(asked ?? backoff(retry), cap), undefined, req.signal ? { signal: req.signal } : {});
    } catch {
      // Cancelled while waiting: nothing was answered.
      return into.answer(performance.now() - started, true);
    }
  }
}

/**
 * One request and its stream, into `into`. Throws the client's error, or a Cut when a bound of the
 * settings ended it. Its own signal follows the turn's and is dropped after, so no listener is left
 * on the turn's signal by the client, whatever it adds.
 */
async function streamOnce(
  c: ModelClient,
  body: Uint8Array,
  req: ModelRequest,
  limits: Required<TimeoutsSettings>,
  into: Streamed,
): Promise<void> {
  const own = new AbortController();
  const follow = (): void => own.abort(req.signal?.reason);
  if (req.signal?.aborted) follow();
  else req.signal?.addEventListener("abort", follow, { once: true });
  const idleMs = limits.model_idle * 1000;
  const idle = setTimeout(() => own.abort(new Cut(`the model sent nothing for ${secondsText(idleMs)} s (timeouts.model_idle)`)), idleMs);
  const totalMs = limits.model * 1000;
  const total = setTimeout(() => own.abort(new Cut(`the model's answer took longer than ${secondsText(totalMs)} s (timeouts.model)`)), totalMs);
  try {
    // Sent as encoded: fields the SDK doesn't know (reasoning_content on a message) pass through. The
    // SDK asks (or the request it made before is sent again) and says what a refusal means; its
    // answer's events are read here (turn/http.ts).
    // The settings' bounds end it first.
    const timeout = Math.ceil(totalMs) + 1_000;
    const made = c.madeFor(timeout);
    const response: Response = made
      ? await sendAgain(made, body, own.signal)
      : await c.sdk
          .post("/chat/completions", { body, headers: { "content-type": "application/json" }, stream: true, signal: own.signal, maxRetries: 0, timeout })
          .asResponse();
    const { APIError } = await openaiModule();
    // An answer that is no stream of events (a page of HTML, a whole JSON answer) is none of this turn's.
    const type = response.headers.get("content-type");
    if (type !== null && !/^\s*text\/event-stream\b/i.test(type)) {
      // Its connection closed, the body unread.
      own.abort();
      throw new NotAStream(`the model answered ${response.status} with ${mediaType(type)}, not a stream of events`);
    }
    let done = false;
    await readAnswerEvents(response, ({ type, data }) => {
      // As the SDK reads a stream: nothing after [DONE]; an event that says an error is thrown as one.
      if (done) return true;
      if (data.startsWith("[DONE]")) {
        done = true;
        into.ended = true;
        return true;
      }
      // Only data counts as progress: a comment (`: keepalive`) is no event.
      idle.refresh();
      const raw = eventJson(data);
      if (type?.startsWith("thread.")) return false;
      const error = raw !== null && typeof raw === "object" ? (raw as { error?: unknown }).error : undefined;
      if (error) throw new APIError(undefined, error as object, undefined, response.headers);
      // Cut: what was read ahead of the abort is not taken; the stream ends as the abort reaches it.
      if (own.signal.aborted) return false;
      into.add(raw);
      const over = into.over();
      if (over !== undefined) own.abort(new Cut(over, "model_error"));
      return false;
    });
  } catch (e) {
    if (!(own.signal.reason instanceof Cut)) throw e;
  } finally {
    clearTimeout(idle);
    clearTimeout(total);
    req.signal?.removeEventListener("abort", follow);
  }
  // An abort ends the stream without a throw: say which bound it was.
  if (own.signal.reason instanceof Cut && !req.signal?.aborted) throw own.signal.reason;
  // A body that ended with neither [DONE] nor a finish_reason ended before the answer did.
  if (!req.signal?.aborted && !into.ended && into.finishReason === undefined) throw new Cut("it ended before the answer did (no [DONE], no finish_reason)");
}

/** An answer that is not a stream of events, or one of whose events is not JSON: refused, never asked again. */
class NotAStream extends Error {}

/** The longest content type a failure names: RFC 6838 gives a type and its subtype 127 characters each. */
const MEDIA_TYPE_MAX = 255;

/**
 * An answer's content type, as a failure names it: only a type/subtype of a media type's characters,
 * without its parameters; anything else (a header that echoes what the request carried) is not repeated.
 */
function mediaType(header: string): string {
  const type = header.split(";")[0]?.trim() ?? "";
  if (type === "") return "a body";
  return type.length <= MEDIA_TYPE_MAX && /^[\w.+-]+\/[\w.+-]+$/.test(type) ? type : "an unexpected content type";
}

/**
 * An event's data as JSON. A failure says where it is not JSON, never what it holds: V8's words
 * quote the text around the fault, which may be a part of what the endpoint echoed (a key).
 */
function eventJson(data: string): unknown {
  try {
    return JSON.parse(data);
  } catch (e) {
    const at = /at position (\d+)/.exec(e instanceof Error ? e.message : "")?.[1];
    throw new NotAStream(`the model sent an event that is not JSON${at === undefined ? "" : ` (at position ${at})`}`);
  }
}

/**
 * A chat completion sent as the client's SDK made its last one, with another body: its answer, or
 * the SDK's error for what went wrong, as its own request (of no retries) would give (openai's
 * makeRequest): a refusal read whole and made the error its status names, a request that never
 * reached the endpoint a connection error (timed out, when its words say so), an aborted one the
 * SDK's abort.
 */
async function sendAgain(made: Made, body: Uint8Array, signal: AbortSignal): Promise<Response> {
  // Made in the step it is asked in; the SDK's errors are loaded only for a request that fails.
  if (signal.aborted) throw new (await openaiModule()).APIUserAbortError();
  let response: Response;
  try {
    // Bytes, as the SDK hands them on (fetch's types name no Uint8Array of any buffer).
    response = await sendChecked(made, { method: "POST", body, signal });
  } catch (e) {
    const { APIConnectionError, APIConnectionTimeoutError, APIUserAbortError } = await openaiModule();
    if (signal.aborted) throw new APIUserAbortError();
    const cause = (e as { cause?: unknown }).cause;
    if (/timed? ?out/i.test(`${String(e)}${cause === undefined ? "" : String(cause)}`)) throw new APIConnectionTimeoutError();
    throw new APIConnectionError({ cause: e as Error });
  }
  if (response.ok) return response;
  const { APIError } = await openaiModule();
  const text = await response.text().catch((e: unknown) => (e instanceof Error ? e.message : String(e)));
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  // As the SDK's makeStatusError makes it.
  throw APIError.generate(response.status, json as object | undefined, json ? undefined : text, response.headers);
}
