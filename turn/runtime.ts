// What a runtime on the machine says it runs a model with (Ollama, llama.cpp's server, vLLM, LM
// Studio), and the models an endpoint lists. Each answer is kept for a bounded time, a failure for a
// short one, keyed by everything the answer depends on; a runtime that doesn't answer in time is
// skipped for that turn. Spec: "Where does a model's window come from?" (decisions.txt).
import { createHash } from "node:crypto";
import { isIP } from "node:net";
import { z } from "zod";
import type { Settings } from "../protocol/index.js";
import { connectionFault } from "./faults.js";
import { askText, TooLarge, type TextAnswer } from "./http.js";
import { keepRecent, recentOr } from "./recent.js";

/** Ollama's context when nothing sets num_ctx on a small machine (NOTES.md). */
export const OLLAMA_DEFAULT_CONTEXT = 4_096;
/** LM Studio's context when it loads a model on its own (a request naming a model not loaded). */
export const LM_STUDIO_DEFAULT_CONTEXT = 4_096;
/** How long an answer is kept before it is asked again (in the background: the turn uses the one kept). */
export const ANSWER_KEPT_MS = 5 * 60_000;
/** How long a failure (nothing reached, or too slow) is kept before a turn asks again. */
export const FAILURE_KEPT_MS = 10_000;
/** The most answers kept (each of an endpoint, a model, a key); past it, the one asked least lately goes. */
const ANSWERS_KEPT = 256;
/** How long a turn waits for a runtime before it goes on without it. */
export const ASK_TIMEOUT_MS = 1_500;
/** The most of an answer read: a list of models is a few KiB, a Modelfile's parameters less. */
const ANSWER_MAX = 1024 * 1024;

export const RUNTIMES = ["ollama", "llama.cpp", "vllm", "lmstudio"] as const;
export type Runtime = (typeof RUNTIMES)[number];

/** What a runtime said: the window it runs the model with, where it said so, and how it was found. */
export interface RuntimeAnswer {
  runtime: Runtime;
  window: number;
  /** The endpoint that answered (no credentials, no query). */
  at: string;
  /** How the window was found, in a few words. */
  how: string;
}

/** The clock and environment a lookup uses: the process's, unless a test gives its own. */
export interface AskOptions {
  env?: NodeJS.ProcessEnv;
  now?: () => number;
  /** The longest wait for an answer (ms). */
  timeoutMs?: number;
}

/** An endpoint named without its credentials or query, as an error or a report may name it. */
export function endpointName(url: string): string {
  try {
    const u = new URL(url);
    u.username = "";
    u.password = "";
    u.search = "";
    u.hash = "";
    return u.href.replace(/\/$/, "");
  } catch {
    return "the model's endpoint";
  }
}

/** The server's root: the base URL without its /v1, where a runtime's own API is. */
function rootOf(base: string): string {
  return base.replace(/\/+$/, "").replace(/\/v1$/, "");
}

const RUNTIME_PROVIDERS = /^(ollama|llama[.-]?cpp|llama-server|vllm|lm[-\s]?studio)$/i;

/**
 * Whether runtimes are asked at all: the endpoint is on this machine or its network (loopback, a
 * private or link-local address, localhost, a .local name), or the provider names a runtime. A hosted
 * provider is never asked what only a local runtime answers.
 */
export function mayBeRuntime(settings: Settings): boolean {
  const { provider, base_url: baseUrl } = settings.model;
  return recentOr(runtimeLike, `${provider}\n${baseUrl}`, SEEN_KEPT, () => endpointMayBeRuntime(provider, baseUrl));
}

/** Whether each endpoint seen lately (its provider and base URL) may be a runtime: a URL parsed at each turn cost it some microseconds. */
const runtimeLike = new Map<string, boolean>();
/** How many endpoints, and keys (hash), are kept as seen lately. */
const SEEN_KEPT = 64;

