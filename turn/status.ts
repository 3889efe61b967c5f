// /status: what a conversation is and holds, worked out as its next turn would (the same sections,
// window and count), so every figure is the one the turn uses.
import type { Numbered, Settings, Usage } from "../protocol/index.js";
import { paths, type AgentRef } from "../store/index.js";
import { conversationShare, modelWindow } from "./facts.js";
import { History } from "./history.js";
import { conversationUsage } from "./usage.js";
import { composeSections, systemPrompt } from "./sections.js";
import { roughTokens } from "./window.js";
import { redactor, settingsSecrets } from "./redact.js";
import { endpointName } from "./runtime.js";

export interface StatusInput {
  agent: AgentRef;
  thread: string;
  settings: Settings | undefined;
  /** The agent's model as `/model:set --agent` set it in this process. */
  agentModel?: string;
  /** The session's working folder (a repository's instructions count in the prompt). */
  cwd?: string;
  /** The names of the tools the conversation reaches. */
  tools: readonly string[];
}

const human = (n: number): string => n.toLocaleString("en-US");

/** The last turn's figures: its requests and the provider's own counts, summed; the cost when reported. */
export function lastTurnUsage(events: readonly Numbered[]): { requests: number; usage?: Usage; cost?: number; unpriced: number } {
  let start = events.length;
  for (let i = events.length - 1; i >= 0; i--) {
    const e = events[i]?.event;
    if (e?.kind === "message" && e.role === "user") {
      start = i;
      break;
    }
  }
  let requests = 0;
  let unpriced = 0;
  let usage: Usage | undefined;
  let cost: number | undefined;
  for (const { event } of events.slice(start)) {
    if (event.kind !== "message" || event.role !== "assistant") continue;
    requests++;
    if (event.usage) usage = { in: (usage?.in ?? 0) + event.usage.in, out: (usage?.out ?? 0) + event.usage.out, cached: (usage?.cached ?? 0) + event.usage.cached };
    if (event.cost !== undefined) cost = (cost ?? 0) + event.cost;
    else unpriced++;
  }
  return { requests, ...(usage ? { usage } : {}), ...(cost !== undefined ? { cost } : {}), unpriced };
}

export async function statusLines(input: StatusInput): Promise<string[]> {
  const { settings } = input;
  if (!settings) return [`The agent has no settings: run lnk-link-harness configure --agent ${input.agent.dir}`];
  const conv = paths(input.agent).conversation(input.thread);
  const system = systemPrompt(composeSections(input.agent, settings, [], input.cwd));
  const fixed = roughTokens(system);
  const agentModel = input.agentModel ?? settings.model.name;
  const history = await History.load(conv, async (chosen) => conversationShare(await modelWindow(settings, chosen ?? agentModel), fixed, settings));
  const model = history.model ?? agentModel;
  const mw = await modelWindow(settings, model);
  const whose =
    history.model !== undefined ? "this conversation's, by /model:set" : input.agentModel !== undefined ? "the agent's, by /model:set --agent until it starts again" : "the agent's";
  const inWindow = history.count.total - history.count.tokensBefore;
  const windowEvents = history.window();
  const last = lastTurnUsage(history.events);
  const lines = [
    `Conversation: ${history.conversation ?? "main"} of chat ${input.thread}`,
    `Model: ${model} (${whose}), provider ${settings.model.provider}, at ${redactor(settingsSecrets(settings)).redact(endpointName(settings.model.base_url))}`,
    `Window: ${human(mw.window)} tokens (from ${mw.source === "yours" ? "your facts file" : mw.source === "link" ? "Link's facts" : mw.source === "runtime" ? "the model's runtime" : mw.source === "settings" ? "the settings" : "nowhere: the unknown default"}); the answer's share ${human(mw.answer)} (${mw.answerSource === "settings" ? "as the settings set it" : "the default"}), the instructions ${human(fixed)}, the conversation's ${human(history.budget)}`,
    `In the window: about ${human(inWindow)} tokens, ${windowEvents.length} events${history.count.start !== undefined ? ` from event ${history.count.start}` : ""}`,
  ];
  if (last.requests === 0) lines.push("Last turn: none yet");
  else {
    const u = last.usage;
    const counts = u ? `${human(u.in)} in, ${human(u.out)} out, ${human(u.cached)} cached` : "no counts reported";
    const cost = last.cost !== undefined ? `, cost ${last.cost}${last.unpriced ? ` (${last.unpriced} requests unpriced)` : ""}` : "";
    lines.push(`Last turn: ${last.requests} request${last.requests === 1 ? "" : "s"}, ${counts}${cost}`);
  }
  // The chat's figures so far, from the code `lnk-link-harness usage` prints them with: they agree.
  const all = conversationUsage(conv);
  const share = all.cached_share === null ? "-" : `${(all.cached_share * 100).toFixed(1)}%`;
  const cost = all.cost !== undefined ? `, cost ${all.cost}${all.turns_without_cost ? ` (${all.turns_without_cost} turns without a reported cost)` : ""}` : ", no cost reported";
  lines.push(
    `This chat so far: ${all.turns} turns, ${all.requests} requests, ${human(all.tokens.in)} in, ${human(all.tokens.out)} out, ${human(all.tokens.cached)} cached (cached share ${share})${cost}; lnk-link-harness usage tells more`,
  );
  lines.push(`Tools: ${input.tools.length ? input.tools.join(", ") : "none"}`);
  return lines;
}
