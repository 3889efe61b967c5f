// A model's window: from your facts file, a runtime's report, Link's facts, or the unknown window.
// Spec: "Where does a model's window come from?" (decisions.txt).
import { existsSync, statSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { homedir } from "node:os";
import { join } from "node:path";
import { parse as parseToml } from "smol-toml";
import { MODEL_INPUTS, ModelFacts, describeIssues, type ModelFact, type ModelInput, type Settings } from "../protocol/index.js";
import { readNoFollow } from "../store/index.js";
import { runtimeWindow, type RuntimeAnswer, type RuntimeFound } from "./runtime.js";

export const UNKNOWN_WINDOW = 32_768;
export const DEFAULT_ANSWER = 4_096;

// From the sources (turn/) or the build (dist/turn/): the data file stays in protocol/.
const SHIPPED = [new URL("../protocol/model-facts.toml", import.meta.url), new URL("../../protocol/model-facts.toml", import.meta.url)];
const shippedPath = () => SHIPPED.find((u) => existsSync(u)) ?? SHIPPED[0]!;

/**
 * Link's facts as the agent's bundle holds them: the shipped file read, checked and lowercased when
 * the bundle was built (scripts/bundle.ts), where parsing its TOML and checking it against the
 * schema cost a session's first turn some 6 ms. Undefined outside the bundle: the file is read.
 */
declare const __LNK_SHIPPED_FACTS__: string | undefined;

/** Link's facts, read from the shipped file, checked, each name lowercased (what the bundle holds). */
export function readShippedFacts(): Record<string, ModelFact> {
  return loadFacts(shippedPath(), true);
}

function shippedFacts(): Record<string, ModelFact> {
  if (typeof __LNK_SHIPPED_FACTS__ !== "string") return readShippedFacts();
  // No prototype, as loadFacts makes it.
  const out = Object.create(null) as Record<string, ModelFact>;
  // Checked against ModelFacts by readShippedFacts when the bundle was built, and part of its code since.
  // eslint-disable-next-line no-restricted-syntax
  const held = JSON.parse(__LNK_SHIPPED_FACTS__) as Record<string, ModelFact>;
  for (const [k, v] of Object.entries(held)) out[k] = v;
  return out;
}

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
  // No prototype: an entry named __proto__ is an entry like any other.
  const out = Object.create(null) as Record<string, ModelFact>;
  for (const [k, v] of Object.entries(parsed.data.models)) out[k.toLowerCase()] = v;
  return out;
}

let shipped: Record<string, ModelFact> | undefined;
/** Your file as last read, per path, with the stat it was read at: read again when that changes. */
const yours = new Map<string, { stamp: string; facts: Record<string, ModelFact> }>();

/** Your facts file: $XDG_CONFIG_HOME/lnk/model-facts.toml, else ~/.config/lnk/model-facts.toml. */
export function yourFactsPath(env: NodeJS.ProcessEnv = process.env): string {
  return join(env.XDG_CONFIG_HOME || join(env.HOME || homedir(), ".config"), "lnk", "model-facts.toml");
}

/** Your facts as they are now: one stat a turn, the file parsed again only when it changed. */
function yourFacts(path: string): Record<string, ModelFact> {
  let stamp: string;
  try {
    // Missing, as it mostly is: undefined, rather than an error made at every turn.
    const st = statSync(path, { bigint: true, throwIfNoEntry: false });
    stamp = st === undefined ? "absent" : `${st.ino}:${st.size}:${st.mtimeNs}:${st.ctimeNs}`;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== "ENOTDIR") throw new FactsError(`cannot read model facts ${path}: ${(e as Error).message}`);
    stamp = "absent";
  }
  const kept = yours.get(path);
  if (kept?.stamp === stamp) return kept.facts;
  const facts = stamp === "absent" ? {} : loadFacts(path, false);
  yours.set(path, { stamp, facts });
  return facts;
}

/** Whose entry a fact came from: your file's or Link's. */
export type FactsFile = "yours" | "link";

/** A fact, with the entry it came from. */
export interface Sourced<T> {
  value: T;
  from: FactsFile;
  /** The entry's name in its file. */
  entry: string;
}