function endpointMayBeRuntime(provider: string, baseUrl: string): boolean {
  if (RUNTIME_PROVIDERS.test(provider.trim())) return true;
  let host: string;
  try {
    host = new URL(baseUrl).hostname.toLowerCase().replace(/^\[|\]$/g, "");
  } catch {
    return false;
  }
  if (host === "localhost" || host.endsWith(".localhost") || host.endsWith(".local")) return true;
  if (isIP(host) === 4) {
    const [a = 0, b = 0] = host.split(".").map(Number);
    return a === 127 || a === 10 || (a === 172 && b >= 16 && b <= 31) || (a === 192 && b === 168) || (a === 169 && b === 254);
  }
  if (isIP(host) === 6) return host === "::1" || /^f[cd]/.test(host) || /^fe[89ab]/.test(host) || host.startsWith("::ffff:127.");
  return false;
}

/** The key a request to the endpoint carries: the settings', else the environment's, else none (Link's proxy adds it). */
function authorization(settings: Settings, env: NodeJS.ProcessEnv): Record<string, string> {
  const key = settings.model.key ?? env.LNK_MODEL_KEY;
  return key ? { authorization: `Bearer ${key}` } : {};
}

/** A runtime's answer that isn't there (404, not JSON, too large): this is not that runtime, or it doesn't know the model. */
class NotThis extends Error {}

/** GETs (or POSTs) JSON from a runtime; throws NotThis for an answer that isn't one, anything else for no answer at all. */
async function askJson(url: string, init: { method?: string; body?: unknown; headers: Record<string, string>; signal: AbortSignal }): Promise<unknown> {
  let res: TextAnswer;
  try {
    res = await askText(url, {
      method: init.method ?? "GET",
      headers: { accept: "application/json", ...init.headers, ...(init.body !== undefined ? { "content-type": "application/json" } : {}) },
      ...(init.body !== undefined ? { body: JSON.stringify(init.body) } : {}),
      signal: init.signal,
      max: ANSWER_MAX,
    });
  } catch (e) {
    if (e instanceof TooLarge) throw new NotThis("too large");
    throw e;
  }
  // A redirect is not followed: no answer here.
  if (REDIRECTS.has(res.status) && res.headers.location !== undefined) throw new Error(`redirected (${res.status})`);
  if (res.status < 200 || res.status > 299) throw new NotThis(`${res.status}`);
  try {
    const value: unknown = JSON.parse(res.text);
    return value;
  } catch {
    throw new NotThis("not JSON");
  }
}

/** The statuses fetch would follow to another address. */
const REDIRECTS = new Set([301, 302, 303, 307, 308]);

const positive = z.number().int().positive().max(1e9);
const OllamaShow = z.object({ model_info: z.record(z.string(), z.unknown()).optional(), parameters: z.string().optional() }).loose();
const OllamaPs = z.object({ models: z.array(z.object({ name: z.string().optional(), model: z.string().optional(), context_length: z.unknown().optional() }).loose()) }).loose();
const LlamaProps = z.object({ default_generation_settings: z.object({ n_ctx: z.unknown().optional() }).loose().optional(), n_ctx: z.unknown().optional() }).loose();
const ModelList = z.object({ data: z.array(z.object({ id: z.string() }).loose()) }).loose();
const VllmModel = z.object({ id: z.string(), root: z.string().nullish(), max_model_len: positive }).loose();
const LmStudioModel = z.object({ id: z.string(), state: z.string().optional(), loaded_context_length: positive.optional(), max_context_length: positive.optional() }).loose();

interface Asking {
  settings: Settings;
  model: string;
  root: string;
  base: string;
  headers: Record<string, string>;
  env: NodeJS.ProcessEnv;
  signal: AbortSignal;
}

const count = (v: unknown): number | undefined => positive.safeParse(v).data;
const sameModel = (a: string | undefined | null, model: string) => a !== undefined && a !== null && a.toLowerCase() === model.toLowerCase();

/**
 * Ollama: the context a loaded model runs with (/api/ps), else its Modelfile's num_ctx (/api/show's
 * parameters), else the trained window counted only up to the context Ollama loads it with unless told
 * (its default, or OLLAMA_CONTEXT_LENGTH), unless the settings' window.trained says otherwise.
 */
