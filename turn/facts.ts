// A model's window: from your facts file, a runtime's report, Link's facts, or the unknown window.
// Spec: "Where does a model's window come from?" (decisions.txt).
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { homedir } from "node:os";
import { join } from "node:path";
import { parse as parseToml } from "smol-toml";
import { ModelFacts, describeIssues, type ModelFact, type Settings } from "../protocol/index.js";
import { readNoFollow } from "../store/index.js";

export const UNKNOWN_WINDOW = 32_768;
export const DEFAULT_ANSWER = 4_096;
/** Ollama's context when nothing sets num_ctx on a small machine (NOTES.md). */
export const OLLAMA_DEFAULT_CONTEXT = 4_096;

// From the sources (turn/) or the build (dist/turn/): the data file stays in protocol/.
const SHIPPED = [new URL("../protocol/model-facts.toml", import.meta.url), new URL("../../protocol/model-facts.toml", import.meta.url)];
const shippedPath = () => SHIPPED.find((u) => existsSync(u)) ?? SHIPPED[0]!;

export class FactsError extends Error {}

/** The most of a facts file read: Link's own is a few KiB. */
const FACTS_MAX = 1024 * 1024;

function loadFacts(path: string | URL, required: boolean): Record<string, ModelFact> {
  let text: string;
  try {
    // Without waiting (a FIFO there would stop the daemon), a regular file only, and bounded.
    text = readNoFollow(typeof path === "string" ? path : fileURLToPath(path), { max: FACTS_MAX, follow: true });
  } catch (e) {
    if (!required && (e as NodeJS.ErrnoException).code === "ENOENT") return {};
    throw new FactsError(`cannot read model facts ${String(path)}: ${(e as Error).message}`);
  }
  let raw: unknown;
  try {
    raw = parseToml(text);
  } catch (e) {
    throw new FactsError(`model facts ${String(path)}: ${(e as Error).message.split("\n")[0]}`);
  }
  const parsed = ModelFacts.safeParse(raw);
  if (!parsed.success) throw new FactsError(`model facts ${String(path)}: ${describeIssues(parsed.error)}`);
  const out: Record<string, ModelFact> = {};
  for (const [k, v] of Object.entries(parsed.data.models)) out[k.toLowerCase()] = v;
  return out;
}

let shipped: Record<string, ModelFact> | undefined;
const yours = new Map<string, { mtimeKey: string; facts: Record<string, ModelFact> }>();

/** Your facts file: $XDG_CONFIG_HOME/lnk/model-facts.toml, else ~/.config/lnk/model-facts.toml. */
export function yourFactsPath(env: NodeJS.ProcessEnv = process.env): string {
  return join(env.XDG_CONFIG_HOME || join(env.HOME || homedir(), ".config"), "lnk", "model-facts.toml");
}

/** The entry a model name takes: its own, else the longest entry it starts with at a separator. */
export function lookup(facts: Record<string, ModelFact>, model: string): ModelFact | undefined {
  const name = model.toLowerCase();
  const bare = name.includes("/") ? name.slice(name.lastIndexOf("/") + 1) : name;
  for (const candidate of [name, bare]) {
    const exact = facts[candidate];
    if (exact) return exact;
  }
  let best: string | undefined;
  for (const key of Object.keys(facts)) {
    if (bare.length > key.length && bare.startsWith(key) && "-.:/@".includes(bare[key.length] ?? "") && (!best || key.length > best.length)) {
      best = key;
    }
  }
  return best ? facts[best] : undefined;
}

export interface ModelFactsView {
  /** Link's shipped facts and yours, separately: yours wins field by field. */
  shipped: ModelFact | undefined;
  yours: ModelFact | undefined;
}

export function factsFor(model: string, env: NodeJS.ProcessEnv = process.env): ModelFactsView {
  shipped ??= loadFacts(shippedPath(), true);
  const path = yourFactsPath(env);
  let entry = yours.get(path);
  if (!entry) {
    entry = { mtimeKey: path, facts: loadFacts(path, false) };
    yours.set(path, entry);
  }
  return { shipped: lookup(shipped, model), yours: lookup(entry.facts, model) };
}