/** Each field of a model's facts, each from the most specific entry that has it. */
export interface LayeredFacts {
  window?: Sourced<number>;
  answer?: Sourced<number>;
  inputs?: Sourced<ModelInput[]>;
}

/**
 * The entries a model name takes, the most specific first: its own (with any provider prefix, then
 * without), then each entry it starts with at a separator (- . : / @), longer before shorter.
 */
export function matches(facts: Record<string, ModelFact>, model: string): { entry: string; fact: ModelFact; specificity: number }[] {
  const name = model.toLowerCase();
  const bare = name.includes("/") ? name.slice(name.lastIndexOf("/") + 1) : name;
  const out: { entry: string; fact: ModelFact; specificity: number }[] = [];
  for (const [key, fact] of Object.entries(facts)) {
    // An exact name is more specific than any entry it merely starts with.
    if (key === name) out.push({ entry: key, fact, specificity: 2 * 1e6 + key.length });
    else if (key === bare) out.push({ entry: key, fact, specificity: 1e6 + key.length });
    else if (bare.length > key.length && bare.startsWith(key) && "-.:/@".includes(bare[key.length] ?? "")) out.push({ entry: key, fact, specificity: key.length });
  }
  return out.sort((a, b) => b.specificity - a.specificity);
}

/** The entry a model name takes in one file: its most specific (kept for callers that read one file). */
export function lookup(facts: Record<string, ModelFact>, model: string): ModelFact | undefined {
  return matches(facts, model)[0]?.fact;
}

/**
 * A model's facts, field by field: for each field, the most specific entry of either file that has
 * it; at equal specificity yours wins. So your `qwen3` window doesn't shadow Link's `qwen3-coder`
 * for qwen3-coder, and your `qwen3-coder` answer changes only its answer.
 */
export function layeredFacts(model: string, env: NodeJS.ProcessEnv = process.env): LayeredFacts {
  const candidates = [
    ...matches(yourFacts(yourFactsPath(env)), model).map((m) => ({ ...m, from: "yours" as const })),
    ...shippedMatches(model).map((m) => ({ ...m, from: "link" as const })),
  ].sort((a, b) => b.specificity - a.specificity || (a.from === b.from ? 0 : a.from === "yours" ? -1 : 1));
  const out: LayeredFacts = {};
  for (const field of ["window", "answer", "inputs"] as const) {
    const c = candidates.find((m) => m.fact[field] !== undefined);
    if (c) (out as Record<string, Sourced<unknown>>)[field] = { value: c.fact[field], from: c.from, entry: c.entry };
  }
  return out;
}

/** Link's entries a model name takes, found once per name: the shipped file never changes in a process. */
const shippedFound = new Map<string, ReturnType<typeof matches>>();
const SHIPPED_FOUND_KEPT = 256;

function shippedMatches(model: string): ReturnType<typeof matches> {
  let found = shippedFound.get(model);
  if (!found) {
    shipped ??= shippedFacts();
    found = matches(shipped, model);
    if (shippedFound.size >= SHIPPED_FOUND_KEPT) shippedFound.clear();
    shippedFound.set(model, found);
  }
  return found;
}

/** Forgets every facts file as read (tests; an edit of yours is seen anyway, by its stat). */
export function forgetFacts(): void {
  yours.clear();
  shipped = undefined;
  shippedFound.clear();
}

/** Where a window came from. */
export type WindowSource = "settings" | "link-max" | "yours" | "runtime" | "link" | "unknown";
/** Where an answer's share came from: the settings, or the default (bounded by the model's longest and the window). */
export type AnswerSource = "settings" | "default";

export interface ModelWindow {
  /** The model these are for. */
  model: string;
  /** The model's window, in tokens. */
  window: number;
  /** Where the window came from. */
  source: WindowSource;
  /** The window the model takes, as the layers below the settings say (what link_max is held to). */
  modelWindow: number;
  modelSource: Exclude<WindowSource, "settings" | "link-max">;
  /** What the runtime said, when it was asked and answered. */
  runtime?: RuntimeAnswer;
  /** Why the runtime said nothing, when it was asked. */
  noRuntime?: string;
  /** The answer's share. */
  answer: number;
  answerSource: AnswerSource;
  /** The model's longest answer, and whose entry said it. */
  longest?: Sourced<number>;
  /** What the model reads, and whose entry said it (left out: nobody said, and every input is sent). */
  inputs: readonly ModelInput[];
  inputsFrom?: Sourced<ModelInput[]>;
  /** The facts as layered, for a report. */
  facts: LayeredFacts;
}