async function askOllama(a: Asking): Promise<RuntimeAnswer | undefined> {
  const at = endpointName(`${a.root}/api/show`);
  const show = OllamaShow.safeParse(await askJson(`${a.root}/api/show`, { method: "POST", body: { model: a.model }, headers: a.headers, signal: a.signal }));
  if (!show.success || show.data.model_info === undefined) return undefined;
  try {
    const ps = OllamaPs.safeParse(await askJson(`${a.root}/api/ps`, { headers: a.headers, signal: a.signal }));
    const loaded = ps.data?.models.find((m) => sameModel(m.name, a.model) || sameModel(m.model, a.model));
    const runs = count(loaded?.context_length);
    if (runs !== undefined) return { runtime: "ollama", window: runs, at: endpointName(`${a.root}/api/ps`), how: "the context the loaded model runs with" };
  } catch {
    // An Ollama too old for /api/ps, or slow to answer it: /api/show's answer stands.
  }
  const numCtx = count(Number(/^\s*num_ctx\s+(\d+)\s*$/m.exec(show.data.parameters ?? "")?.[1]));
  if (numCtx !== undefined) return { runtime: "ollama", window: numCtx, at, how: "num_ctx of its Modelfile" };
  let trained: number | undefined;
  for (const [k, v] of Object.entries(show.data.model_info)) if (k.endsWith(".context_length")) trained = count(v) ?? trained;
  if (trained !== undefined && a.settings.window?.trained) return { runtime: "ollama", window: trained, at, how: "the trained window (window.trained)" };
  const set = count(Number(a.env.OLLAMA_CONTEXT_LENGTH));
  const runsWith = set ?? OLLAMA_DEFAULT_CONTEXT;
  const how = set !== undefined ? "OLLAMA_CONTEXT_LENGTH" : `Ollama's default context of ${OLLAMA_DEFAULT_CONTEXT}`;
  if (trained !== undefined && trained < runsWith) return { runtime: "ollama", window: trained, at, how: "the trained window" };
  return { runtime: "ollama", window: runsWith, at, how: trained !== undefined ? `${how}, under the trained ${trained}` : how };
}

/** llama.cpp's server: /props says the context of each slot it runs (n_ctx), whatever the model is called. */
async function askLlamaCpp(a: Asking): Promise<RuntimeAnswer | undefined> {
  const props = LlamaProps.safeParse(await askJson(`${a.root}/props`, { headers: a.headers, signal: a.signal }));
  const n = count(props.data?.default_generation_settings?.n_ctx) ?? count(props.data?.n_ctx);
  return n === undefined ? undefined : { runtime: "llama.cpp", window: n, at: endpointName(`${a.root}/props`), how: "n_ctx of /props" };
}

/** vLLM: its list of models says each one's max_model_len. */
async function askVllm(a: Asking): Promise<RuntimeAnswer | undefined> {
  const list = ModelList.safeParse(await modelsDocument(a.settings, a.env, a.signal));
  for (const entry of list.data?.data ?? []) {
    const m = VllmModel.safeParse(entry);
    if (m.success && (sameModel(m.data.id, a.model) || sameModel(m.data.root, a.model))) {
      return { runtime: "vllm", window: m.data.max_model_len, at: endpointName(`${a.base}/models`), how: "max_model_len of its models" };
    }
  }
  return undefined;
}

/** LM Studio: /api/v0/models says a loaded model's loaded_context_length; one not loaded gets its default. */
async function askLmStudio(a: Asking): Promise<RuntimeAnswer | undefined> {
  const list = ModelList.safeParse(await askJson(`${a.root}/api/v0/models`, { headers: a.headers, signal: a.signal }));
  const at = endpointName(`${a.root}/api/v0/models`);
  for (const entry of list.data?.data ?? []) {
    const m = LmStudioModel.safeParse(entry);
    if (!m.success || !sameModel(m.data.id, a.model)) continue;
    if (m.data.loaded_context_length !== undefined) return { runtime: "lmstudio", window: m.data.loaded_context_length, at, how: "loaded_context_length of the loaded model" };
    const trained = m.data.max_context_length;
    if (trained !== undefined && a.settings.window?.trained) return { runtime: "lmstudio", window: trained, at, how: "max_context_length (window.trained)" };
    const window = Math.min(trained ?? LM_STUDIO_DEFAULT_CONTEXT, LM_STUDIO_DEFAULT_CONTEXT);
    return { runtime: "lmstudio", window, at, how: `not loaded: LM Studio's default context of ${LM_STUDIO_DEFAULT_CONTEXT}` };
  }
  return undefined;
}