/** Forgets your facts as read, so an edit is seen (tests, and `lnk model facts` refreshes). */
export function forgetFacts(): void {
  yours.clear();
}

/** What a runtime on the machine says it runs the model with (Ollama), or undefined. */
export type RuntimeReport = (settings: Settings) => Promise<number | undefined>;

const reports = new Map<string, number | undefined>();

/**
 * Ollama: the trained window from /api/show, counted only up to the context Ollama runs a model
 * with unless told (its default, or OLLAMA_CONTEXT_LENGTH), unless the settings say otherwise.
 */
export const ollamaReport: RuntimeReport = async (settings) => {
  const base = settings.model.base_url.replace(/\/v1\/?$/, "");
  const isOllama = settings.model.provider.toLowerCase() === "ollama" || /:11434(\/|$)/.test(settings.model.base_url);
  if (!isOllama) return undefined;
  const key = `${base} ${settings.model.name}`;
  if (reports.has(key)) return reports.get(key);
  let trained: number | undefined;
  try {
    const res = await fetch(`${base}/api/show`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: settings.model.name }),
      signal: AbortSignal.timeout(2_000),
    });
    if (res.ok) {
      const body: unknown = await res.json();
      const info = (body as { model_info?: Record<string, unknown> }).model_info ?? {};
      for (const [k, v] of Object.entries(info)) {
        if (k.endsWith(".context_length") && typeof v === "number") trained = v;
      }
    }
  } catch {
    trained = undefined;
  }
  const runsWith = Number(process.env.OLLAMA_CONTEXT_LENGTH) || OLLAMA_DEFAULT_CONTEXT;
  const window = trained === undefined ? undefined : settings.window?.trained ? trained : Math.min(trained, runsWith);
  reports.set(key, window);
  return window;
};

export interface ModelWindow {
  /** The model's window, in tokens. */
  window: number;
  /** The answer's share. */
  answer: number;
  /** Where the window came from. */
  source: "settings" | "yours" | "runtime" | "link" | "unknown";
}

/** The window and the answer's share for the settings' model (or the conversation's). */
export async function modelWindow(settings: Settings, model: string, report: RuntimeReport = ollamaReport, env = process.env): Promise<ModelWindow> {
  const facts = factsFor(model, env);
  const longest = facts.yours?.answer ?? facts.shipped?.answer;
  let window: number;
  let source: ModelWindow["source"];
  const runtime = settings.window?.max === undefined && facts.yours?.window === undefined ? await report(settings) : undefined;
  if (settings.window?.max !== undefined) [window, source] = [settings.window.max, "settings"];
  else if (facts.yours?.window !== undefined) [window, source] = [facts.yours.window, "yours"];
  else if (runtime !== undefined) [window, source] = [runtime, "runtime"];
  else if (facts.shipped?.window !== undefined) [window, source] = [facts.shipped.window, "link"];
  else [window, source] = [settings.window?.unknown ?? UNKNOWN_WINDOW, "unknown"];
  let answer = settings.model.answer ?? settings.window?.answer ?? DEFAULT_ANSWER;
  if (longest !== undefined) answer = Math.min(answer, longest);
  // An answer's share can't take the whole window.
  answer = Math.min(answer, Math.floor(window / 4));
  return { window, answer, source };
}

/** The margin when the settings' [window] names none: what the rough count may be off by. */
export function defaultMargin(window: number): number {
  return Math.max(256, Math.ceil(window * 0.05));
}

/** The conversation's share of the window: the window less the answer's, the instructions and tools, and the margin. */
export function conversationShare(mw: ModelWindow, fixed: number, settings: Settings): number {
  return Math.max(1, mw.window - mw.answer - fixed - (settings.window?.margin ?? defaultMargin(mw.window)));
}
