// `lnk-link-harness facts [MODEL]`: the window and answer share a turn would use for the agent's model
// (or MODEL), and where each came from: the spec's `lnk model facts`, seen from the harness's side.
import type { Settings } from "../protocol/index.js";
import { readSettings } from "../store/index.js";
import { modelWindow, yourFactsPath, type ModelWindow, type Sourced } from "../turn/facts.js";
import { endpointName } from "../turn/runtime.js";
import { UsageError, agentRef, type AgentOptions } from "./cli.js";

const RUNTIME_NAMES = { ollama: "Ollama", "llama.cpp": "llama.cpp's server", vllm: "vLLM", lmstudio: "LM Studio" } as const;

const tokens = (n: number) => `${n.toLocaleString("en-US")} tokens`;

function entry(s: Sourced<unknown>, path: string): string {
  return s.from === "yours" ? `your file, entry "${s.entry}" (${path})` : `Link's facts, entry "${s.entry}"`;
}

/** Where the model's own window came from (the layers below the settings). */
function modelSource(w: ModelWindow, path: string): string {
  switch (w.modelSource) {
    case "yours":
    case "link":
      return w.facts.window ? entry(w.facts.window, path) : w.modelSource;
    case "runtime":
      return w.runtime ? `the runtime: ${RUNTIME_NAMES[w.runtime.runtime]} at ${w.runtime.at} (${w.runtime.how})` : "the runtime";
    case "unknown":
      return "nobody described this model: the unknown window (window.unknown, else 32,768)";
    default: {
      const never: never = w.modelSource;
      return String(never);
    }
  }
}

function windowLine(w: ModelWindow, path: string): string {
  switch (w.source) {
    case "settings":
      return `${tokens(w.window)}: the settings' window.max, taken as set`;
    case "link-max":
      return `${tokens(w.window)}: Link's max (window.link_max), held to the model's ${tokens(w.modelWindow)} from ${modelSource(w, path)}`;
    default:
      return `${tokens(w.window)}: ${modelSource(w, path)}`;
  }
}

function answerLine(w: ModelWindow, settings: Settings, path: string): string {
  const longest = w.longest ? `the model's longest, ${tokens(w.longest.value)} from ${entry(w.longest, path)}` : undefined;
  if (w.answerSource === "settings") {
    const key = settings.model.answer !== undefined ? "model.answer" : "window.answer";
    const asked = settings.model.answer ?? settings.window?.answer ?? w.answer;
    return asked > w.answer && longest ? `${tokens(w.answer)}: the settings' ${key} (${asked}), held to ${longest}` : `${tokens(w.answer)}: the settings' ${key}, taken as set`;
  }
  return `${tokens(w.answer)}: the default (4,096), at most ${longest ? `${longest} and ` : ""}a quarter of the window`;
}

export async function factsReport(o: AgentOptions, model: string | undefined): Promise<string> {
  const settings = readSettings(agentRef(o));
  if (!settings) throw new UsageError(`the agent at ${o.agent} has no settings: run lnk-link-harness configure --agent ${o.agent}`);
  const name = model ?? settings.model.name;
  const w = await modelWindow(settings, name);
  const path = yourFactsPath();
  const lines = [
    ["model", `${name}${model === undefined || model === settings.model.name ? " (the agent's model)" : ""}, of ${settings.model.provider} at ${endpointName(settings.model.base_url)}`],
    ["window", windowLine(w, path)],
    ...(w.noRuntime && w.source !== "settings" ? [["runtime", w.noRuntime]] : []),
    ["answer", answerLine(w, settings, path)],
    ["inputs", `${w.inputs.join(", ")}: ${w.inputsFrom ? entry(w.inputsFrom, path) : "nobody said, so each part is sent and the provider decides"}`],
    ["your file", path],
  ];
  return lines.map(([k, v]) => `${(k ?? "").padEnd(10)} ${v ?? ""}\n`).join("");
}