/** Each runtime, in the order its answer is taken should two answer (one server speaks one). */
const ASKS: readonly ((a: Asking) => Promise<RuntimeAnswer | undefined>)[] = [askOllama, askLlamaCpp, askVllm, askLmStudio];

/** A value kept, until when, whether asking failed, and an ask under way to replace it. */
interface Kept<T> {
  value: T;
  until: number;
  failed: boolean;
  asking?: Promise<T> | undefined;
}

/** What asking found: a value, and whether something failed to answer (then it is kept only briefly). */
interface Found<T> {
  value: T;
  failed: boolean;
}

/**
 * A cache of answers: a fresh one is used as it is; a stale answer is used while it is asked again
 * in the background (never on a turn's path once known); a stale failure, or none, is asked for now,
 * one ask shared by every turn that needs it.
 */
class Answers<T> {
  private readonly kept = new Map<string, Kept<T>>();

  get(key: string, ask: () => Promise<Found<T>>, clock: () => number): Promise<T> {
    const entry = this.kept.get(key);
    if (entry && clock() < entry.until) return Promise.resolve(entry.value);
    if (entry?.asking) return entry.failed ? entry.asking : Promise.resolve(entry.value);
    const asking = ask().then((found) => {
      this.set(key, { value: found.value, until: clock() + (found.failed ? FAILURE_KEPT_MS : ANSWER_KEPT_MS), failed: found.failed });
      return found.value;
    });
    if (entry && !entry.failed) {
      // A stale answer: used now, asked again once, in the background.
      entry.asking = asking;
      asking.catch(() => (entry.asking = undefined));
      return Promise.resolve(entry.value);
    }
    const pending: Kept<T> = { value: undefined as T, until: 0, failed: true, asking };
    this.kept.set(key, pending);
    asking.catch(() => this.kept.get(key) === pending && this.kept.delete(key));
    return asking;
  }

  /** The answer kept for `key`, fresh or stale, without asking; undefined when none is kept. */
  known(key: string): T | undefined {
    const entry = this.kept.get(key);
    return entry && !entry.failed ? entry.value : undefined;
  }

  private set(key: string, entry: Kept<T>): void {
    keepRecent(this.kept, key, entry, ANSWERS_KEPT);
  }

  /** Waits for the asks under way (tests: a stale answer's refresh). */
  async settled(): Promise<void> {
    await Promise.all([...this.kept.values()].map((e) => e.asking?.catch(() => undefined)));
  }

  clear(): void {
    this.kept.clear();
  }
}

/** What a lookup of the runtime found: its answer, or why there is none. */
export interface RuntimeFound {
  answer?: RuntimeAnswer;
  /** Why no runtime's answer: not asked (a hosted endpoint), none answered, none in time. */
  none?: string;
}

const runtimeAnswers = new Answers<RuntimeFound>();
const modelLists = new Answers<string[] | undefined>();

/** The digests of the keys seen lately: each turn's answer is looked up under its key's, and a hash made in Node costs a turn some microseconds. */
const hashes = new Map<string, string>();

function hash(text: string): string {
  return recentOr(hashes, text, SEEN_KEPT, () => createHash("sha256").update(text).digest("hex").slice(0, 16));
}

/** The key an answer is kept under: everything it depends on. */
function keyOf(settings: Settings, model: string, env: NodeJS.ProcessEnv): string {
  return JSON.stringify([settings.model.base_url, model, settings.window?.trained ?? false, env.OLLAMA_CONTEXT_LENGTH ?? "", hash(settings.model.key ?? env.LNK_MODEL_KEY ?? "")]);
}

/** The endpoint's base URL, without the slashes it may end with. */
const baseOf = (settings: Settings): string => settings.model.base_url.replace(/\/+$/, "");