/** What a runtime says (turn/runtime.ts), or a stand-in for tests. */
export type RuntimeReport = (settings: Settings, model: string) => Promise<RuntimeFound>;

/**
 * The window and the answer's share for `model` (the conversation's, else the settings'):
 * the window you or a team set (window.max) as set; else the model's window, held under Link's own
 * max (window.link_max). The model's window: your file's entry when it is the most specific that
 * has one, else what a runtime on the machine says, else Link's entry, else the unknown window.
 */
export async function modelWindow(settings: Settings, model: string, o: { report?: RuntimeReport; env?: NodeJS.ProcessEnv } = {}): Promise<ModelWindow> {
  const env = o.env ?? process.env;
  const report = o.report ?? ((s: Settings, m: string) => runtimeWindow(s, m, { env }));
  const facts = layeredFacts(model, env);
  const set = settings.window?.max;
  let modelWin: number;
  let modelSource: ModelWindow["modelSource"];
  let runtime: RuntimeFound | undefined;
  if (facts.window?.from === "yours") [modelWin, modelSource] = [facts.window.value, "yours"];
  else {
    // The window you set needs nothing more: no runtime is asked.
    runtime = set === undefined ? await report(settings, model) : undefined;
    if (runtime?.answer) [modelWin, modelSource] = [runtime.answer.window, "runtime"];
    else if (facts.window) [modelWin, modelSource] = [facts.window.value, "link"];
    else [modelWin, modelSource] = [settings.window?.unknown ?? UNKNOWN_WINDOW, "unknown"];
  }
  let window: number;
  let source: WindowSource;
  if (set !== undefined) [window, source] = [set, "settings"];
  else if (settings.window?.link_max !== undefined && settings.window.link_max < modelWin) [window, source] = [settings.window.link_max, "link-max"];
  else [window, source] = [modelWin, modelSource];

  const longest = facts.answer;
  const asked = settings.model.answer ?? settings.window?.answer;
  let answer: number;
  let answerSource: AnswerSource;
  // The share you set is taken as set: the model's longest is its only bound.
  if (asked !== undefined) [answer, answerSource] = [Math.min(asked, longest?.value ?? asked), "settings"];
  else [answer, answerSource] = [Math.max(1, Math.min(DEFAULT_ANSWER, longest?.value ?? DEFAULT_ANSWER, Math.floor(window / 4))), "default"];
  return {
    model,
    window,
    source,
    modelWindow: modelWin,
    modelSource,
    ...(runtime?.answer ? { runtime: runtime.answer } : {}),
    ...(runtime?.none ? { noRuntime: runtime.none } : {}),
    answer,
    answerSource,
    ...(longest ? { longest } : {}),
    inputs: facts.inputs?.value ?? MODEL_INPUTS,
    ...(facts.inputs ? { inputsFrom: facts.inputs } : {}),
    facts,
  };
}

/**
 * What `model` reads, as its window's facts say (`inputs` of modelWindow), found without asking a
 * runtime: a first turn's question is written while the runtime is still asked.
 */
export function modelInputs(model: string, env: NodeJS.ProcessEnv = process.env): readonly ModelInput[] {
  return layeredFacts(model, env).inputs?.value ?? MODEL_INPUTS;
}

/** The margin when the settings' [window] names none: what the rough count may be off by. */
export function defaultMargin(window: number): number {
  return Math.max(256, Math.ceil(window * 0.05));
}

/** The conversation's share of the window: the window less the answer's, the instructions and tools, and the margin. */
export function conversationShare(mw: ModelWindow, fixed: number, settings: Settings): number {
  return Math.max(1, mw.window - mw.answer - fixed - (settings.window?.margin ?? defaultMargin(mw.window)));
}