/** What a runtime on the machine says it runs `model` with, asked at most once per model in the time kept. */
export async function runtimeWindow(settings: Settings, model: string, o: AskOptions = {}): Promise<RuntimeFound> {
  const env = o.env ?? process.env;
  const clock = o.now ?? Date.now;
  if (!mayBeRuntime(settings)) return { none: "not asked: the endpoint is not on this machine or its network" };
  const base = baseOf(settings);
  return runtimeAnswers.get(
    keyOf(settings, model, env),
    async () => {
      const signal = AbortSignal.timeout(o.timeoutMs ?? ASK_TIMEOUT_MS);
      const asking: Asking = { settings, model, root: rootOf(base), base, headers: authorization(settings, env), env, signal };
      const results = await Promise.allSettled(ASKS.map((ask) => ask(asking)));
      for (const r of results) if (r.status === "fulfilled" && r.value) return { value: { answer: r.value }, failed: false };
      const failure = results.find((r): r is PromiseRejectedResult => r.status === "rejected" && !(r.reason instanceof NotThis));
      const why = (e: unknown) => (signal.aborted ? `none answered within ${(o.timeoutMs ?? ASK_TIMEOUT_MS) / 1000} s` : (connectionFault(e) ?? "no answer"));
      const none = failure ? `no runtime answered at ${endpointName(base)} (${why(failure.reason)})` : `no runtime at ${endpointName(base)} knows ${model}`;
      const failed = failure !== undefined;
      return { value: { none }, failed };
    },
    clock,
  );
}

const listKey = (settings: Settings, env: NodeJS.ProcessEnv) => JSON.stringify([baseOf(settings), hash(settings.model.key ?? env.LNK_MODEL_KEY ?? "")]);

/** The answers of GET {base_url}/models under way or just given: what vLLM's ask and the list of models share. */
const modelDocuments = new Map<string, Promise<unknown>>();
/** How long an answer of /models is shared after it came: the asks of one session's opening. */
const DOCUMENT_SHARED_MS = 10_000;

/** GET {base_url}/models, asked once for every ask that needs it at about the same time. */
function modelsDocument(settings: Settings, env: NodeJS.ProcessEnv, signal: AbortSignal): Promise<unknown> {
  const key = listKey(settings, env);
  const kept = modelDocuments.get(key);
  if (kept) return kept;
  const asking = askJson(`${baseOf(settings)}/models`, { headers: authorization(settings, env), signal });
  modelDocuments.set(key, asking);
  const forget = () => modelDocuments.get(key) === asking && modelDocuments.delete(key);
  asking.then(() => setTimeout(forget, DOCUMENT_SHARED_MS).unref(), forget);
  return asking;
}

/** The models the endpoint lists as far as this process knows now, without asking; undefined when not yet known. */
export function knownModels(settings: Settings, env: NodeJS.ProcessEnv = process.env): string[] | undefined {
  return modelLists.known(listKey(settings, env));
}

/** The models the endpoint lists (GET {base_url}/models), or undefined when it doesn't answer. */
export async function listedModels(settings: Settings, o: AskOptions = {}): Promise<string[] | undefined> {
  const env = o.env ?? process.env;
  const clock = o.now ?? Date.now;
  return modelLists.get(
    listKey(settings, env),
    async () => {
      try {
        const signal = AbortSignal.timeout(o.timeoutMs ?? ASK_TIMEOUT_MS);
        const list = ModelList.safeParse(await modelsDocument(settings, env, signal));
        const ids = list.success ? [...new Set(list.data.data.map((m) => m.id.trim()).filter((id) => id.length > 0 && id.length <= 256))].slice(0, 500) : undefined;
        return { value: ids, failed: !list.success };
      } catch (e) {
        // An endpoint that answers it has no list (404, not JSON) has none: kept as an answer is.
        return { value: undefined, failed: !(e instanceof NotThis) };
      }
    },
    clock,
  );
}

/** Waits for the asks under way in the background. */
export async function settleRuntimeAsks(): Promise<void> {
  await Promise.all([runtimeAnswers.settled(), modelLists.settled()]);
}

/** Forgets every answer kept (tests, and a process that wants to ask again now). */
export function forgetRuntimeAnswers(): void {
  runtimeAnswers.clear();
  modelLists.clear();
  modelDocuments.clear();
}
